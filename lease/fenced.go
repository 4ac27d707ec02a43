package lease

import (
	"context"
	"fmt"

	"github.com/lib/pq"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Records are what replicas write under their leases for another replica to read (a stand's status,
// for the replica that publishes): a write carries its lease and lands only while that lease is live
// with that token, decided by the database in the write's own statement, so a replica that lost a
// stand can never overwrite what the stand's new holder wrote.

const recordSchema = `
CREATE TABLE IF NOT EXISTS stands_records (
	name       TEXT PRIMARY KEY,
	token      BIGINT NOT NULL,
	holder     TEXT NOT NULL,
	body       BYTEA NOT NULL,
	version    BIGINT NOT NULL DEFAULT 1,
	updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);`

// Put stores body as the record of l's name, if l is still the live lease: otherwise ErrLost and
// nothing changes.
func (s *Store) Put(ctx context.Context, l stands.Lease, body []byte) error {
	res, err := s.db.ExecContext(ctx, `INSERT INTO stands_records (name, token, holder, body)
		SELECT $1, $2, $3, $4 FROM stands_leases WHERE `+CurrentSQL("$1", "$2")+` AND stands_leases.holder = $3
		ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder, body = EXCLUDED.body,
			version = stands_records.version + 1, updated_at = now()
		WHERE stands_records.token <= EXCLUDED.token`, l.Name, l.Token, s.id, body)
	if err != nil {
		return fmt.Errorf("write record %s: %w", l.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("write record %s with token %d: %w", l.Name, l.Token, stands.ErrLeaseLost)
	}
	return nil
}

// Versions is every record's version, by name: what a reader compares with what it read before, so
// it reads again only the records that changed (Records).
func (s *Store) Versions(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, version FROM stands_records`)
	if err != nil {
		return nil, fmt.Errorf("read record versions: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, fmt.Errorf("read record versions: %w", err)
		}
		out[name] = v
	}
	return out, rows.Err()
}

// Records reads the named records (every one when names is nil), by name.
func (s *Store) Records(ctx context.Context, names []string) (map[string]stands.LeaseRecord, error) {
	q, args := `SELECT name, token, holder, body, version, updated_at FROM stands_records`, []any{}
	if names != nil {
		q, args = q+` WHERE name = ANY($1)`, []any{pq.Array(names)}
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	defer rows.Close()
	out := map[string]stands.LeaseRecord{}
	for rows.Next() {
		var r stands.LeaseRecord
		if err := rows.Scan(&r.Name, &r.Token, &r.Holder, &r.Body, &r.Version, &r.Updated); err != nil {
			return nil, fmt.Errorf("read records: %w", err)
		}
		out[r.Name] = r
	}
	return out, rows.Err()
}

// DeleteRecord removes a record under l (a destroyed stand's), if l is still live.
func (s *Store) DeleteRecord(ctx context.Context, l stands.Lease) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM stands_records WHERE name = $1 AND EXISTS
		(SELECT 1 FROM stands_leases WHERE `+CurrentSQL("$1", "$2")+` AND stands_leases.holder = $3)`, l.Name, l.Token, s.id)
	if err != nil {
		return fmt.Errorf("delete record %s: %w", l.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		ok, err := s.Current(ctx, l.Name, l.Token)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("delete record %s with token %d: %w", l.Name, l.Token, stands.ErrLeaseLost)
		}
	}
	return nil
}
