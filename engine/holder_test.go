package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

var errLeaseDown = errors.New("lease store down")

func leased(rec *holderRecord, token int64) *holderRecord { rec.LeaseToken = token; return rec }

// leaseTokens is a lease store in which token 8 is live, 9 cannot be judged and any other is stale.
func leaseTokens(_ context.Context, _ stands.StackRef, token int64) (bool, error) {
	switch token {
	case 8:
		return true, nil
	case 9:
		return false, errLeaseDown
	}
	return false, nil
}

// TestLockHolderRecords: a lock whose holder the engine recorded is judged by the record, not by a
// pid that may belong to another PID namespace (two containers sharing a host name) or have been
// reused; without a record it is judged as before (the controls).
func TestLockHolderRecords(t *testing.T) {
	host, _ := os.Hostname()
	dead := deadPID(t)
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
		{"another PID namespace, beating: its pid is dead here, the lock lives", dead, record(dead, "pid:[1]", "1", fresh), ErrUpdateInProgress, false},
		{"the same lock without a record (control): removed by its pid", dead, nil, nil, true},
		{"another PID namespace, silent", dead, record(dead, "pid:[1]", "1", stale), nil, true},
		{"this namespace, pid reused by another process", me, record(me, pidNamespace(), "1", fresh), nil, true},
		{"the same lock without a record (control): kept, its pid lives", me, nil, ErrUpdateInProgress, false},
		{"this namespace, the holder itself", me, record(me, pidNamespace(), processStart(me), stale), ErrUpdateInProgress, false},
		// Under a lease (--replicas) the lease alone decides: each case is one the record alone
		// would decide the other way.
		{"leased, the holder itself, but its lease passed on: dead", me, leased(record(me, pidNamespace(), processStart(me), fresh), 7), nil, true},
		{"leased, silent, but its lease is live: held", dead, leased(record(dead, "pid:[1]", "1", stale), 8), ErrUpdateInProgress, false},
		{"leased, silent, the lease store down: kept", dead, leased(record(dead, "pid:[1]", "1", stale), 9), errLeaseDown, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ref := stands.StackRef{Project: "demo", Env: "x"}
			lock := plantLock(t, dir, ref, c.pid, host, time.Now().Add(-time.Minute))
			if c.rec != nil {
				p := filepath.Join(dir, filepath.FromSlash(holderKey(ref, host, c.pid)))
				data, _ := json.Marshal(c.rec)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil || os.WriteFile(p, data, 0o600) != nil {
					t.Fatal("write the holder record")
				}
			}
			e := &Engine{cfg: Config{BackendURL: "file://" + dir, LeaseCheck: leaseTokens}, log: slog.New(slog.DiscardHandler)}
			err := e.clearStaleLocks(context.Background(), ref, slog.New(slog.DiscardHandler))
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if _, statErr := os.Stat(lock); os.IsNotExist(statErr) != c.removed {
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
		ref, ok := lockedStack(strings.Fields(args))
		if got := fmt.Sprintf("%s/%s", ref.Project, ref.Env); ok != (want != "") || (ok && got != want) {
			t.Errorf("%q: %v %s, want %q", args, ok, got, want)
		}
	}
}

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

// TestBackendWritesAcrossFilesystems: the engine's own writes to a file backend (lock holder
// records) work when the temporary folder is on another filesystem, as /tmp is under systemd's
// PrivateTmp= (found running the unit on a VM: every holder record failed to be written).
func TestBackendWritesAcrossFilesystems(t *testing.T) {
	dir := t.TempDir()
	tmp, err := os.MkdirTemp("/dev/shm", "stands-tmp-")
	if err != nil {
		testenv.Missing(t, "no /dev/shm: %v", err)
		return
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(tmp, &b) != nil || a.Dev == b.Dev {
		testenv.Missing(t, "%s and %s are on one filesystem", dir, tmp)
		return
	}
	t.Setenv("TMPDIR", tmp)
	e := &Engine{cfg: Config{BackendURL: "file://" + dir}, log: slog.New(slog.DiscardHandler)}
	bucket, done, err := e.openBackend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := bucket.WriteAll(context.Background(), holderKey(stands.StackRef{Project: "demo", Env: "x"}, "host", 1), []byte("{}"), nil); err != nil {
		t.Errorf("write a holder record with TMPDIR on another filesystem: %v", err)
	}
}
