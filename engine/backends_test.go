package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// stateStore is a backend server as the contract test sees it: where the CLI is sent, under which
// prefix its keys land, and a way to read and plant keys behind the engine's back.
type stateStore interface {
	Keys(t testing.TB) []string
	Put(t testing.TB, key string, data []byte)
	Has(t testing.TB, key string) bool
}

type backendCase struct {
	store  stateStore
	url    string
	prefix string        // of every key the CLI writes
	config func(*Config) // credentials, where they are not in the environment
	secret string        // a credential that must show nowhere
}

// TestStateBackends runs a stand against each state backend form on servers started in the test:
// s3://<bucket>/<owner>?region=..&endpoint=..&s3ForcePathStyle=true (the Stands Engine's production form) on
// gofakes3, the in-memory fake the other tests use, and on versitygw, a real server, which keeps the
// fake honest; and postgres://user@host/db on a real PostgreSQL, its password a credential.
func TestStateBackends(t *testing.T) {
	cases := map[string]func(t *testing.T) backendCase{
		"gofakes3":  func(t *testing.T) backendCase { return s3Case(t, testenv.StartS3(t, "stands-state")) },
		"versitygw": func(t *testing.T) backendCase { return s3Case(t, testenv.StartVersityGW(t, "stands-state")) },
		"postgres": func(t *testing.T) backendCase {
			pg := testenv.StartPostgres(t)
			return backendCase{store: pg, url: pg.BackendURL(), prefix: pg.Database + "/", secret: pg.Password,
				config: func(c *Config) { c.DBPassword = pg.PasswordFunc() }}
		},
	}
	for _, name := range []string{"gofakes3", "versitygw", "postgres"} {
		t.Run(name, func(t *testing.T) { testStateBackend(t, cases[name](t)) })
	}
}

func s3Case(t *testing.T, s3 *testenv.S3) backendCase {
	// Credentials come from the environment, for the CLI and for the engine's own reads alike.
	for _, kv := range s3.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return backendCase{store: s3, url: s3.Backend("demo"), prefix: "demo/", config: func(*Config) {}, secret: testenv.S3SecretKey}
}

func testStateBackend(t *testing.T, bc backendCase) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, hcloudToken)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg := Config{PulumiBin: pl.Bin, BackendURL: bc.url, Passphrase: pl.Passphrase, CloudToken: hcloudToken,
		CloudEndpoint: h.Endpoint, ProviderBin: exe, WorkDir: t.TempDir(), Log: slog.New(slog.NewJSONHandler(logs, nil)), SkipNodes: true}
	bc.config(&cfg)
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := eng.Apply(ctx, stand, false); err != nil {
		t.Fatalf("apply: %v\n%s", err, logs)
	}
	if keys := bc.store.Keys(t); !strings.Contains(strings.Join(keys, " "), bc.prefix+stackKey(stands.StackRef{Project: "demo", Env: "single"})) {
		t.Fatalf("no stack file under the prefix %s: %v", bc.prefix, keys)
	}
	if res, err := eng.Apply(ctx, stand, false); err != nil || res.Changed {
		t.Fatalf("second apply: %v %+v", err, res)
	}
	// A lock left by a dead process of this host is removed before the next run.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	lock := fmt.Sprintf(`{"pid":%d,"username":"root","hostname":%q,"timestamp":"2026-01-01T00:00:00Z"}`, dead.Process.Pid, host)
	key := bc.prefix + lockPrefix(stands.StackRef{Project: "demo", Env: "single"}) + "0b5e1f3c-dead-lock.json"
	bc.store.Put(t, key, []byte(lock))
	inv, err := eng.Inventory(ctx)
	if err != nil || len(inv) != 1 || !inv[0].Locked {
		t.Fatalf("inventory does not see the planted lock: %+v %v", inv, err)
	}
	if _, err := eng.Apply(ctx, stand, true); err != nil {
		t.Fatalf("apply over a stale lock: %v\n%s", err, logs)
	}
	if bc.store.Has(t, key) || !strings.Contains(logs.String(), "removed a stale stack lock") {
		t.Error("stale lock not removed")
	}
	inv, err = eng.Inventory(ctx)
	if err != nil || len(inv) != 1 || !inv[0].Owned || !inv[0].Known || inv[0].SpecHash != stand.SpecHash || inv[0].Locked {
		t.Errorf("inventory: %+v %v", inv, err)
	}
	if _, err := eng.Destroy(ctx, stands.StackRef{Project: "demo", Env: "single"}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if n := len(h.Servers(t)); n != 0 {
		t.Errorf("%d servers after destroy", n)
	}
	if strings.Contains(logs.String(), bc.secret) {
		t.Error("the backend's credential is in the engine's log")
	}
}

// TestPostgresBackendCredentials: the database password reaches the CLI and the engine's own reads
// only through the engine's pgpass file: a URL holding one is refused, the file is private and
// rewritten when the credential rotates, a wrong password is a BackendUnavailable error (retry,
// never a destroy) that does not quote it, and a server that is down is the same.
func TestPostgresBackendCredentials(t *testing.T) {
	pg := testenv.StartPostgres(t)
	pl := testenv.NewPulumi(t)
	base := Config{PulumiBin: pl.Bin, BackendURL: pg.BackendURL(), Passphrase: pl.Passphrase, WorkDir: t.TempDir(), SkipNodes: true}

	withPW := base
	withPW.BackendURL = strings.Replace(pg.BackendURL(), pg.User+"@", pg.User+":"+pg.Password+"@", 1)
	if _, err := New(withPW); !errors.Is(err, ErrPasswordInURL) || strings.Contains(err.Error(), pg.Password) {
		t.Fatalf("a password in the URL: %v", err)
	}

	password := "wrong:pass\\word"
	cfg := base
	cfg.DBPassword = func() (string, error) { return password, nil }
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	if strings.Contains(eng.cfg.BackendURL, password) || !strings.Contains(eng.cfg.BackendURL, "passfile=") {
		t.Fatalf("backend URL %q", eng.cfg.BackendURL)
	}
	passfile := filepath.Join(cfg.WorkDir, credentialDir, passfileName)
	if fi, err := os.Stat(passfile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("pgpass file: %v %v", fi, err)
	}
	_, err = eng.Inventory(context.Background())
	if reason.Of(err) != reason.BackendUnavailable || strings.Contains(err.Error(), password) {
		t.Fatalf("a wrong password: %v (reason %s)", err, reason.Of(err))
	}
	password = pg.Password // rotated: the next use reads it again
	if inv, err := eng.Inventory(context.Background()); err != nil || len(inv) != 0 {
		t.Fatalf("inventory after the rotation: %+v %v", inv, err)
	}
	pg.Stop(t)
	if _, err = eng.Inventory(context.Background()); reason.Of(err) != reason.BackendUnavailable {
		t.Errorf("server down: %v (reason %s)", err, reason.Of(err))
	}
	pg.Start(t)
	if _, err := eng.Inventory(context.Background()); err != nil {
		t.Errorf("inventory after the server came back: %v", err)
	}
}

// TestPassfileNeverEmpty: the pgpass file is rewritten before each operation while other
// operations' CLIs read it; a reader never finds it empty or cut short (TestReplicas found
// "password authentication failed" with four operations at once when it was written in place).
func TestPassfileNeverEmpty(t *testing.T) {
	const pw = "db-pass-SENTINEL-0c1d"
	e := &Engine{cfg: Config{WorkDir: t.TempDir(), DBPassword: func() (string, error) { return pw, nil }}}
	if err := e.writePassfile(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(e.cfg.WorkDir, credentialDir, passfileName)
	want := "*:*:*:*:" + pw + "\n"
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			if err := e.writePassfile(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for running := true; running; reads++ {
		select {
		case <-done:
			running = false
		default:
		}
		if data, err := os.ReadFile(p); err != nil || string(data) != want {
			t.Fatalf("read %d: %q %v", reads, data, err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 1 {
		t.Errorf("the credential folder holds %d files, want the pgpass file alone", len(entries))
	}
	t.Logf("%d reads while it was written 2000 times", reads)
}
