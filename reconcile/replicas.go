package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/stands"
)

// With several replicas (--replicas), every replica polls the repository, judges every stand and
// reads the whole inventory, so each decides the same; each operates only the stands whose leases it
// holds, which it takes for the stands that are its own by rendezvous over the live replicas. A
// replica writes its stands' statuses to their records under their leases (refused by the database
// once a lease has passed on); the replica holding the leader lease alone commits the status files
// from those records, sets no commit status of a stand it does not hold, and plans the pull requests.
// A stand changes hands when its replica dies (after its lease expires and a grace) or when the
// live replicas change (its holder hands it over between operations): the new holder starts from the
// stand's record, as a restarted reconciler starts from its status file.

// Replicas is this replica's place among the others (lease.Member).
type Replicas interface {
	// Name is the replica's name, stable across restarts (Owner names one).
	Name() string
	// Ready is nil while the lease store answers (the replica's heartbeat is current).
	Ready() error
	// Renewing says whether the last renewal reached the lease store: nothing starts while it did not.
	Renewing() bool
	Leader() bool
	// Owner is the replica a stand belongs to by rendezvous ("" while the store is cut off).
	Owner(name string) string
	// Held is this replica's lease on a stand, with the channel closed when the lease nears expiry.
	Held(name string) (stands.Lease, <-chan struct{}, bool)
	Acquire(ctx context.Context, name string) (l stands.Lease, stop <-chan struct{}, ok bool, holder string, err error)
	Release(ctx context.Context, name string) error
	// Current is the held lease when the database still has it live: the check before a write the
	// database cannot fence.
	Current(ctx context.Context, name string) (stands.Lease, bool, error)
	// Put writes a stand's record under the held lease (stands.ErrLeaseLost when it has passed on).
	Put(ctx context.Context, name string, body []byte) error
	Versions(ctx context.Context) (map[string]int64, error)
	Records(ctx context.Context, names []string) (map[string]stands.LeaseRecord, error)
}

// publishEvery is how often the leader looks for statuses the others wrote, when no status delay
// sets it.
const publishEvery = 2 * time.Second

// claims is the replicas part (docs/architecture.md#the-loops-parts-and-their-locks): the leases of
// the stands this replica holds, the status it last wrote to each stand's record, and the
// operations waiting for a worker, which leave when their stand moves to another replica. A nil
// claims is a reconciler without replicas: every stand is its own. mu is a leaf (taken alone or
// under Reconciler.mu, calling nothing while held); shareMu makes one share at a time, so records
// are written in the order statuses changed, and is taken before Reconciler.mu, never under it.
type claims struct {
	rep Replicas

	mu     leafMutex
	tokens map[string]int64         // the held lease a stand's status continues under (absent: not held)
	shared map[string][]byte        // the status last written to a stand's record
	queued map[string]chan struct{} // an operation waiting for a worker; closed, it leaves

	shareMu sync.Mutex
}

func newClaims(rep Replicas) *claims {
	if rep == nil {
		return nil
	}
	return &claims{rep: rep, tokens: map[string]int64{}, shared: map[string][]byte{}, queued: map[string]chan struct{}{}}
}

// sharing takes the share's lock (one share at a time); call what it returns to let it go.
func (c *claims) sharing() (unlock func()) {
	c.shareMu.Lock()
	return c.shareMu.Unlock
}

// holds says whether this replica operates the stand: always without replicas. A lease found lost
// is forgotten: a later acquire starts again from the stand's record.
func (c *claims) holds(id string) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	token := c.tokens[id]
	c.mu.Unlock()
	if token == 0 {
		return false
	}
	if l, _, held := c.rep.Held(id); held && l.Token == token {
		return true
	}
	c.mu.Lock()
	if c.tokens[id] == token {
		delete(c.tokens, id)
	}
	c.mu.Unlock()
	return false
}

// took records a newly held lease; its record is to be written again.
func (c *claims) took(id string, token int64, shared []byte) {
	c.mu.Lock()
	c.tokens[id], c.shared[id] = token, shared
	c.mu.Unlock()
}

// let forgets a lease handed over.
func (c *claims) let(id string) {
	c.mu.Lock()
	delete(c.tokens, id)
	c.mu.Unlock()
}

// queue marks an operation of the stand waiting for a worker; the channel closes when it is to
// leave. Without replicas it is nil: it never leaves.
func (c *claims) queue(id string) <-chan struct{} {
	if c == nil {
		return nil
	}
	ch := make(chan struct{})
	c.mu.Lock()
	c.queued[id] = ch
	c.mu.Unlock()
	return ch
}

// started says the stand's operation got its worker (or left): it no longer waits.
func (c *claims) started(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.queued, id)
	c.mu.Unlock()
}

// evict makes the stand's waiting operation leave, if one waits.
func (c *claims) evict(id string) {
	c.mu.Lock()
	if ch, ok := c.queued[id]; ok {
		close(ch)
		delete(c.queued, id)
	}
	c.mu.Unlock()
}

// unshared says whether body differs from what this replica last wrote to the stand's record.
func (c *claims) unshared(id string, body []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !bytes.Equal(body, c.shared[id])
}

// wrote records what the stand's record holds now.
func (c *claims) wrote(id string, body []byte) {
	c.mu.Lock()
	c.shared[id] = body
	c.mu.Unlock()
}

// leader says whether this replica commits status and plans pull requests: always without replicas.
// owner is the replica stand id belongs to by rendezvous.
func (c *claims) owner(id string) string { return c.rep.Owner(id) }

// self is this replica's name.
func (c *claims) self() string { return c.rep.Name() }

func (c *claims) leader() bool { return c == nil || c.rep.Leader() }

// ready is the lease store's state for /readyz: nil without replicas.
func (c *claims) ready() error {
	if c == nil {
		return nil
	}
	return c.rep.Ready()
}

// claim takes the leases of the stands among ids that are this replica's by rendezvous and hands
// over those that are not any more and run nothing here. A stand newly held continues from its
// record, which the replica that held it before wrote.
func (r *Reconciler) claim(ctx context.Context, ids []string) {
	c := r.claims
	if c == nil || !r.cfg.Replicas.Renewing() {
		return // cut off from the store: nothing is acquired or handed over; the held leases run out
	}
	me := r.cfg.Replicas.Name()
	var taken, handoff []string
	tokens := map[string]int64{}
	for _, id := range ids {
		owner := r.cfg.Replicas.Owner(id)
		r.mu.Lock()
		running := r.state(id).running
		r.mu.Unlock()
		held := c.holds(id)
		switch {
		case held && owner != "" && owner != me && !running:
			handoff = append(handoff, id)
		case held && owner != "" && owner != me:
			c.evict(id) // waiting for a worker: it leaves, and the stand is handed over next
		case !held && owner == me:
			l, _, ok, holder, err := r.cfg.Replicas.Acquire(ctx, id)
			switch {
			case err != nil:
				r.log.Warn("stand lease not acquired; tried again next cycle", "stand", id, "err", err)
			case !ok:
				r.log.Debug("stand held by another replica until it hands it over or its lease expires", "stand", id, "holder", holder)
			default:
				taken, tokens[id] = append(taken, id), l.Token
			}
		}
	}
	if len(taken) > 0 {
		r.takeUp(ctx, taken, tokens)
	}
	if len(handoff) > 0 {
		r.handOver(ctx, handoff)
	}
}

// handOver releases the leases of stands that belong to another replica now, after writing their
// last statuses: the next holder starts from them.
func (r *Reconciler) handOver(ctx context.Context, ids []string) {
	c := r.claims
	r.share(ctx)
	for _, id := range ids {
		r.mu.Lock()
		busy := r.state(id).running // a health check took it meanwhile: handed over next cycle
		if !busy {
			c.let(id)
		}
		r.mu.Unlock()
		if busy {
			continue
		}
		if err := r.cfg.Replicas.Release(ctx, id); err != nil {
			r.log.Warn("stand lease not released; it expires on its own", "stand", id, "err", err)
			continue
		}
		r.log.Info("stand handed over to the replica it belongs to now", "stand", id, "to", r.cfg.Replicas.Owner(id))
	}
}

// known is every stand the snapshot declares or this replica has a status of, sorted.
func (r *Reconciler) known(ev *judge.Evaluation) []string {
	if r.claims == nil {
		return nil
	}
	ids := map[string]bool{}
	for _, v := range ev.Verdicts {
		ids[v.ID] = true
	}
	r.mu.Lock()
	for id := range r.stands {
		ids[id] = true
	}
	r.mu.Unlock()
	return slices.Sorted(maps.Keys(ids))
}

// takeUp makes newly held stands continue from their records: the status their last holder wrote
// (a record that cannot be read leaves the status as this replica knew it, which it then writes).
func (r *Reconciler) takeUp(ctx context.Context, ids []string, tokens map[string]int64) {
	recs, err := r.cfg.Replicas.Records(ctx, ids)
	if err != nil {
		r.log.Warn("stand records not read; their statuses continue from the status files", "err", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		st := r.state(id)
		st.rt = retries{}
		var shared []byte
		if rec, ok := recs[id]; ok {
			if s, ok := decodeRecord(id, rec.Body); ok {
				st.status, shared = s, rec.Body
			}
		}
		r.claims.took(id, tokens[id], shared)
	}
	r.log.Info("stand leases acquired", "stands", ids)
}

// decodeRecord reads a stand's record: its status file as its holder wrote it.
func decodeRecord(id string, body []byte) (*Status, bool) {
	var s Status
	if json.Unmarshal(body, &s) != nil || s.SchemaVersion != SchemaVersion || s.ID != id {
		return nil, false
	}
	return &s, true
}

// share writes the statuses of the stands this replica holds to their records, those that changed
// since it last wrote them. A write refused because the lease passed on is dropped: the new holder
// writes the stand's status from then on.
func (r *Reconciler) share(ctx context.Context) {
	c := r.claims
	defer c.sharing()()
	type write struct {
		id   string
		body []byte
	}
	var writes []write
	r.mu.Lock()
	for id, st := range r.stands {
		if st.status == nil || !c.holds(id) {
			continue
		}
		if body := st.status.encode(); c.unshared(id, body) {
			writes = append(writes, write{id, body})
		}
	}
	r.mu.Unlock()
	for _, w := range writes {
		err := r.cfg.Replicas.Put(ctx, w.id, w.body)
		switch {
		case errors.Is(err, stands.ErrLeaseLost):
			r.log.Warn("status not shared: the stand's lease has passed on, and its new holder writes it", "stand", w.id)
			continue
		case err != nil:
			r.log.Warn("status not shared; retrying at the next change", "stand", w.id, "err", err)
			continue
		}
		c.wrote(w.id, w.body)
	}
}

// publishShared is publish with replicas: this replica's statuses to their records, and, on the
// leader, the records to the status files, under the leader lease: a leader that lost it commits
// nothing, and what it commits lands before the lease could pass on.
func (r *Reconciler) publishShared(ctx context.Context) error {
	r.share(ctx)
	if !r.claims.leader() {
		return nil
	}
	ctx, cancel, ok := r.underLease(ctx, stands.LeaderLease)
	if !ok {
		return nil
	}
	defer cancel()
	return r.pub.commitShared(ctx, r.cfg.Replicas, func() ([]string, mdtext.Markup) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.unreadable, r.sw.banner() + r.gate.lifetimeBanner()
	})
}

// runPublisher makes the leader commit what the others wrote, every status delay (publishEvery
// without one), until ctx ends.
func (r *Reconciler) runPublisher(ctx context.Context) {
	every := max(r.cfg.StatusDelay, publishEvery)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.claims.leader() {
				_ = r.publish(ctx)
			}
		}
	}
}

// mayStart marks an operation that got its worker as started (claim no longer makes it leave), and
// says whether it may run: not when its stand belongs to another live replica now.
func (r *Reconciler) mayStart(id string) bool {
	c := r.claims
	c.started(id)
	if c == nil {
		return true
	}
	owner := r.cfg.Replicas.Owner(id)
	return owner == "" || owner == r.cfg.Replicas.Name()
}

// leave gives up an operation that has not started: another replica joined while it waited for a
// worker, and the stand is that replica's now. claim hands the stand over at the next cycle, instead
// of this replica working through a queue of others' stands.
func (r *Reconciler) leave(o op, log *slog.Logger) {
	log.Info("operation left, unstarted, to the replica the stand belongs to now", "to", r.cfg.Replicas.Owner(o.id))
	r.claims.started(o.id)
	r.mu.Lock()
	r.state(o.id).running = false
	r.mu.Unlock()
}

// underLease is ctx bounded by the lease's deadline when the database still has this replica's
// lease live (ok), for a write the database cannot fence: it lands before a successor may start.
// Without replicas it is ctx itself.
func (r *Reconciler) underLease(ctx context.Context, name string) (context.Context, context.CancelFunc, bool) {
	if r.claims == nil {
		return ctx, func() {}, true
	}
	l, ok, err := r.cfg.Replicas.Current(ctx, name)
	if err != nil || !ok {
		r.log.Debug("write skipped: the lease is not this replica's any more", "lease", name, "err", err)
		return ctx, func() {}, false
	}
	ctx, cancel := context.WithDeadline(ctx, l.Deadline)
	return ctx, cancel, true
}

// fence is an operation's context under its stand's lease: cancelled when the lease nears expiry,
// with the lease as the engine's fence (its CLIs killed then). lost reports whether that happened.
func (r *Reconciler) fence(ctx context.Context, id string) (_ context.Context, cancel context.CancelFunc, lost func() bool, err error) {
	if r.claims == nil {
		return ctx, func() {}, func() bool { return false }, nil
	}
	l, stop, err := r.claims.heldLease(id)
	if err != nil {
		return ctx, func() {}, func() bool { return true }, err
	}
	ctx, cancel = untilClosed(stands.WithFence(ctx, stands.Fence{Token: l.Token, Stop: stop}), stop)
	return ctx, cancel, func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}, nil
}

// leading is ctx while this replica leads: cancelled when the leader lease nears expiry, so a pull
// request's plan that is running then ends (and is tried again by whoever leads) instead of editing
// its comment beside the next leader's. ok is false when this replica does not lead. The plans
// (Plans) run under it.
func (r *Reconciler) leading(ctx context.Context) (_ context.Context, cancel context.CancelFunc, ok bool) {
	if r.claims == nil {
		return ctx, func() {}, true
	}
	_, stop, err := r.claims.heldLease(stands.LeaderLease)
	if err != nil {
		return ctx, func() {}, false
	}
	ctx, cancel = untilClosed(ctx, stop)
	return ctx, cancel, true
}

// heldLease is this replica's lease name with its stop, while the store answers renewals.
func (c *claims) heldLease(name string) (stands.Lease, <-chan struct{}, error) {
	l, stop, ok := c.rep.Held(name)
	switch {
	case !ok:
		return l, nil, fmt.Errorf("%s: %w", name, errLeaseLost)
	case !c.rep.Renewing():
		return l, nil, fmt.Errorf("%s: %w", name, errNotRenewing)
	}
	return l, stop, nil
}

// untilClosed is ctx cancelled also when stop closes.
func untilClosed(ctx context.Context, stop <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

var (
	errLeaseLost   = errors.New("the stand's lease was lost before its operation ended: the replica that takes it over runs it")
	errNotRenewing = errors.New("the lease store did not answer the last renewal: nothing new starts until it does")
)
