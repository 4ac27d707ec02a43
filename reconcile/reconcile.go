// Package reconcile is the GitOps loop: snapshot → judgement (package judge: a broken stand fails
// alone) → diff against the Pulumi inventory → a bounded worker pool running operations → status.
// Every step returns an outcome; summarise alone turns outcomes into statuses, which are committed
// back only when they changed. After a cycle, it hands the tracked branch's judgement to the pull
// request plans (Plans, package prplan). It talks to Git, the engine, the secret store and Gitea
// through the small interfaces below and the plain types of package stands, so it links no Git,
// Gitea, PostgreSQL or Pulumi library: its unit tests use fakes and its integration tests the real
// servers.
package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Source is the stands repository.
type Source interface {
	Fetch(ctx context.Context) (*stands.Snapshot, error)
	// StatusFiles is the status branch's tree, where the last published statuses are.
	StatusFiles(ctx context.Context) (fs.FS, error)
	Publish(ctx context.Context, files map[string][]byte, message string) (string, error)
}

// Engine runs operations on stands. Its errors carry their reason (reason.Of): that decides retry,
// wait or stall.
type Engine interface {
	Inventory(ctx context.Context) ([]stands.StackInfo, error)
	Apply(ctx context.Context, in stands.Input, force bool) (*stands.Result, error)
	Drift(ctx context.Context, in stands.Input) (*stands.Result, error)
	Destroy(ctx context.Context, ref stands.StackRef) (*stands.Result, error)
}

// Secrets resolves `!secret` references and keeps each stand's unmasked connection record.
type Secrets interface {
	manifest.SecretSource
	WriteConnection(ctx context.Context, standID string, record json.RawMessage) error
}

// Forge is the Gitea API as the loop uses it: a commit status stands/<stand-id> on each applied
// commit, linking to the stand's status file.
type Forge interface {
	SetStatus(ctx context.Context, sha, context string, state stands.CommitState, description, targetURL string) error
	FileURL(branch, path string) string
}

// Pricer reads the server types' monthly list prices (the engine's cloud).
type Pricer interface {
	Prices(ctx context.Context) (stands.Prices, error)
}

// Plans plans the open pull requests into the tracked branch (package prplan). Schedule hands it
// the tracked branch's judgement at commit and the stacks, and returns at once: no pull request
// delays a cycle. lead is ctx while this reconciler leads, cancelled when that ends (ok false when
// it does not lead). Wait waits for the plans running; Close cancels them and waits.
type Plans interface {
	Schedule(main *judge.Evaluation, commit string, actual []diff.Actual, lead func(context.Context) (context.Context, context.CancelFunc, bool))
	Wait()
	Close()
}

// Expiries warns of the stands nearing their end and removes them through pull requests (package
// expiry): only the leader hands it each cycle's endings; it returns at once.
type Expiries interface {
	Schedule(e stands.Endings)
	Wait()
	Close()
}

// Config tunes the loop. Zero values take the defaults shown.
type Config struct {
	Owner      string // the reconciler's owner: stands of another owner are not its to apply
	Passphrase string // keys the spec hash (manifest.SpecHash)
	Workers    int    // operations at once (4)
	// MaxDestroyShare, AllowMassDestroy: the destroy guards (diff.Input).
	MaxDestroyShare  float64
	AllowMassDestroy bool
	StallAfter       int           // Generic/Stalling failures on one spec before Stalled (3)
	BackoffBase      time.Duration // first retry delay (30s), doubled per failure
	BackoffMax       time.Duration // (10m)
	DriftInterval    time.Duration // 0: no drift checks
	DriftApply       bool          // re-apply a drifted stand instead of only reporting it
	Log              *slog.Logger
	Now              func() time.Time

	// Branch and StatusBranch name the tracked branch (pull requests into it are planned) and the one
	// status goes to (commit statuses link to the files there).
	Branch       string
	StatusBranch string
	// Forge, when set, gets commit statuses: stands/<stand-id> on each applied commit.
	Forge Forge
	// Plans, when set, plans every open pull request into Branch after each cycle (only the leader
	// does, with replicas).
	Plans Plans
	// OperationTimeout bounds one apply, drift check or destroy (DefaultOperationTimeout);
	// InventoryTimeout the inventory of a cycle (DefaultInventoryTimeout).
	OperationTimeout time.Duration
	InventoryTimeout time.Duration
	// Controls: the operator's switches (controls.go).
	Controls ControlsConfig
	// NodesMode is the engine's node mode (engine.NodesFull or NodesSkipped; "" unknown): a stack
	// applied in another is applied again.
	NodesMode string
	// StatusDelay gathers the status changes of that long into one commit (0: each at once).
	StatusDelay time.Duration
	// SecretRefresh is how long the judgement of an unchanged commit, with the secret values it
	// read, is kept (0: every cycle reads them again). A secret changed in the store is applied at
	// the next commit or within this time.
	SecretRefresh time.Duration
	// Health: the live health check and --heal (health.go).
	Health HealthConfig
	// Expiries, when set, gets each cycle's endings (leader only; not while a manifest cannot be
	// read or the secret store is down: a stand that seems gone may not be).
	Expiries Expiries
	// Prices, when its Pricer is set, prices each stand's servers for its status and STATUS.md
	// (lifetime.go).
	Prices PricesConfig
	// Metrics, when set, gets the loop's metrics (metrics.go).
	Metrics prometheus.Registerer
	// Review: the review gate (review.go).
	Review ReviewConfig
	// Replicas, when set, makes this reconciler one of several on one PostgreSQL (replicas.go): it
	// operates the stands whose leases it holds, and commits status only while it is the leader.
	Replicas Replicas
}

// ControlsConfig is the operator's switches' part of Config.
type ControlsConfig struct {
	// PlanOnly decides and reports, and applies and destroys nothing. State is the file that keeps
	// the operator's local switches across restarts ("" keeps them in memory).
	PlanOnly bool
	State    string
}

// HealthConfig is the live health check's part of Config. With Interval > 0, Checker checks every
// applied stand's instances on its servers that often: a failure makes the stand Degraded, recovery
// Ready again. Heal restarts an unhealthy instance, and applies the stand again when that does not
// help, at most Limit times an hour per instance (DefaultHealLimit); Settle is the wait after
// restarts before the check that judges them (15s).
type HealthConfig struct {
	Checker  Checker
	Interval time.Duration
	Heal     bool
	Limit    int
	Settle   time.Duration
}

// PricesConfig is the lifetimes' part of Config: Pricer, when set, is asked for the prices every
// Interval (an hour).
type PricesConfig struct {
	Pricer   Pricer
	Interval time.Duration
}

// ReviewConfig is the review gate's part of Config. Require applies a change of a stand only when
// it was reviewed; Reviews asks pull requests (nil: only the first import and ctl approve let
// changes through). State keeps what was let through across restarts ("" in memory only); Store,
// when set, instead (with replicas: the state they share).
type ReviewConfig struct {
	Require bool
	Reviews Reviews
	State   string
	Store   ReviewStore
}

// Defaults of the deadlines: a two-node stand's first apply takes minutes (cloud-init, image pulls),
// a slow registry more; an inventory reads the backend's stack files.
const (
	DefaultOperationTimeout = time.Hour
	DefaultInventoryTimeout = 5 * time.Minute
)

// Reconciler owns the stands' statuses and the operations running on them.
type Reconciler struct {
	cfg Config
	src Source
	eng Engine
	sec Secrets
	log *slog.Logger

	opsCtx    context.Context
	cancelOps context.CancelFunc
	ops       sync.WaitGroup
	sem       chan struct{}
	wake      chan struct{}
	interval  atomic.Int64 // Run's poll interval, which SetInterval changes live
	// cycleSince: when Run's cycle under way began (Unix nanoseconds); 0 between cycles.
	cycleSince atomic.Int64

	mu         sync.Mutex
	stands     map[string]*stand
	unreadable []string
	health     Health

	pub *publisher

	metrics     *metrics
	active      int // operations holding a worker
	sw          *switches
	gate        *gate
	heals       *healBook
	lastSync    time.Time       // the end of the last cycle without error
	declaredIDs map[string]bool // stands the last evaluated snapshot declares
	lastEval    *keptEvaluation // used by cycles only, which never overlap
	fmu         sync.Mutex
	forgotten   map[string]bool // stands the next judgement judges again (forgetJudgement)
	warned      map[manifest.Diagnostic]bool
	secretsDown int // consecutive cycles the secret store did not answer (cycles are sequential)
	life        *lifetimes

	claims *claims // nil without replicas (replicas.go)
}

type stand struct {
	status    *Status // replaced, never edited in place: copies handed out stay valid
	running   bool
	rt        retries
	lastDrift time.Time
	connSaved string            // digest of the connection record last written to the secret store
	ref       stands.StackRef   // its stack, once the inventory found one (the health check's target)
	declared  *manifest.Stand   // as the tracked branch last declared it, valid, with its end in force; nil when not
	lifetime  manifest.Lifetime // the repository's policy in force when declared was judged
	endHeld   string            // why the end the branch asks for is not in force ("" when it is)
}

// Health is what /readyz reports: the outside services of the last cycle.
type Health struct {
	Source  error
	Secrets error
	Backend error
	// Timeout is the last operation that ran past its deadline, until an operation succeeds.
	Timeout error
	// Leases: with replicas, the lease store unreachable for longer than a lease lasts.
	Leases error
	Cycles int // completed cycles
}

// Dependencies names each outside service with its state (nil: fine), for /readyz and /metrics.
func (h Health) Dependencies() map[string]error {
	return map[string]error{"source": h.Source, "secrets": h.Secrets, "backend": h.Backend, "operations": h.Timeout, "leases": h.Leases}
}

// New returns a reconciler; operations run on their own context, ended by Drain.
func New(cfg Config, src Source, eng Engine, sec Secrets) *Reconciler {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = 3
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 30 * time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 10 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OperationTimeout <= 0 {
		cfg.OperationTimeout = DefaultOperationTimeout
	}
	if cfg.InventoryTimeout <= 0 {
		cfg.InventoryTimeout = DefaultInventoryTimeout
	}
	if cfg.Health.Limit <= 0 {
		cfg.Health.Limit = DefaultHealLimit
	}
	if cfg.Prices.Interval <= 0 {
		cfg.Prices.Interval = time.Hour
	}
	if cfg.Health.Settle <= 0 {
		cfg.Health.Settle = defaultHealSettle
	}
	if sec == nil {
		sec = envSecrets{}
	}
	r := &Reconciler{cfg: cfg, src: src, eng: eng, sec: sec, log: cfg.Log, sem: make(chan struct{}, cfg.Workers),
		wake: make(chan struct{}, 1), stands: map[string]*stand{}, pub: newPublisher(cfg, src),
		warned: map[manifest.Diagnostic]bool{},
		claims: newClaims(cfg.Replicas)}
	r.opsCtx, r.cancelOps = context.WithCancel(context.Background())
	r.life, r.gate, r.heals = newLifetimes(cfg), newGate(cfg, src, r.claims), newHealBook(cfg.Health.Limit)
	r.metrics = newMetrics(r.gauges, cfg.Metrics)
	var err error
	if r.sw, err = newSwitches(cfg); err != nil {
		r.log.Error("operator controls unreadable: starting paused; fix or remove the file, then `stands-reconciler ctl resume`", "err", err)
	}
	return r
}

// envSecrets is local mode: secrets from SECRET_<NAME>, connections kept nowhere.
type envSecrets struct{ manifest.EnvSource }

func (envSecrets) WriteConnection(context.Context, string, json.RawMessage) error { return nil }

// Health returns the state of the outside services as the last cycle saw them.
func (r *Reconciler) Health() Health {
	r.mu.Lock()
	h := r.health
	r.mu.Unlock()
	h.Leases = r.claims.ready()
	return h
}

// Status returns a copy of a stand's status (nil when it has none).
func (r *Reconciler) Status(id string) *Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.stands[id]; ok && st.status != nil {
		c := *st.status
		return &c
	}
	return nil
}

// Statuses returns a copy of every stand's status, by stand id.
func (r *Reconciler) Statuses() map[string]Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Status{}
	for id, st := range r.stands {
		if st.status != nil {
			out[id] = *st.status
		}
	}
	return out
}

func (r *Reconciler) state(id string) *stand {
	st, ok := r.stands[id]
	if !ok {
		st = &stand{}
		r.stands[id] = st
	}
	return st
}

// record turns an outcome into the stand's new status through summarise. Called with r.mu held.
func (r *Reconciler) record(id string, o outcome) {
	st := r.state(id)
	var prev Status
	if st.status != nil {
		prev = *st.status
	}
	next, rt := summarise(o, prev, st.rt, r.cfg.Now(), policy{stallAfter: r.cfg.StallAfter, backoff: r.backoff})
	st.rt = rt
	if next.Phase != reason.Degraded {
		next.Health = nil // what a check found is the Degraded phase's; any other phase drops it
	}
	if next.Phase != "" {
		next.ID = id
		r.life.stamp(st, &next)
		if st.status != nil && reflect.DeepEqual(*st.status, next) {
			return // the same: its pointer stays, which is how the publisher knows nothing changed
		}
		st.status = &next
	}
}

// backoff is capped exponential with ±20% jitter.
func (r *Reconciler) backoff(n int) time.Duration {
	d := r.cfg.BackoffBase << min(n-1, 20)
	if d <= 0 || d > r.cfg.BackoffMax {
		d = r.cfg.BackoffMax
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Cycle runs one reconciliation: it decides, records the decisions, and starts the operations it
// decided on without waiting for them (Wait does). A failed fetch or inventory changes nothing.
func (r *Reconciler) Cycle(ctx context.Context) error {
	start := r.cfg.Now()
	err := r.cycle(ctx)
	r.metrics.cycle(r.cfg.Now().Sub(start), err)
	if err == nil {
		r.mu.Lock()
		r.lastSync = r.cfg.Now()
		r.mu.Unlock()
	}
	return err
}

func (r *Reconciler) cycle(ctx context.Context) error {
	snap, err := r.src.Fetch(ctx)
	if err == nil {
		err = r.loadPublished(ctx)
	}
	if err != nil {
		r.mu.Lock()
		r.health.Source = err
		r.mu.Unlock()
		r.metrics.fetchFailed()
		return fmt.Errorf("fetch stands repository: %w", err)
	}
	log := r.log.With("commit", mdtext.Short(snap.Source))
	r.life.refresh(ctx)
	// The stacks are read while the stands are judged, each on a core of its own. A stand running
	// when the reading starts is held this cycle even if its operation ends before the judgement:
	// the stacks read may be from before its end.
	running := r.runningNow()
	inventory := r.inventory(ctx)
	d, err := r.judge(ctx, snap, running)
	stacks, ierr := inventory()
	if err != nil {
		return err
	}
	err = ierr
	if err != nil {
		err = fmt.Errorf("the Pulumi backend is unavailable: %w", err)
	}
	r.mu.Lock()
	r.health.Source, r.health.Secrets, r.health.Backend = nil, d.secretsErr, err
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("read inventory: %w", err) // nothing is decided without the stacks
	}
	actual, found := r.actual(stacks)
	r.claim(ctx, slices.Sorted(maps.Keys(found))) // stacks of stands the repository no longer declares
	var hold reason.Reason
	switch {
	case d.secretsErr != nil:
		r.metrics.secretError("read")
		hold = reason.VaultUnavailable
		// An outage is logged at its start and then every tenth cycle, as a failed cycle is.
		if r.secretsDown++; r.secretsDown <= 3 || r.secretsDown%10 == 0 {
			log.Warn("secret store unavailable: nothing is applied or destroyed this cycle", "err", d.secretsErr, "consecutive_cycles", r.secretsDown)
		}
	case r.secretsDown > 0:
		log.Info("secret store answers again", "after_cycles", r.secretsDown)
		r.secretsDown = 0
	}
	actions := d.ev.Decide(actual, r.guards(), func(id string) bool { return d.running[id] }, hold)
	d.unreviewed = r.gate.review(ctx, actions, d, found, snap.Source)

	r.mu.Lock()
	r.unreadable = d.unreadable
	r.sw.setRepoPause(repositoryPause(snap.Files, snap.Source))
	ops := r.decide(actions, d, found, snap.Source)
	r.health.Cycles++
	r.mu.Unlock()

	counts := map[diff.Kind]int{}
	for _, a := range actions {
		counts[a.Kind]++
	}
	log.Info("cycle planned", "create", counts[diff.Create], "update", counts[diff.Update], "destroy", counts[diff.Destroy],
		"noop", counts[diff.Noop], "blocked", counts[diff.Blocked], "operations", len(ops))
	r.reportUnreviewed(ctx)
	r.publishSoon(ctx)
	for _, o := range ops {
		r.ops.Add(1)
		go r.run(o)
	}
	if r.cfg.Plans != nil && r.claims.leader() {
		r.cfg.Plans.Schedule(d.ev, snap.Source, actual, r.leading)
	}
	if r.cfg.Expiries != nil && r.claims.leader() && len(d.ev.Unreadable) == 0 && d.secretsErr == nil {
		r.cfg.Expiries.Schedule(r.life.endings(snap.Source, d, r.Status))
	}
	return nil
}

// desiredState is what a snapshot declares, judged stand by stand, and the stands running when it
// was judged: they are held as they are.
type desiredState struct {
	ev         *judge.Evaluation
	running    map[string]bool
	inputs     map[string]*stands.Input
	secretsErr error
	unreadable []string
	unreviewed map[string]string      // why each change held for review is (review.go)
	authorised map[string]*Authorised // what let each change through the review gate (review.go)
	ends       map[string]endHeld     // the stands whose end in force is not the one asked (review_lifetime.go)
	waiting    map[string]bool        // changes waiting for the merge of their removal (review.go)
	gated      map[string]bool        // the changes the review gate judged (review.go): no other starts
}

// declared is stand v as its lifetime is judged: with its end in force.
func (d *desiredState) declared(v judge.Verdict) *manifest.Stand {
	if e, ok := d.ends[v.ID]; ok {
		return e.stand
	}
	return v.Input.Stand
}

// guards are the destroy guards of the settings.
func (r *Reconciler) guards() judge.Guards {
	return judge.Guards{Owner: r.cfg.Owner, MaxDestroyShare: r.cfg.MaxDestroyShare, AllowMassDestroy: r.cfg.AllowMassDestroy}
}

// runningNow are the stands an operation or a health check holds.
func (r *Reconciler) runningNow() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for id, st := range r.stands {
		if st.running {
			out[id] = true
		}
	}
	return out
}

// inventory starts reading the stacks and returns the wait for them.
func (r *Reconciler) inventory(ctx context.Context) func() ([]stands.StackInfo, error) {
	type read struct {
		stacks []stands.StackInfo
		err    error
	}
	done := make(chan read, 1)
	go func() {
		ictx, cancel := context.WithTimeout(ctx, r.cfg.InventoryTimeout)
		defer cancel()
		stacks, err := r.eng.Inventory(ictx)
		done <- read{stacks, err}
	}()
	return func() ([]stands.StackInfo, error) {
		got := <-done
		return got.stacks, got.err
	}
}

// judge evaluates the snapshot and records what it says of each stand that is not running, nor was
// (running) when the stacks were read.
func (r *Reconciler) judge(ctx context.Context, snap *stands.Snapshot, running map[string]bool) (*desiredState, error) {
	ev, err := r.evaluate(ctx, snap)
	if err != nil {
		return nil, err
	}
	r.claim(ctx, r.known(ev)) // before the verdicts are recorded: a stand newly held continues from its record
	d := &desiredState{ev: ev, running: map[string]bool{}, inputs: map[string]*stands.Input{}, authorised: map[string]*Authorised{}, secretsErr: ev.SecretsErr, unreadable: ev.Unreadable,
		ends: r.gate.ends(ctx, ev, snap.Source), waiting: map[string]bool{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range ev.Verdicts {
		if running[v.ID] || r.state(v.ID).running {
			d.running[v.ID] = true
		}
	}
	for _, w := range ev.Warnings {
		if !r.warned[w] { // once per process: the repository is read every poll
			r.warned[w] = true
			r.log.Warn("manifest warning", "at", w.Pos.String(), "rule", w.Rule, "warning", w.Msg)
		}
	}
	r.declaredIDs = map[string]bool{}
	for _, v := range ev.Verdicts {
		r.declaredIDs[v.ID] = true
		if d.running[v.ID] {
			continue
		}
		st := r.state(v.ID)
		st.declared, st.lifetime, st.endHeld = nil, ev.Lifetime, ""
		o := outcomeOf(v, snap.Source)
		if v.Input != nil {
			d.inputs[v.ID] = v.Input
			st.declared = d.declared(v)
			st.endHeld = d.ends[v.ID].why
			o.ended = r.life.ended(st)
		}
		r.record(v.ID, o)
	}
	return d, nil
}

// actual turns the inventory into the diff's view, and the stacks by stand id.
func (r *Reconciler) actual(stacks []stands.StackInfo) ([]diff.Actual, map[string]stands.StackInfo) {
	var out []diff.Actual
	found := map[string]stands.StackInfo{}
	for _, s := range stacks {
		id := s.Stand(r.cfg.Owner)
		if owner, _, _, _ := manifest.ParseStandID(id); owner != r.cfg.Owner {
			continue // another owner's reconciler's, on a shared backend: not ours to count or judge
		}
		out = append(out, diff.Actual{ID: id, Owned: s.Owned, SpecHash: s.SpecHash, Print: s.Print, Protected: s.Protect})
		found[id] = s
	}
	return out, found
}
