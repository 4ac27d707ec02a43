package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/logging"
)

// Settings are what every command that runs Pulumi is configured with, as plain values: the flags
// and variables of docs/operations.md. The secrets are read from the environment (Env) by the
// credential rule: KEY or KEY_FILE, never both.
type Settings struct {
	Owner      string // the owner of the stands and of the default backend
	StateDir   string // local state: the default backend, plugins, configsets
	Backend    string // "" is file://<StateDir>/pulumi/<owner>
	Pulumi     string // the Pulumi CLI; "": bin/pulumi beside this binary, then PATH
	Cloud      string // the cloud the servers live in: provider.DefaultCloud ("" too)
	Endpoint   string // the cloud's API; "": the cloud's own
	Nodes      string // full or skip
	Configsets string // "" is <StateDir>/configsets
	LockLease  time.Duration
}

// NodesModes are the values Settings.Nodes takes.
var NodesModes = []string{"full", "skip"}

// Check refuses what New would: a cloud or a node mode it does not know, a password in the
// backend's URL.
func (s Settings) Check() error {
	if err := s.CheckCloud(); err != nil {
		return fmt.Errorf("--cloud=%s: %w", s.Cloud, err)
	}
	if !slices.Contains(NodesModes, s.Nodes) {
		return fmt.Errorf("--nodes=%s: want full or skip", s.Nodes)
	}
	if err := CheckBackendURL(s.Backend); err != nil {
		return fmt.Errorf("--backend %s %w", logging.RedactPassword(s.Backend), err)
	}
	return nil
}

// CheckCloud refuses a cloud this build does not ship.
func (s Settings) CheckCloud() error {
	if known := provider.Clouds(nil).Names(); s.Cloud != "" && !slices.Contains(known, s.Cloud) {
		return fmt.Errorf("this build knows %s", strings.Join(known, ", "))
	}
	return nil
}

// CheckBackendURL refuses a password in a backend's URL: it goes in a credential file instead,
// never where a command line or a log shows it.
func CheckBackendURL(backend string) error {
	if u, err := url.Parse(backend); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return errors.New("holds a password: remove it and set $STANDS_DB_PASSWORD_FILE (or credentials.db-password in --config)")
		}
	}
	return nil
}

// FromSettings makes the engine for owner from the settings, reading the passphrase and the
// cloud's token from env. It returns the passphrase too: it keys the spec hash.
func FromSettings(s Settings, env func(string) string, owner string, log *slog.Logger, tune ...func(*Config)) (*Engine, string, error) {
	if err := s.Check(); err != nil {
		return nil, "", err
	}
	pass, err := credential.Read(env, "STANDS_PASSPHRASE")
	if err != nil {
		return nil, "", err
	}
	token, err := credential.Read(env, "HCLOUD_TOKEN")
	if err != nil {
		return nil, "", err
	}
	bin, err := s.PulumiBin()
	if err != nil {
		return nil, "", err
	}
	stateDir, err := filepath.Abs(s.StateDir)
	if err != nil {
		return nil, "", err
	}
	backend := s.Backend
	if backend == "" {
		backend = "file://" + filepath.Join(stateDir, "pulumi", owner)
	}
	if dir, ok := strings.CutPrefix(backend, "file://"); ok {
		// A folder backend chosen (or the daemon's default) is made, as state folders are: the
		// Pulumi CLI and fileblob both refuse a missing one.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", fmt.Errorf("create backend folder: %w", err)
		}
	}
	cfg := Config{PulumiBin: bin, BackendURL: backend, Passphrase: pass, Cloud: s.Cloud, CloudToken: token,
		CloudEndpoint: s.Endpoint, WorkDir: stateDir, Log: log, LockLease: s.LockLease,
		SkipNodes: s.Nodes == "skip", ConfigsetDir: filepath.Join(stateDir, "configsets")}
	if s.Configsets != "" {
		if cfg.ConfigsetDir, err = filepath.Abs(s.Configsets); err != nil {
			return nil, "", err
		}
	}
	if DBPasswordSet(env) {
		// read at each use: a rotated credential file needs no restart
		cfg.DBPassword = func() (string, error) { return credential.Read(env, "STANDS_DB_PASSWORD") }
	}
	for _, t := range tune {
		t(&cfg)
	}
	e, err := New(cfg)
	return e, pass, err
}

// DBPasswordSet says whether a database password is configured; without one, lib/pq's own ways
// apply (a pgpass file named in the URL, PGPASSFILE, ~/.pgpass, or none for trust and
// certificates). An empty credential file is none: the unit loads db-password whether or not the
// backend needs one.
func DBPasswordSet(env func(string) string) bool {
	v, err := credential.Read(env, "STANDS_DB_PASSWORD")
	return err == nil && v != ""
}

// PulumiBin is the Pulumi CLI the settings name: --pulumi, else bin/pulumi beside this binary,
// else the one on PATH.
func (s Settings) PulumiBin() (string, error) {
	if s.Pulumi != "" {
		return filepath.Abs(s.Pulumi)
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "pulumi"); fileExists(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("pulumi")
	if err != nil {
		return "", errors.New("no Pulumi CLI: build it with `make tools` (bin/pulumi) or pass --pulumi")
	}
	return p, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
