package testenv

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// Postgres is a real PostgreSQL server on 127.0.0.1 (localserver.Postgres), initdb'd for the test
// in a folder of its own and removed when the test ends. Stop and Start restart it with its data.
type Postgres struct {
	*localserver.Postgres
	db *sql.DB // the test's own pool, for Keys, Put and Has
}

// StartPostgres starts a fresh cluster with the database "stands" (STANDS_PG_BIN names the folder of
// initdb and postgres; else Debian's newest). Without a server it fails under CI and skips elsewhere.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	NeedsServer(t, "PostgreSQL")
	dir, err := localserver.PostgresBinDir(os.Getenv("STANDS_PG_BIN"))
	if err != nil {
		Missing(t, "%v", err)
	}
	p, err := localserver.NewPostgres(context.Background(), dir, "stands")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("postgres log:\n%s", localserver.Tail(filepath.Join(p.Dir, "postgres.log")))
		}
		p.Remove()
	})
	pg := &Postgres{Postgres: p}
	pg.db = pg.DB(t)
	return pg
}

// PasswordFunc hands the password as a credential does (engine.Config.DBPassword).
func (p *Postgres) PasswordFunc() func() (string, error) {
	return func() (string, error) { return p.Password, nil }
}

// DB is a connection pool to the test's database, closed when the test ends.
func (p *Postgres) DB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", p.DSN(p.Database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Stop shuts the server down (fast: sessions are ended); its address refuses connections until Start.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	p.Postgres.Stop()
}

// Start serves the same data on the same address again.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	if err := p.Postgres.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Keys lists every key of the Pulumi state table.
func (p *Postgres) Keys(t testing.TB) []string {
	t.Helper()
	rows, err := p.db.Query("SELECT key FROM pulumi_state ORDER BY key")
	if err != nil {
		t.Fatalf("list the state table: %v", err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// Put writes a key as the CLI's driver does (JSON holding the bytes in base64), as another process would.
func (p *Postgres) Put(t testing.TB, key string, data []byte) {
	t.Helper()
	doc, _ := json.Marshal(map[string]string{"data": base64.StdEncoding.EncodeToString(data)})
	if _, err := p.db.Exec("INSERT INTO pulumi_state (key, data) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET data = $2, updated_at = now()", key, string(doc)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// Has says whether the key exists.
func (p *Postgres) Has(t testing.TB, key string) bool {
	t.Helper()
	var n int
	if err := p.db.QueryRow("SELECT count(*) FROM pulumi_state WHERE key = $1", key).Scan(&n); err != nil {
		t.Fatalf("look up %s: %v", key, err)
	}
	return n > 0
}
