package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// recoverStack undoes what a killed run leaves behind, deliberately and with a log record each:
// a lock whose process is dead, and pending creates (the servers they started are reclaimed by the
// next apply, since the provider reclaims a server with the stand's name and our labels).
func (e *Engine) recoverStack(ctx context.Context, st auto.Stack, ref stands.StackRef, dep *deployment, log *slog.Logger) error {
	if err := e.clearStaleLocks(ctx, ref, log); err != nil {
		return err
	}
	if len(dep.Pending) == 0 {
		return nil
	}
	for _, p := range dep.Pending {
		log.Warn("pending operation left by an interrupted run", "step", p.Type, "name", lastURNPart(p.Resource.URN))
	}
	// The refresh is for the pending servers: node reads would connect to every server (a destroy
	// never does) and wait for those that are down. The operation sets its own policy afterwards.
	ws := st.Workspace()
	ws.SetEnvVar(provider.EnvNoSSH, "1")
	_, err := st.Refresh(ctx, optrefresh.ClearPendingCreates(), optrefresh.SuppressProgress())
	ws.UnsetEnvVar(provider.EnvNoSSH)
	if err != nil {
		return fmt.Errorf("refresh %s to clear pending operations: %w", st.Name(), err)
	}
	log.Info("pending operations cleared; servers they started are reclaimed by the next apply", "count", len(dep.Pending))
	return nil
}

// A lock held by a live process is waited for, never broken.
var (
	// ErrUpdateInProgress: a running process of this host holds the stack's lock.
	ErrUpdateInProgress = errors.New("another update of the stack is in progress")
	// ErrLockedElsewhere: another host holds the stack's lock; whether it lives cannot be told here.
	ErrLockedElsewhere = errors.New("the stack is locked by another host")
)

// clearStaleLocks removes the lock files of dead processes, on any diy backend (file://, s3://,
// postgres://), as lockHeld judges them.
func (e *Engine) clearStaleLocks(ctx context.Context, ref stands.StackRef, log *slog.Logger) error {
	b, done, err := e.openBackend(ctx)
	if err != nil {
		return err
	}
	defer done()
	keys, err := listKeys(ctx, b, lockPrefix(ref))
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	for _, key := range keys {
		if !strings.HasSuffix(key, ".json") {
			continue
		}
		data, err := readKey(ctx, b, key)
		if err != nil || data == nil {
			return err
		}
		var l lockFile
		if err := json.Unmarshal(data, &l); err != nil {
			return fmt.Errorf("parse lock %s: %w", key, err)
		}
		why, err := e.lockHeld(ctx, ref, l, host, log)
		if err != nil {
			return err
		}
		if err := removeKey(ctx, b, key); err != nil {
			return fmt.Errorf("remove stale lock: %w", err)
		}
		_ = removeKey(ctx, b, holderKey(ref, l.Hostname, l.Pid))
		log.Warn("removed a stale stack lock", "pid", l.Pid, "host", l.Hostname, "user", l.Username, "lock", key, "judged_by", why)
	}
	return nil
}

// lockHeld says why a stack lock is still held (an error), or by what it was judged stale. A lock
// whose holder ran under a lease is judged by the lease; one whose holder record the engine wrote,
// by that record; any other as Pulumi wrote it: this host's by its pid, another host's live until it
// is older than LockLease.
func (e *Engine) lockHeld(ctx context.Context, ref stands.StackRef, l lockFile, host string, log *slog.Logger) (string, error) {
	rec, ok := e.readHolder(ctx, ref, l, log)
	switch {
	case ok && rec.LeaseToken != 0 && e.cfg.LeaseCheck != nil:
		// Its holder stopped its CLIs before its lease could expire for anyone else (or died,
		// and its CLIs with it): a token that is no longer the lease's is a dead lock.
		live, err := e.cfg.LeaseCheck(ctx, ref, rec.LeaseToken)
		if err != nil {
			return "", fmt.Errorf("%s/%s: judge the stack lock by its lease: %w", ref.Project, ref.Env, err)
		}
		if live {
			return "", fmt.Errorf("%s/%s: %w (pid %d on %s, lease token %d)", ref.Project, ref.Env, ErrUpdateInProgress, l.Pid, l.Hostname, rec.LeaseToken)
		}
		return fmt.Sprintf("lease: token %d is no longer the stand's lease", rec.LeaseToken), nil
	case ok:
		// The engine that started the holder recorded it: judged by its boot, PID namespace,
		// start time and heartbeat, not by a pid that may be another namespace's or reused.
		if holderAlive(rec, time.Now()) {
			return "", fmt.Errorf("%s/%s: %w (pid %d on %s, heartbeat %s)", ref.Project, ref.Env, ErrUpdateInProgress, l.Pid, l.Hostname, rec.Heartbeat.Format(time.RFC3339))
		}
		return "holder record: its process has ended", nil
	case l.Hostname != host && (e.cfg.LockLease <= 0 || time.Since(l.Timestamp) < e.cfg.LockLease):
		return "", fmt.Errorf("%s/%s: %w (pid %d on %s since %s)", ref.Project, ref.Env, ErrLockedElsewhere, l.Pid, l.Hostname, l.Timestamp.Format(time.RFC3339))
	case l.Hostname == host && alive(l.Pid):
		return "", fmt.Errorf("%s/%s: %w (pid %d)", ref.Project, ref.Env, ErrUpdateInProgress, l.Pid)
	case l.Hostname != host:
		return "age: older than --lock-lease", nil
	}
	return "pid: its process has ended", nil
}

// savedElsewhere tells a checkpoint caught mid-save from a broken one. The diy backend saves a
// checkpoint by moving the old one aside and writing the new one, so a CLI that reads it meanwhile
// fails to load it; a lock taken a moment later would have refused it instead. When the checkpoint
// reads whole again now, err was another update's, not a broken state: ErrUpdateInProgress.
func (e *Engine) savedElsewhere(ctx context.Context, ref stands.StackRef, err error) error {
	if !isCheckpointLoad(err) {
		return err
	}
	b, done, berr := e.openBackend(ctx)
	if berr != nil {
		return err
	}
	defer done()
	data, rerr := readKey(ctx, b, stackKey(ref))
	if rerr != nil || data == nil || !json.Valid(data) {
		return err
	}
	return fmt.Errorf("%w: the stack's checkpoint was being saved by another update: %w", ErrUpdateInProgress, err)
}

// alive reports whether a process runs (signal 0 checks without sending anything). A zombie is
// not running: a killed Pulumi CLI whose parent died first waits as one until init reaps it, which
// some inits do late or never, and its lock is as stale as a reaped one's.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !zombie(pid)
}

// zombie reads the process state from /proc/<pid>/stat: "Z" (zombie) or "X" (dead). Without /proc
// it says no, leaving signal 0 to decide.
func zombie(pid int) bool {
	fields := procStat(pid)
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

// procStat is /proc/<pid>/stat from its third field on (the state), nil without it. The command
// name before may hold spaces and parentheses, so the fields follow the last ")".
func procStat(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}
