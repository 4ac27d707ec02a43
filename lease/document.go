package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Documents are small documents every replica reads and any may replace, only over the version it
// read (compare and swap): the review gate's state and the planned pull request heads, which must be
// the same on every replica (docs/replicas.md#the-review-gate). No lease fences them: two writers of
// one version cannot both land, so nothing one wrote is lost to another's older copy.

const documentSchema = `
CREATE TABLE IF NOT EXISTS stands_documents (
	name       TEXT PRIMARY KEY,
	body       BYTEA NOT NULL,
	version    BIGINT NOT NULL,
	updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);`

// Document is one named document of the store.
type Document struct {
	db   *sql.DB
	name string
}

// Document is the document called name.
func (s *Store) Document(name string) *Document { return &Document{db: s.db, name: name} }

// Load reads the document when its version is not known (0 when there is none yet). body is nil
// when the version is known: a reader that has it reads nothing more.
func (d *Document) Load(ctx context.Context, known int64) (body []byte, version int64, err error) {
	err = d.db.QueryRowContext(ctx, `SELECT version, CASE WHEN version <> $2 THEN body END FROM stands_documents WHERE name = $1`,
		d.name, known).Scan(&version, &body)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("read %s: %w", d.name, err)
	}
	return body, version, nil
}

// Save replaces the document read at version (0: none yet) with body, and returns its new version;
// ok is false, and nothing changes, when another wrote it since.
func (d *Document) Save(ctx context.Context, body []byte, version int64) (next int64, ok bool, err error) {
	var res sql.Result
	if version == 0 {
		res, err = d.db.ExecContext(ctx, `INSERT INTO stands_documents (name, body, version) VALUES ($1, $2, 1)
			ON CONFLICT (name) DO NOTHING`, d.name, body)
	} else {
		res, err = d.db.ExecContext(ctx, `UPDATE stands_documents SET body = $2, version = version + 1, updated_at = now()
			WHERE name = $1 AND version = $3`, d.name, body, version)
	}
	if err != nil {
		return 0, false, fmt.Errorf("write %s: %w", d.name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return version, false, nil
	}
	return version + 1, true, nil
}
