package engine

import (
	"context"
	"log/slog"
	"syscall"

	"github.com/stands-engine/stands-reconciler/stands"
)

// With several replicas (--replicas), a stand is operated under a lease (package lease). The engine
// knows a lease by what the caller puts in the operation's context: its token, recorded beside every
// stack lock the operation's CLIs take (holder.go), and a channel closed when the lease's deadline
// nears, at which every CLI of the operation is killed with its process group at once, without the
// interrupt's grace: the lease must not expire for the others while a CLI of this replica still runs.
// A CLI also dies with the daemon (SIGKILL by the kernel when its parent ends), and the stands
// provider with its CLI (provider/parent.go: the CLI starts plugins in process groups of their own),
// so neither a fence nor a replica killed with -9 leaves a process behind to race its successor. The
// lease itself travels in the context as a stands.Fence (stands.WithFence).

// LeaseCheck says whether a lease token is still the live one of a stand's lease: a stack lock whose
// holder record carries a token that is not was left by a replica that lost the lease, and so has
// stopped its CLIs (Config.LeaseCheck).
type LeaseCheck func(ctx context.Context, ref stands.StackRef, token int64) (bool, error)

// fenced kills a started CLI's process group when its operation's fence closes, until done.
func fenced(ctx context.Context, pid int, done <-chan struct{}, log *slog.Logger, m *metrics) {
	f, ok := stands.FenceOf(ctx)
	if !ok || f.Stop == nil {
		return
	}
	go func() {
		select {
		case <-f.Stop:
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			m.fenced()
			if log != nil {
				log.Warn("killed a Pulumi CLI: its stand's lease was about to expire", "pid", pid, "token", f.Token)
			}
		case <-done:
		}
	}()
}
