package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
)

// TestLockHolderRecords: a lock whose holder the engine recorded is judged by the record, not by a
// pid that may belong to another PID namespace (two containers sharing a host name) or have been
// reused; without a record it is judged as before (the controls).
func TestLockHolderRecords(t *testing.T) {
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	me := os.Getpid()
	fresh, stale := time.Now().Add(-5*time.Second), time.Now().Add(-10*time.Minute)
	record := func(pid int, ns, start string, beat time.Time) *holderRecord {
		return &holderRecord{Hostname: host, PID: pid, BootID: bootID(), PIDNS: ns, Start: start, Heartbeat: beat}
	}
	cases := []struct {
		name    string
		pid     int
		rec     *holderRecord
		want    error
		removed bool
	}{
		{"another PID namespace, beating: its pid is dead here, the lock lives", dead.Process.Pid, record(dead.Process.Pid, "pid:[1]", "1", fresh), ErrUpdateInProgress, false},
		{"the same lock without a record (control): removed by its pid", dead.Process.Pid, nil, nil, true},
		{"another PID namespace, silent", dead.Process.Pid, record(dead.Process.Pid, "pid:[1]", "1", stale), nil, true},
		{"this namespace, pid reused by another process", me, record(me, pidNamespace(), "1", fresh), nil, true},
		{"the same lock without a record (control): kept, its pid lives", me, nil, ErrUpdateInProgress, false},
		{"this namespace, the holder itself", me, record(me, pidNamespace(), processStart(me), stale), ErrUpdateInProgress, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ref := stands.StackRef{Project: "demo", Env: "x"}
			write := func(key string, v any) {
				p := filepath.Join(dir, filepath.FromSlash(key))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				data, _ := json.Marshal(v)
				if err := os.WriteFile(p, data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			lock := lockPrefix(ref) + "a.json"
			write(lock, lockFile{Pid: c.pid, Username: "u", Hostname: host, Timestamp: time.Now().Add(-time.Minute)})
			if c.rec != nil {
				write(holderKey(ref, host, c.pid), c.rec)
			}
			e := &Engine{cfg: Config{BackendURL: "file://" + dir}, log: slog.New(slog.DiscardHandler)}
			err := e.clearStaleLocks(context.Background(), ref, slog.New(slog.DiscardHandler))
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if _, statErr := os.Stat(filepath.Join(dir, filepath.FromSlash(lock))); os.IsNotExist(statErr) != c.removed {
				t.Errorf("lock removed: %v, want %v", os.IsNotExist(statErr), c.removed)
			}
		})
	}
}

func TestLockedStack(t *testing.T) {
	for args, want := range map[string]string{
		"--non-interactive up --yes --stack organization/demo/single --skip-preview": "demo/single",
		"--non-interactive refresh --stack=organization/p/e":                         "p/e",
		"--non-interactive preview --stack organization/demo/single":                 "",
		"--non-interactive stack ls --json":                                          "",
	} {
		ref, ok := lockedStack(splitArgs(args))
		if got := fmt.Sprintf("%s/%s", ref.Project, ref.Env); ok != (want != "") || (ok && got != want) {
			t.Errorf("%q: %v %s, want %q", args, ok, got, want)
		}
	}
}

func splitArgs(s string) []string { return strings.Fields(s) }

// TestApplyRecordsItsLockHolder: while an apply's CLI runs, its holder record is in the backend
// (this boot, this PID namespace, the CLI's pid); after it, none is left.
func TestApplyRecordsItsLockHolder(t *testing.T) {
	f := newFixture(t)
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	dir := filepath.Join(f.backend, ".stands", "holders", "demo", "single")
	done := make(chan error, 1)
	go func() { _, err := f.eng.Apply(context.Background(), stand, false); done <- err }()
	var seen *holderRecord
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			running = false
		case <-time.After(20 * time.Millisecond):
			files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
			for _, p := range files {
				var r holderRecord
				if data, err := os.ReadFile(p); err == nil && json.Unmarshal(data, &r) == nil && seen == nil {
					seen = &r
				}
			}
		}
	}
	if seen == nil || seen.BootID != bootID() || seen.PIDNS != pidNamespace() || seen.PID <= 0 || seen.Start == "" {
		t.Errorf("holder record during the apply: %+v", seen)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 0 {
		t.Errorf("holder records left after the apply: %v", files)
	}
}

// TestNoWorkspaceLeft: every operation removes the workspace folders it made, and none is made in
// the system's temporary folder (the Automation API's default leaves one per call, forever).
func TestNoWorkspaceLeft(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	f := newFixture(t)
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := f.eng.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.PreviewNew(ctx, stand); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Apply(ctx, stand, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Preview(ctx, stand); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Destroy(ctx, stands.StackRef{Project: "demo", Env: "single"}); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(f.eng.cfg.WorkDir, "workspaces", "*"))
	leaked, _ := filepath.Glob(filepath.Join(tmp, "pulumi_auto*"))
	if len(left) != 0 || len(leaked) != 0 {
		t.Errorf("workspace folders left: %v; in the temporary folder: %v", left, leaked)
	}
}
