package engine

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy/postgres"
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
