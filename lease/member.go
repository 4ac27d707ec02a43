package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Member is one replica in the group: it keeps its heartbeat and its leases alive, knows the live
// replicas (for Owner), and closes a held lease's Stop channel a StopBudget before the lease's
// deadline if no renewal moved that deadline, so what runs under the lease ends in time. When the
// database does not answer, nothing is renewed and every Stop closes on time: a replica cut off from
// PostgreSQL stops its work before anyone may take it over, and nobody takes over meanwhile, since
// nobody can acquire.
type Member struct {
	s      *Store
	log    *slog.Logger
	reg    prometheus.Registerer // where its metrics are registered (WithMetrics); nil: nowhere
	budget time.Duration
	every  time.Duration

	mu       sync.Mutex
	held     map[string]*held
	live     []string
	lastBeat time.Time // of the last heartbeat the database took
	beatErr  error

	heldGauge prometheus.Gauge
	takeovers prometheus.Counter
	lost      prometheus.Counter
	leader    prometheus.Gauge
	liveGauge prometheus.Gauge
}

type held struct {
	stands.Lease
	stop  chan struct{}
	timer *time.Timer
}

// MemberOption tunes a Member.
type MemberOption func(*Member)

// WithStopBudget is how long before a lease's deadline its Stop closes (default 3 s): the time to
// kill what runs under it. It must be shorter than the store's grace.
func WithStopBudget(d time.Duration) MemberOption { return func(m *Member) { m.budget = d } }

// WithLogger logs takeovers, losses and outages.
func WithLogger(l *slog.Logger) MemberOption { return func(m *Member) { m.log = l } }

// WithMetrics registers the member's metrics on reg (labelled with its replica's name).
func WithMetrics(reg prometheus.Registerer) MemberOption { return func(m *Member) { m.reg = reg } }

// NewMember makes s's replica a member; Run keeps it one.
func NewMember(s *Store, opts ...MemberOption) *Member {
	m := &Member{s: s, log: slog.New(slog.DiscardHandler), budget: 3 * time.Second, every: s.ttl / 3, held: map[string]*held{}}
	for _, o := range opts {
		o(m)
	}
	// The member's metrics, declared and registered here: a new one is one more line.
	f, labels := promauto.With(m.reg), prometheus.Labels{"replica": s.name}
	m.heldGauge = f.NewGauge(prometheus.GaugeOpts{Name: "stands_leases_held", Help: "Stand leases this replica holds.", ConstLabels: labels})
	m.takeovers = f.NewCounter(prometheus.CounterOpts{Name: "stands_lease_takeovers_total", Help: "Leases this replica took over from a replica whose lease expired.", ConstLabels: labels})
	m.lost = f.NewCounter(prometheus.CounterOpts{Name: "stands_leases_lost_total", Help: "Leases this replica lost before it released them (not renewed in time).", ConstLabels: labels})
	m.leader = f.NewGauge(prometheus.GaugeOpts{Name: "stands_replica_leader", Help: "1 while this replica holds the leader lease.", ConstLabels: labels})
	m.liveGauge = f.NewGauge(prometheus.GaugeOpts{Name: "stands_replicas_live", Help: "Live replicas, as this one last saw them.", ConstLabels: labels})
	if m.budget >= s.grace {
		m.budget = s.grace / 2
	}
	return m
}

// ID is the replica's id: its holder name for this process's life.
func (m *Member) ID() string { return m.s.id }

// Name is the replica's name, stable across restarts: what Owner names.
func (m *Member) Name() string { return m.s.name }

// Run keeps the member alive until ctx ends, then leaves (its leases expire on their own, or are
// released by whoever holds them).
func (m *Member) Run(ctx context.Context) { m.run(ctx, true) }

// run is Run; a member that dies (a test's kill -9) does not leave.
func (m *Member) run(ctx context.Context, leave bool) {
	m.tick(ctx)
	t := time.NewTicker(m.every)
	defer t.Stop()
	defer m.end()
	for {
		select {
		case <-ctx.Done():
			if !leave {
				return
			}
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = m.s.Leave(lctx)
			cancel()
			return
		case <-t.C:
			m.tick(ctx)
		}
	}
}

// end closes the Stop of every lease still held when the member stops: nothing renews them any more.
func (m *Member) end() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.held {
		m.dropLocked(name)
	}
}

// tick is one round: heartbeat, renew every held lease, read the live replicas, try for leader.
func (m *Member) tick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.every)
	defer cancel()
	sent := time.Now()
	err := m.s.Heartbeat(ctx)
	var live []string
	if err == nil {
		live, err = m.s.Live(ctx)
	}
	m.mu.Lock()
	if err == nil {
		m.lastBeat, m.live = sent, live
	} else if m.beatErr == nil {
		m.log.Warn("lease store unavailable: nothing new starts, and what runs under a lease stops before it expires", "err", err)
	}
	m.beatErr = err
	m.liveGauge.Set(float64(len(m.live)))
	m.mu.Unlock()
	if err != nil {
		return
	}
	m.renew(ctx)
	if _, ok := m.lease(stands.LeaderLease); !ok {
		if _, _, err := m.acquire(ctx, stands.LeaderLease); err != nil {
			m.log.Warn("leader lease not acquired", "err", err)
		}
	}
}

func (m *Member) renew(ctx context.Context) {
	now, err := m.s.Renew(ctx)
	if err != nil {
		m.log.Warn("leases not renewed; they stop at their deadlines unless the next renewal succeeds", "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, h := range m.held {
		l, ok := now[name]
		if !ok || l.Token != h.Token {
			m.log.Warn("lease lost: it expired before it was renewed", "lease", name, "token", h.Token)
			m.lost.Inc()
			m.dropLocked(name)
			continue
		}
		h.Deadline = l.Deadline
		h.timer.Reset(time.Until(l.Deadline) - m.budget)
	}
}

// Ready is nil while the member's heartbeat is current (the last one the database took is younger
// than the lease time): /readyz of a replica.
func (m *Member) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.beatErr != nil && time.Since(m.lastBeat) >= m.s.ttl {
		return m.beatErr
	}
	if m.lastBeat.IsZero() {
		return errNotYet
	}
	return nil
}

var errNotYet = errors.New("no heartbeat yet")

// Renewing says whether the member's last round reached the database: while it does not, nothing
// new may start under a lease, though the leases held last until their deadlines.
func (m *Member) Renewing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.beatErr == nil && !m.lastBeat.IsZero()
}

// Leader says whether this replica holds the leader lease.
func (m *Member) Leader() bool {
	_, ok := m.lease(stands.LeaderLease)
	return ok
}

// Acquire takes the name's lease for work that must end when Stop closes; held elsewhere, ok is
// false and holder names who holds it. Nothing is acquired while the store is cut off.
func (m *Member) Acquire(ctx context.Context, name string) (l stands.Lease, stop <-chan struct{}, ok bool, holder string, err error) {
	m.mu.Lock()
	down := m.beatErr
	m.mu.Unlock()
	if down != nil {
		return stands.Lease{}, nil, false, "", down
	}
	h, holder, err := m.acquire(ctx, name)
	if err != nil || h == nil {
		return stands.Lease{}, nil, false, holder, err
	}
	m.mu.Lock()
	l = h.Lease // a renewal moves its deadline under mu
	m.mu.Unlock()
	return l, h.stop, true, m.s.id, nil
}

func (m *Member) acquire(ctx context.Context, name string) (*held, string, error) {
	if h, ok := m.lease(name); ok {
		return h, m.s.id, nil
	}
	l, ok, holder, err := m.s.Acquire(ctx, name)
	if err != nil || !ok {
		return nil, holder, err
	}
	if l.Took != "" {
		if name != stands.LeaderLease {
			m.takeovers.Inc()
		}
		m.log.Info("lease taken over from a replica that did not renew it", "lease", name, "from", l.Took, "token", l.Token)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &held{Lease: l, stop: make(chan struct{})}
	h.timer = time.AfterFunc(time.Until(l.Deadline)-m.budget, func() { m.expire(name, h) })
	m.held[name] = h
	m.setGauges()
	return h, m.s.id, nil
}

// expire closes a lease's Stop at its deadline less the budget: no renewal came in time.
func (m *Member) expire(name string, h *held) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[name] != h {
		return
	}
	m.log.Warn("lease not renewed in time: stopping what runs under it", "lease", name, "token", h.Token)
	m.lost.Inc()
	m.dropLocked(name)
}

func (m *Member) dropLocked(name string) {
	h := m.held[name]
	h.timer.Stop()
	close(h.stop)
	delete(m.held, name)
	m.setGauges()
}

func (m *Member) setGauges() {
	n := len(m.held)
	lead := 0.0
	if _, ok := m.held[stands.LeaderLease]; ok {
		n--
		lead = 1
	}
	m.heldGauge.Set(float64(n))
	m.leader.Set(lead)
}

// Release gives a lease up once what ran under it has ended (its Stop is not closed: nothing is left
// to stop).
func (m *Member) Release(ctx context.Context, name string) error {
	m.mu.Lock()
	h, ok := m.held[name]
	if ok {
		h.timer.Stop()
		delete(m.held, name)
		m.setGauges()
	}
	m.mu.Unlock()
	if !ok {
		return nil
	}
	return m.s.Release(ctx, h.Lease)
}

func (m *Member) lease(name string) (*held, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.held[name]
	return h, ok
}

// Owner is the name of the live replica the name belongs to by rendezvous ("" while the store is
// cut off): the one that should hold its lease.
func (m *Member) Owner(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.beatErr != nil {
		return ""
	}
	return Owner(name, m.live)
}

// Held is the member's lease on name and its Stop, while it holds it.
func (m *Member) Held(name string) (stands.Lease, <-chan struct{}, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.held[name]
	if !ok {
		return stands.Lease{}, nil, false
	}
	return h.Lease, h.stop, true
}

// Current is the member's lease on name if the database still has it live with its token: a write
// made under the lease somewhere the database cannot fence (a forge, a secret store) checks it
// first and finishes before the lease's Deadline, after which a successor may start only a grace
// later.
func (m *Member) Current(ctx context.Context, name string) (stands.Lease, bool, error) {
	l, _, ok := m.Held(name)
	if !ok {
		return stands.Lease{}, false, nil
	}
	live, err := m.s.Current(ctx, name, l.Token)
	if err != nil || !live {
		return stands.Lease{}, false, err
	}
	return l, true, nil
}

// TokenLive says whether token is the live token of the named lease, whoever holds it: how a stack
// lock left under a lease is judged (engine.Config.LeaseCheck).
func (m *Member) TokenLive(ctx context.Context, name string, token int64) (bool, error) {
	return m.s.Current(ctx, name, token)
}

// Document is the store's document called name, which every replica reads and any may replace.
func (m *Member) Document(name string) *Document { return m.s.Document(name) }

// Put writes name's record under the member's lease on it; ErrLost when it holds none, or the
// database no longer has it live.
func (m *Member) Put(ctx context.Context, name string, body []byte) error {
	l, _, ok := m.Held(name)
	if !ok {
		return fmt.Errorf("write record %s: %w", name, stands.ErrLeaseLost)
	}
	return m.s.Put(ctx, l, body)
}

// Versions is every record's version (Store.Versions).
func (m *Member) Versions(ctx context.Context) (map[string]int64, error) { return m.s.Versions(ctx) }

// Records reads the named records (Store.Records).
func (m *Member) Records(ctx context.Context, names []string) (map[string]stands.LeaseRecord, error) {
	return m.s.Records(ctx, names)
}

// ReleaseAll gives up every lease the member holds, the leader's too: its work has ended (a drain),
// and the others need not wait for the leases to expire.
func (m *Member) ReleaseAll(ctx context.Context) error {
	m.mu.Lock()
	names := make([]string, 0, len(m.held))
	for name := range m.held {
		names = append(names, name)
	}
	m.mu.Unlock()
	var errs []error
	for _, name := range names {
		if err := m.Release(ctx, name); err != nil && !errors.Is(err, stands.ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Live is the live replicas as the member last saw them (nil while the store is cut off).
func (m *Member) Live() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.beatErr != nil {
		return nil
	}
	return slices.Clone(m.live)
}
