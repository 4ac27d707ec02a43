package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy/postgres"

	"github.com/stands-engine/stands-reconciler/reason"
)

// A postgres:// backend's password never travels in the URL, which the CLI echoes in errors, keeps in
// the project file and passes in its environment: the engine writes it to a pgpass file of its own
// (0600, beside the passphrase's) and names that file in the URL's passfile parameter, which libpq's
// rules, and so lib/pq in the CLI and in this process, read at every new connection.

// ErrPasswordInURL refuses a backend URL that holds a password.
var ErrPasswordInURL = errors.New("the backend URL holds a password: give it as the database password credential instead")

// passfileName is the pgpass file under WorkDir's credential folder.
const passfileName = "pgpass"

// checkBackendURL refuses what must not be in a backend URL and, for postgres:// with a password
// configured, returns the URL naming the engine's pgpass file.
func checkBackendURL(cfg Config) (string, error) {
	u, err := url.Parse(cfg.BackendURL)
	if err != nil {
		return "", errors.New("engine: the backend URL does not parse") // its text may hold a password
	}
	if _, ok := u.User.Password(); ok {
		return "", fmt.Errorf("engine: %s: %w", redactURL(cfg.BackendURL), ErrPasswordInURL)
	}
	if u.Scheme != postgres.PostgresScheme || cfg.DBPassword == nil {
		return cfg.BackendURL, nil
	}
	q := u.Query()
	if q.Get("passfile") != "" {
		return "", errors.New("engine: the backend URL names a passfile and a database password is configured: keep one")
	}
	q.Set("passfile", filepath.Join(cfg.WorkDir, credentialDir, passfileName))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// writePassfile writes the database password, as it is now (a rotated credential file is read
// again), for any host, port, database and user: the URL says which.
func (e *Engine) writePassfile() error {
	if e.cfg.DBPassword == nil {
		return nil
	}
	pw, err := e.cfg.DBPassword()
	if err != nil {
		return fmt.Errorf("read the database password: %w", err)
	}
	if pw == "" || strings.ContainsAny(pw, "\n\r") {
		return errors.New("the database password is empty or has a line break")
	}
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(pw)
	_, err = secretFile(e.cfg.WorkDir, passfileName, "*:*:*:*:"+esc+"\n")
	return err
}

// ErrNotPostgres: coordination needs the state in PostgreSQL.
var ErrNotPostgres = errors.New("the Pulumi backend is not postgres://")

// OpenStateDB opens a connection pool of its own on the postgres:// backend's database, for what
// the replicas coordinate beside the state (package lease), with the backend's password rules: the
// pgpass file named in the URL, never a password in it. The caller closes it.
func (e *Engine) OpenStateDB(ctx context.Context) (*sql.DB, error) {
	u, err := url.Parse(e.cfg.BackendURL)
	if err != nil || u.Scheme != postgres.PostgresScheme {
		return nil, fmt.Errorf("open the state database: %w", ErrNotPostgres)
	}
	if err := e.writePassfile(); err != nil {
		return nil, err
	}
	q := u.Query()
	q.Del("table") // the CLI driver's own parameter; lib/pq would send it to the server as a setting
	u.RawQuery = q.Encode()
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		return nil, fmt.Errorf("open the state database %s: %w", redactURL(e.cfg.BackendURL), err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, reason.Wrap(reason.BackendUnavailable, fmt.Errorf("connect to the state database %s: %w", redactURL(e.cfg.BackendURL), err))
	}
	return db, nil
}
