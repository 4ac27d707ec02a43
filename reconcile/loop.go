package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// Trigger, until ctx ends. It does not wait for running operations: Drain does.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	r.interval.Store(int64(interval))
	if r.cfg.Checker != nil && r.cfg.HealthInterval > 0 {
		go r.runHealth(ctx)
	}
	if r.rep != nil {
		go r.runPublisher(ctx)
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

// Abort cancels the running operations now, as the drain timeout would (a second signal during a
// drain): Pulumi is interrupted and writes its checkpoint; Drain then commits their statuses.
func (r *Reconciler) Abort() {
	r.log.Warn("cancelling running operations now")
	r.cancelOps()
}

// Drain lets running operations finish for up to timeout, then cancels them (Pulumi is interrupted,
// writes its checkpoint and lets its lock go; the stand's status says Canceled and it is tried again
// after the next start), and commits the final statuses. It returns an error only when those could
// not be committed: a drain that had to cancel is still a clean stop.
func (r *Reconciler) Drain(timeout time.Duration) error {
	r.pub.flush()
	if r.cfg.Plans != nil {
		r.cfg.Plans.Stop() // plans only read: nothing is lost
	}
	if r.cfg.Expiries != nil {
		r.cfg.Expiries.Stop() // the next leader's first cycle does what is left
	}
	done := make(chan struct{})
	go func() { r.ops.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		r.log.Warn("drain timeout: cancelling running operations", "timeout", timeout)
		r.cancelOps()
		<-done
	}
	r.cancelOps()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.publish(ctx); err != nil {
		return fmt.Errorf("commit the final statuses: %w", err)
	}
	return nil
}
