// Package credential reads a secret setting the one way this program accepts one: KEY in the
// environment, or KEY_FILE naming a file (systemd's LoadCredential=, a mounted secret). Setting both
// is an error naming both, so nobody wonders which one won; a secret is never a command-line flag.
// A file is watched and read again when it changes, so a rotated credential needs no restart.
package credential

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/fswatch"
)

// ErrNotSet is returned by Read when neither KEY nor KEY_FILE is set.
var ErrNotSet = errors.New("not set")

// Source is where a credential comes from: its value, or the file that holds it, for a client that
// reads the file itself at each use (Vault's token and AppRole secret id).
func Source(getenv func(string) string, key string) (value, file string, err error) {
	value, file = getenv(key), getenv(key+"_FILE")
	if value != "" && file != "" {
		return "", "", fmt.Errorf("both %s and %s_FILE are set: set one", key, key)
	}
	return value, file, nil
}

func readFile(key, file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read %s_FILE: %w", key, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// Read is the credential's value now, for one-shot commands. Neither set: ErrNotSet, wrapped with
// the names to set.
func Read(getenv func(string) string, key string) (string, error) {
	value, file, err := Source(getenv, key)
	switch {
	case err != nil:
		return "", err
	case file != "":
		return readFile(key, file)
	case value == "":
		return "", fmt.Errorf("%s (or %s_FILE) is %w", key, key, ErrNotSet)
	}
	return value, nil
}

// Credential is a credential kept current for a long-running process.
type Credential struct {
	key, file string
	log       *slog.Logger
	stop      context.CancelFunc
	done      <-chan struct{}

	mu    sync.Mutex
	value string
	err   error
}

// Watch reads the credential and, when it comes from a file, keeps reading that file as it changes
// until Close. Neither set is not an error here: Set reports it, for settings that are optional.
func Watch(getenv func(string) string, key string, log *slog.Logger) (*Credential, error) {
	value, file, err := Source(getenv, key)
	if err != nil {
		return nil, err
	}
	c := &Credential{key: key, file: file, value: value, log: log}
	if file == "" {
		return c, nil
	}
	if c.value, c.err = readFile(key, file); c.err != nil {
		return nil, c.err
	}
	ctx, stop := context.WithCancel(context.Background())
	done, err := fswatch.Start(ctx, []string{filepath.Dir(file)}, 100*time.Millisecond, c.reload, func(err error) {
		log.Warn("stopped watching a credential file; its last value stays in use", "setting", key+"_FILE", "err", err)
	})
	if err != nil {
		stop()
		log.Warn("not watching a credential file; it is read at start only", "setting", key+"_FILE", "err", err)
		return c, nil
	}
	c.stop, c.done = stop, done
	return c, nil
}

func (c *Credential) reload() {
	v, err := readFile(c.key, c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = err // the file is being replaced, or gone: callers see why
		return
	}
	if c.value != "" && v != c.value {
		c.log.Info("credential file changed; using the new value", "setting", c.key+"_FILE")
	}
	c.value, c.err = v, nil
}

// Value is the current value.
func (c *Credential) Value() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value, c.err
}

// Set reports whether the credential has a value now.
func (c *Credential) Set() bool {
	v, err := c.Value()
	return err == nil && v != ""
}

// Close stops watching the file and waits until the watcher is gone.
func (c *Credential) Close() error {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
	return nil
}
