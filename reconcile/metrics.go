package reconcile

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/stands-engine/stands-reconciler/reason"
)

// metrics are the reconciler's, for /metrics, declared and registered on Config.Metrics here: a
// counter or a duration is one field and its line in newMetrics. What describes the stands (their
// phases, the running operations, the time since the last successful sync, the outside services)
// is read from the reconciler's own state when scraped (Collect, through read), so it cannot
// disagree with the status files; the counters and durations are recorded where a cycle or an
// operation ends.
type metrics struct {
	read       func() gauges
	cycles     *prometheus.HistogramVec
	operations *prometheus.HistogramVec
	fetchFails prometheus.Counter
	secretErrs *prometheus.CounterVec
	// healthChecks and heals: the live health check (health.go).
	healthChecks *prometheus.CounterVec
	heals        *prometheus.CounterVec
	phases       *prometheus.Desc
	blocked      *prometheus.Desc
	running      *prometheus.Desc
	queued       *prometheus.Desc
	controls     *prometheus.Desc
	sinceSync    *prometheus.Desc
	down         *prometheus.Desc
	unreviewed   *prometheus.Desc
	gate         *prometheus.Desc
}

// gauges is what a scrape reads of the loop's state, taken at one moment.
type gauges struct {
	phases     map[reason.Phase]int
	blocked    map[reason.Reason]int
	decided    int // operations decided, running or waiting for a worker
	active     int // operations holding a worker
	health     Health
	lastSync   time.Time
	now        time.Time
	paused     bool
	planOnly   bool
	unreviewed int
	gated      bool // changes are applied only once reviewed
}

func newMetrics(read func() gauges, reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		read: read,
		cycles: f.NewHistogramVec(prometheus.HistogramOpts{Name: "stands_cycle_duration_seconds",
			Help: "Duration of reconcile cycles (fetch, judge, inventory, decide, publish), by result.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}, []string{"result"}),
		operations: f.NewHistogramVec(prometheus.HistogramOpts{Name: "stands_operation_duration_seconds",
			Help:    "Duration of operations on stands, by kind (apply, drift, observe, destroy) and result (ok or the reason's kind: Waiting, Stalling, Generic).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13)}, []string{"kind", "result"}),
		fetchFails: f.NewCounter(prometheus.CounterOpts{Name: "stands_source_fetch_failures_total", Help: "Cycles whose fetch of the stands repository failed."}),
		secretErrs: f.NewCounterVec(prometheus.CounterOpts{Name: "stands_secret_store_errors_total",
			Help: "Errors of the secret store (Vault): read (a cycle could not resolve secrets), write (a connection record was not stored)."}, []string{"operation"}),
		healthChecks: f.NewCounterVec(prometheus.CounterOpts{Name: "stands_health_checks_total",
			Help: "Live health checks of applied stands, by result: healthy, unhealthy (an instance), unreachable (a server), error (not made: the state unreadable)."}, []string{"result"}),
		heals: f.NewCounterVec(prometheus.CounterOpts{Name: "stands_heals_total",
			Help: "Heal steps (--heal), by action (restart, apply, none: the hourly limit) and result."}, []string{"action", "result"}),
		phases: prometheus.NewDesc("stands_stands", "Stands by phase, as their status files say (with replicas, the stands this replica holds).", []string{"phase"}, nil),
		blocked: prometheus.NewDesc("stands_blocked", "Blocked stands by reason; OtherOwner: another owner's stands, which this reconciler only reads, so an alert on Blocked leaves them out.",
			[]string{"reason"}, nil),
		running:    prometheus.NewDesc("stands_operations_running", "Operations running now, each on a worker.", nil, nil),
		queued:     prometheus.NewDesc("stands_operations_queued", "Operations decided and waiting for a worker (--workers).", nil, nil),
		controls:   prometheus.NewDesc("stands_control_active", "Whether an operator's control is in force: paused (locally or by .stands/pause), plan_only.", []string{"control"}, nil),
		sinceSync:  prometheus.NewDesc("stands_seconds_since_last_successful_sync", "Seconds since the last cycle that fetched, judged and planned without error (-1: none yet).", nil, nil),
		unreviewed: prometheus.NewDesc("stands_unreviewed_changes", "Changes of stands held because no review approved them (--require-review), each until a reviewed pull request or ctl approve.", nil, nil),
		gate:       prometheus.NewDesc("stands_review_gate", "1 when a change of a stand is applied only once reviewed (--require-review with the Gitea API); 0 when every change is applied as it lands.", nil, nil),
		down:       prometheus.NewDesc("stands_dependency_up", "Whether an outside service answered in the last cycle (source, secrets, backend), no operation ran past its deadline (operations) and, with replicas, the lease store answers (leases).", []string{"dependency"}, nil),
	}
	// Served from the start, at 0: an alert on increase() needs the series before the first error.
	for _, op := range []string{"read", "write"} {
		m.secretErrs.WithLabelValues(op)
	}
	for _, res := range []string{"healthy", "unhealthy", "unreachable", "error"} {
		m.healthChecks.WithLabelValues(res)
	}
	if reg != nil {
		reg.MustRegister(m) // the gauges read at each scrape
	}
	return m
}

// Describe describes the gauges read at each scrape; the counters and durations are registered on
// their own.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.phases
	ch <- m.blocked
	ch <- m.running
	ch <- m.queued
	ch <- m.controls
	ch <- m.sinceSync
	ch <- m.down
	ch <- m.unreviewed
	ch <- m.gate
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	g := m.read()
	for p, n := range g.phases {
		ch <- prometheus.MustNewConstMetric(m.phases, prometheus.GaugeValue, float64(n), string(p))
	}
	for why, n := range g.blocked {
		ch <- prometheus.MustNewConstMetric(m.blocked, prometheus.GaugeValue, float64(n), string(why))
	}
	ch <- prometheus.MustNewConstMetric(m.running, prometheus.GaugeValue, float64(g.active))
	ch <- prometheus.MustNewConstMetric(m.unreviewed, prometheus.GaugeValue, float64(g.unreviewed))
	ch <- prometheus.MustNewConstMetric(m.gate, prometheus.GaugeValue, b2f(g.gated))
	ch <- prometheus.MustNewConstMetric(m.queued, prometheus.GaugeValue, float64(max(g.decided-g.active, 0)))
	for name, on := range map[string]bool{"paused": g.paused, "plan_only": g.planOnly} {
		ch <- prometheus.MustNewConstMetric(m.controls, prometheus.GaugeValue, b2f(on), name)
	}
	since := -1.0
	if !g.lastSync.IsZero() {
		since = g.now.Sub(g.lastSync).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(m.sinceSync, prometheus.GaugeValue, since)
	for name, err := range g.health.Dependencies() {
		up := 1.0
		if err != nil {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(m.down, prometheus.GaugeValue, up, name)
	}
}

// gauges reads the loop's state for a scrape.
func (r *Reconciler) gauges() gauges {
	g := gauges{phases: map[reason.Phase]int{}, blocked: map[reason.Reason]int{}, now: r.cfg.Now()}
	for _, p := range reason.Phases {
		g.phases[p] = 0
	}
	// Every reason that blocks is served, 0 included, as the phases are: an alert on one sees it.
	for _, why := range reason.All() {
		if why.Phase() == reason.Blocked {
			g.blocked[why] = 0
		}
	}
	r.mu.Lock()
	for id, st := range r.stands {
		if st.status != nil && r.claims.holds(id) { // with replicas, each counts its own: their sum is every stand
			g.phases[st.status.Phase]++
			if st.status.Phase == reason.Blocked {
				g.blocked[st.status.Reason]++
			}
		}
		if st.running {
			g.decided++
		}
	}
	g.health, g.lastSync, g.active = r.health, r.lastSync, r.active
	g.paused, g.planOnly = r.sw.paused() != nil, r.sw.planOnly()
	g.unreviewed, g.gated = r.gate.pending(), r.gate.gating()
	r.mu.Unlock()
	g.health.Leases = r.claims.ready()
	return g
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *metrics) cycle(d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.cycles.WithLabelValues(result).Observe(d.Seconds())
}

func (m *metrics) operation(kind opKind, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = reason.Of(err).Kind().String()
	}
	m.operations.WithLabelValues(string(kind), result).Observe(d.Seconds())
}

func (m *metrics) fetchFailed() { m.fetchFails.Inc() }

// secretError counts an error of the secret store: op is read or write.
func (m *metrics) secretError(op string) { m.secretErrs.WithLabelValues(op).Inc() }

// healthCheck counts a live health check by its result (healthy, unhealthy, unreachable, error).
func (m *metrics) healthCheck(result string) { m.healthChecks.WithLabelValues(result).Inc() }

// heal counts a heal step by action (restart, apply, none) and result.
func (m *metrics) heal(action, result string) { m.heals.WithLabelValues(action, result).Inc() }
