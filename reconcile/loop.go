package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Trigger asks for a cycle now (a webhook, a watched local repository). Triggers arriving while a
// cycle is pending are merged into it.
func (r *Reconciler) Trigger() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// InCycleFor is how long the cycle under way has run; 0 between cycles. Operations run beside the
// loop, so a long apply does not count: a cycle that does not end is a wedged loop (the daemon's
// systemd watchdog).
func (r *Reconciler) InCycleFor() time.Duration {
	since := r.cycleSince.Load()
	if since == 0 {
		return 0
	}
	return time.Since(time.Unix(0, since))
}

// SetInterval changes Run's poll interval (a reload): the wait under way ends with a cycle now, and
// the next waits are of the new interval.
func (r *Reconciler) SetInterval(interval time.Duration) {
	if r.interval.Swap(int64(interval)) != int64(interval) {
		r.Trigger()
	}
}

// Run cycles every interval (±10% jitter, so several reconcilers do not poll in step) and on every
// Trigger, until ctx ends; the live health check and the leader's publisher run beside it and have
// ended when it returns. It does not wait for running operations: Shutdown does.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	r.interval.Store(int64(interval))
	var beside sync.WaitGroup
	defer beside.Wait()
	if r.cfg.Health.Checker != nil && r.cfg.Health.Interval > 0 {
		beside.Go(func() { r.runHealth(ctx) })
	}
	if r.claims != nil {
		beside.Go(func() { r.runPublisher(ctx) })
	}
	consecutive := 0
	for {
		r.cycleSince.Store(time.Now().UnixNano())
		err := r.Cycle(ctx)
		r.cycleSince.Store(0)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			consecutive++
			// An outage is logged at its start and then every tenth poll, not every poll.
			if consecutive <= 3 || consecutive%10 == 0 {
				r.log.Warn("cycle failed; nothing was applied or destroyed", "err", err, "consecutive_errors", consecutive)
			}
		case consecutive > 0:
			r.log.Info("cycle succeeded again", "after_errors", consecutive)
			consecutive = 0
		}
		if !waitJittered(ctx, time.Duration(r.interval.Load()), r.wake) {
			return
		}
	}
}

// waitJittered waits interval ±10% or until wake, and reports false when ctx ended first.
func waitJittered(ctx context.Context, interval time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(time.Duration(float64(interval) * (0.9 + 0.2*rand.Float64())))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}

// Wait blocks until every started operation, and the pull request plans running, have finished.
func (r *Reconciler) Wait() {
	r.ops.Wait()
	if r.cfg.Plans != nil {
		r.cfg.Plans.Wait()
	}
	if r.cfg.Expiries != nil {
		r.cfg.Expiries.Wait()
	}
}

// Shutdown stops the loop's work: the pull request plans and the endings at once (they only read, or
// the next leader's first cycle does what is left), the running operations when they finish or when
// ctx ends, whichever comes first (Pulumi is interrupted, writes its checkpoint and lets its lock go;
// the stand's status says Canceled and it is tried again after the next start), and then it commits
// the final statuses. Ending ctx early (a second signal) cancels the operations at once. It returns
// an error only when the final statuses could not be committed: a shutdown that had to cancel is
// still a clean stop. Run must have returned.
func (r *Reconciler) Shutdown(ctx context.Context) error {
	r.pub.flushNow()
	if r.cfg.Plans != nil {
		r.cfg.Plans.Close()
	}
	if r.cfg.Expiries != nil {
		r.cfg.Expiries.Close()
	}
	done := make(chan struct{})
	go func() { r.ops.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.log.Warn("cancelling running operations", "why", context.Cause(ctx))
		r.cancelOps()
		<-done
	}
	r.cancelOps()
	commit, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := r.publish(commit); err != nil {
		return fmt.Errorf("commit the final statuses: %w", err)
	}
	return nil
}
