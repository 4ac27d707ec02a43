package reconcile

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// run executes one operation in the worker pool and records its outcome.
func (r *Reconciler) run(o op) {
	defer r.ops.Done()
	log := r.log.With("stand", o.id, "operation", o.kind)
	select {
	case r.sem <- struct{}{}:
	case <-r.opsCtx.Done():
		r.finish(o, nil, r.opsCtx.Err(), r.cfg.Now(), true)
		return
	case <-o.yield:
		r.leave(o, log)
		return
	}
	release := r.holdWorker()
	// With replicas, under the stand's lease: ended when the lease nears expiry (lost reports it).
	ctx, unfence, lost, ferr := r.fence(r.opsCtx, o.id)
	defer unfence()
	if ferr != nil {
		release()
		log.Warn("operation not started", "err", ferr)
		r.finish(o, nil, reason.Wrap(reason.LeaseLost, ferr), r.cfg.Now(), true)
		return
	}
	if !r.mayStart(o.id) {
		release()
		r.leave(o, log)
		return
	}
	if o.kind == opDestroy && r.declared(o.id) {
		// Put back in the repository while the destroy waited for a worker: it is not destroyed.
		release()
		log.Info("destroy skipped: the stand is in the repository again")
		r.mu.Lock()
		r.state(o.id).running = false
		r.mu.Unlock()
		return
	}
	started := r.cfg.Now()
	changing := o.kind == opApply || o.kind == opDestroy
	if changing {
		if st := r.Status(o.id); st != nil { // running: no cycle changes it meanwhile
			r.commitStatus(ctx, o, *st)
		}
	}
	res, err := r.operateBounded(ctx, &o, log)
	if err != nil && lost() {
		err = reason.Wrap(reason.LeaseLost, fmt.Errorf("%s of %s: %w: %w", o.kind, o.id, errLeaseLost, err))
	}
	r.metrics.operation(o.kind, r.cfg.Now().Sub(started), err)
	if err != nil {
		c := reason.Of(err)
		log.Warn("operation failed", "reason", c, "reason_kind", c.Kind(), "err", r.scrub(o, err.Error()))
	}
	// Stored while the stand is still running, so no cycle starts on it before its outcome is in.
	saved := err != nil || res == nil || res.Connection == nil || r.saveConnection(ctx, o.id, json.RawMessage(res.Connection), log)
	final := r.finish(o, res, err, started, saved)
	release()                          // the commits below must not hold a worker: Gitea may be slow
	if changing || o.kind == opApply { // a drift repaired by an apply counts too
		// The status this operation left, not the current one: a cycle may have started the next.
		r.commitStatus(ctx, o, final)
	}
	r.publishSoon(ctx)
}

// holdWorker counts the worker run took (for /metrics); the function it returns gives it back.
func (r *Reconciler) holdWorker() func() {
	r.mu.Lock()
	r.active++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.active--
		r.mu.Unlock()
		<-r.sem
	}
}

// operateBounded is operate under the operation deadline: past it the engine's context ends (the
// Pulumi CLI is interrupted, so it saves its checkpoint and lets its lock go) and the operation
// fails with Timeout, a Waiting reason: it is tried again with the usual backoff.
func (r *Reconciler) operateBounded(ctx context.Context, o *op, log *slog.Logger) (*stands.Result, error) {
	octx, cancel := context.WithTimeout(ctx, r.cfg.OperationTimeout)
	defer cancel()
	res, err := r.operate(octx, o, log)
	if err != nil && r.opsCtx.Err() != nil { // not ctx's own end: a lost lease ends that too (run says so)
		// The stop's drain ran out (or a second signal came): whatever the CLI made of its interrupt.
		return res, reason.Wrap(reason.Canceled, fmt.Errorf("%s of %s was interrupted by the reconciler's stop; it runs again after the next start: %w", o.kind, o.id, err))
	}
	if err != nil && errors.Is(octx.Err(), context.DeadlineExceeded) {
		r.mu.Lock()
		r.health.Timeout = fmt.Errorf("%s of %s took longer than %s", o.kind, o.id, r.cfg.OperationTimeout)
		r.mu.Unlock()
		return res, reason.Wrap(reason.Timeout, fmt.Errorf("%s of %s took longer than --operation-timeout %s and was interrupted: %w", o.kind, o.id, r.cfg.OperationTimeout, err))
	}
	if err == nil {
		r.mu.Lock()
		r.health.Timeout = nil
		r.mu.Unlock()
	}
	return res, err
}

// operate calls the engine; a drift repaired by an apply turns the operation into an apply.
func (r *Reconciler) operate(ctx context.Context, o *op, log *slog.Logger) (*stands.Result, error) {
	if o.in != nil && o.in.Print == "" {
		// Every apply records the print, with the review gate or without: the change a gate turned
		// on later asks about starts from it (review.go), not from an unknown.
		if p, err := judge.Print(o.in, r.cfg.Passphrase); err == nil {
			o.in.Print = p
		}
	}
	switch o.kind {
	case opApply, opObserve:
		if o.repair {
			return r.repairApply(ctx, *o.in)
		}
		return r.eng.Apply(ctx, *o.in, false)
	case opDrift:
		res, err := r.eng.Drift(ctx, *o.in)
		r.mu.Lock()
		repair := r.cfg.DriftApply && !r.sw.holding()
		r.mu.Unlock()
		if err == nil && res.Changed && repair {
			log.Info("stand drifted; applying it again", "changes", res.Changes)
			o.kind = opApply
			return r.repairApply(ctx, *o.in)
		}
		return res, err
	}
	return r.eng.Destroy(ctx, o.ref)
}

// repairApply applies a stand again whatever its spec hash, reading its servers and instances back
// first so what drifted or died on them is put back: a drift repair, a heal.
func (r *Reconciler) repairApply(ctx context.Context, in stands.Input) (*stands.Result, error) {
	in.Repair = true
	return r.eng.Apply(ctx, in, true)
}

// commitStatus sets stands/<stand-id> on the operation's commit from the stand's status as summarise
// left it, not from the operation.
func (r *Reconciler) commitStatus(ctx context.Context, o op, st Status) {
	ctx, cancel, ok := r.underLease(ctx, o.id)
	if !ok {
		return
	}
	defer cancel()
	r.setCommitStatus(ctx, o.commit, "stands/"+o.id, commitState(st.Phase), string(st.Phase)+": "+cmp.Or(st.Message, string(st.Reason)), r.statusURL(o.id))
}

// commitState is the commit status a phase shows on the commit that led to it.
func commitState(p reason.Phase) stands.CommitState {
	switch p {
	case reason.Progressing:
		return stands.StatePending
	case reason.Failed, reason.Stalled, reason.Blocked, reason.Degraded:
		return stands.StateFailure
	}
	return stands.StateSuccess
}

func (r *Reconciler) setCommitStatus(ctx context.Context, sha, name string, state stands.CommitState, description, url string) {
	if r.cfg.Forge == nil || sha == "" {
		return
	}
	if err := r.cfg.Forge.SetStatus(ctx, sha, name, state, description, url); err != nil {
		r.log.Warn("commit status not set", "context", name, "commit", mdtext.Short(sha), "err", err)
	}
}

func (r *Reconciler) statusURL(id string) string {
	if r.cfg.Forge == nil {
		return ""
	}
	return r.cfg.Forge.FileURL(r.cfg.StatusBranch, stands.StatusPath(id))
}

// declared reports whether the last evaluated snapshot declares the stand.
func (r *Reconciler) declared(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.declaredIDs[id]
}

// saveConnection writes the unmasked record to the secret store when it changed; it reports whether
// the store holds it.
func (r *Reconciler) saveConnection(ctx context.Context, id string, record json.RawMessage, log *slog.Logger) bool {
	sum := sha256.Sum256(record)
	digest := hex.EncodeToString(sum[:])
	r.mu.Lock()
	saved := r.state(id).connSaved
	r.mu.Unlock()
	if saved == digest {
		return true
	}
	ctx, cancel, ok := r.underLease(ctx, id)
	if !ok {
		return false
	}
	defer cancel()
	if err := r.sec.WriteConnection(ctx, id, record); err != nil {
		r.metrics.secretError("write")
		log.Warn("connection record not stored; retrying later", "err", err)
		return false
	}
	r.mu.Lock()
	r.state(id).connSaved = digest
	r.mu.Unlock()
	return true
}

func (r *Reconciler) scrub(o op, s string) string {
	if o.in != nil {
		return o.in.Secrets.Scrub(s)
	}
	return s
}

// finish records an operation's outcome, and a connection record not stored, which backs the stand
// off; it returns the status they leave.
func (r *Reconciler) finish(o op, res *stands.Result, err error, started time.Time, saved bool) Status {
	out := outcome{kind: outSucceeded, op: o.kind, commit: o.commit, res: res, started: started, auth: o.auth}
	if o.in != nil {
		out.file, out.spec = o.in.Stand.Path, o.in.SpecHash
	}
	if err != nil {
		out.kind, out.reason, out.detail = outFailed, reason.Of(err), r.scrub(o, err.Error())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(o.id)
	st.running = false
	if err == nil && o.kind == opApply {
		st.lastDrift = r.cfg.Now()
	}
	if err == nil && o.in != nil && o.kind != opDestroy {
		st.ref = stands.StackRef{Project: o.in.Stand.Project, Env: o.in.Stand.Env, StandID: o.id}
	}
	r.record(o.id, out)
	if !saved {
		r.record(o.id, outcome{kind: outUnsaved})
	}
	if st.status == nil {
		return Status{}
	}
	return *st.status
}
