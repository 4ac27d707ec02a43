package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
)

// Pulumi's lock file holds only a pid, a user, a host name and a time: two reconcilers in containers
// that share a host name see each other's pids as dead (another PID namespace), and a pid can be
// reused. So every CLI that takes a stack's lock gets a side record, written by the engine when it
// starts the CLI and kept fresh while it runs: the machine's boot, the PID namespace, the process's
// start time, and a heartbeat. A lock is judged by its record when there is one (holderAlive), and
// as before otherwise.

// holderRecord is the side record of one CLI process holding (or about to hold) a stack's lock.
type holderRecord struct {
	Hostname  string    `json:"hostname"`
	PID       int       `json:"pid"`
	BootID    string    `json:"bootId"`
	PIDNS     string    `json:"pidNamespace"`
	Start     string    `json:"start"` // the process's start time in clock ticks since boot
	Heartbeat time.Time `json:"heartbeat"`
	// LeaseToken is the stand's lease the CLI runs under (--replicas; 0 without): a lock whose lease
	// has passed to another token is abandoned, wherever and however its holder ran (fence.go).
	LeaseToken int64 `json:"leaseToken,omitempty"`
}

// holderBeat is how often a running CLI's record is refreshed; a record not refreshed for
// holderStale belongs to a process that is gone.
const (
	holderBeat  = 20 * time.Second
	holderStale = 3 * holderBeat
)

func holderKey(ref stands.StackRef, host string, pid int) string {
	return ".stands/holders/" + ref.Project + "/" + ref.Env + "/" + host + "-" + strconv.Itoa(pid) + ".json"
}

// lockingCommands take the stack's lock in the diy backend.
var lockingCommands = map[string]bool{"up": true, "refresh": true, "destroy": true, "import": true, "cancel": true}

// holdFor is cli's hook: for a CLI that takes a stack's lock, write its record now and keep it fresh
// until the returned function is called (when the CLI has ended), which removes it.
func (e *Engine) holdFor(ctx context.Context, args []string, pid int) func() {
	ref, ok := lockedStack(args)
	if !ok {
		return func() {}
	}
	host, _ := os.Hostname()
	rec := holderRecord{Hostname: host, PID: pid, BootID: bootID(), PIDNS: pidNamespace(), Start: processStart(pid)}
	if f, ok := stands.FenceOf(ctx); ok {
		rec.LeaseToken = f.Token
	}
	key := holderKey(ref, host, pid)
	write := func(ctx context.Context) {
		rec.Heartbeat = time.Now().UTC()
		data, _ := json.Marshal(rec)
		if err := e.writeKey(ctx, key, data); err != nil {
			e.log.Warn("lock holder record not written; a stale lock of this run is judged by its pid alone", "key", key, "err", err)
		}
	}
	write(context.Background())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(holderBeat)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				write(context.Background())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			if err := e.deleteKey(context.Background(), key); err != nil {
				e.log.Warn("lock holder record not removed", "key", key, "err", err)
			}
		})
	}
}

// lockedStack is the stack a CLI command locks: its --stack organization/<project>/<env>.
func lockedStack(args []string) (stands.StackRef, bool) {
	cmd, stack := "", ""
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--stack="):
			stack = strings.TrimPrefix(a, "--stack=")
		case a == "--stack" && i+1 < len(args):
			stack = args[i+1]
		case cmd == "" && !strings.HasPrefix(a, "-") && (i == 0 || args[i-1] != "--stack"):
			cmd = a
		}
	}
	parts := strings.Split(stack, "/")
	if !lockingCommands[cmd] || len(parts) != 3 {
		return stands.StackRef{}, false
	}
	return stands.StackRef{Project: parts[1], Env: parts[2]}, true
}

// holderAlive judges a lock by its record: in this machine's boot and PID namespace, by the process
// itself (the same pid started at the same time, not a zombie); anywhere else, by the heartbeat.
func holderAlive(rec holderRecord, now time.Time) bool {
	if rec.BootID != "" && rec.BootID == bootID() && rec.PIDNS != "" && rec.PIDNS == pidNamespace() {
		return alive(rec.PID) && processStart(rec.PID) == rec.Start
	}
	return now.Sub(rec.Heartbeat) < holderStale
}

// readHolder is the record of a lock's holder, if the engine that started it wrote one.
func (e *Engine) readHolder(ctx context.Context, ref stands.StackRef, l lockFile, log *slog.Logger) (holderRecord, bool) {
	data, err := e.readBackendKey(ctx, holderKey(ref, l.Hostname, l.Pid))
	if err != nil || data == nil {
		return holderRecord{}, false
	}
	var rec holderRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		log.Warn("lock holder record unreadable; the lock is judged by its pid", "err", err)
		return holderRecord{}, false
	}
	return rec, true
}

func bootID() string {
	data, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(data))
}

func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
}

// processStart is field 22 of /proc/<pid>/stat, the start time in clock ticks since boot.
func processStart(pid int) string {
	if fields := procStat(pid); len(fields) >= 20 {
		return fields[19]
	}
	return ""
}

func (e *Engine) writeKey(ctx context.Context, key string, data []byte) error {
	b, done, err := e.openBackend(ctx)
	if err != nil {
		return err
	}
	defer done()
	return b.WriteAll(ctx, key, data, nil)
}

func (e *Engine) deleteKey(ctx context.Context, key string) error {
	b, done, err := e.openBackend(ctx)
	if err != nil {
		return err
	}
	defer done()
	return removeKey(ctx, b, key)
}

func (e *Engine) readBackendKey(ctx context.Context, key string) ([]byte, error) {
	b, done, err := e.openBackend(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return readKey(ctx, b, key)
}
