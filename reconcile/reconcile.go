// Package reconcile is the GitOps loop: snapshot → manifests (a broken stand fails alone) → diff
// against the Pulumi inventory → a bounded worker pool running engine operations → status, written
// in one place and committed back only when it changed. It talks to Git, the engine and the secret
// store through the small interfaces below, so its unit tests use fakes and its integration tests
// the real servers.
package reconcile

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/engine/manifest"
	"github.com/stands-engine/stands-reconciler/gitsource"
)

// Source is the stands repository.
type Source interface {
	Fetch(ctx context.Context) (*gitsource.Snapshot, error)
	// StatusFiles is the status branch's tree, where the last published statuses are.
	StatusFiles(ctx context.Context) (fs.FS, error)
	Publish(ctx context.Context, files map[string][]byte, message string) (string, error)
}

// Engine runs operations on stands.
type Engine interface {
	Inventory(ctx context.Context) ([]engine.StackInfo, error)
	Apply(ctx context.Context, in engine.Stand, force bool) (*engine.Result, error)
	Drift(ctx context.Context, in engine.Stand) (*engine.Result, error)
	Destroy(ctx context.Context, ref engine.StackRef) (*engine.Result, error)
}

// Secrets resolves `!secret` references and keeps each stand's unmasked connection record.
type Secrets interface {
	manifest.SecretSource
	WriteConnection(ctx context.Context, standID string, record json.RawMessage) error
}

// AllowDestroyFile names, one stand id per line, the stands whose destroy was approved in the
// repository: they pass the mass-deletion and last-stand guards (never protect).
const AllowDestroyFile = ".stands/allow-destroy"

// Status reasons the loop sets itself (the engine's reasons come from engine.Classify).
const (
	ReasonApplied           = "Applied"
	ReasonUpToDate          = "UpToDate"
	ReasonRemoved           = "RemovedFromRepository"
	ReasonDrift             = "DriftDetected"
	ReasonInvalid           = "InvalidManifest"
	ReasonVaultUnavailable  = "VaultUnavailable"
	ReasonOtherOwner        = "OtherOwner"
	ReasonRetriesExhausted  = "RetriesExhausted"
	ReasonUnreadableSibling = "UnreadableManifest"
)

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
	// Forge, when set, gets commit statuses: stands/<stand-id> on each applied commit. With Planner
	// and Refs too, every open pull request into Branch is planned (stands/plan and one comment).
	Forge   Forge
	Planner Planner
	Refs    RefSource
}

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

	mu         sync.Mutex
	stands     map[string]*stand
	unreadable []string
	loaded     bool
	health     Health

	pubMu     sync.Mutex
	published map[string][]byte

	prs         previewState    // used by Cycle only
	declaredIDs map[string]bool // stands the last evaluated snapshot declares
}

type stand struct {
	status    *Status
	running   bool
	failures  int    // consecutive Generic/Stalling failures on failSpec
	failSpec  string // spec hash (or "destroy") the failures were on
	waits     int    // consecutive Waiting failures: backoff only, never Stalled
	next      time.Time
	lastDrift time.Time
	connSaved string // digest of the connection record last written to the secret store
}

// Health is what /readyz reports: the outside services of the last cycle.
type Health struct {
	Source  error
	Secrets error
	Backend error
	Cycles  int // completed cycles
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
	if sec == nil {
		sec = envSecrets{}
	}
	r := &Reconciler{cfg: cfg, src: src, eng: eng, sec: sec, log: cfg.Log, sem: make(chan struct{}, cfg.Workers),
		wake: make(chan struct{}, 1), stands: map[string]*stand{}, published: map[string][]byte{},
		prs: previewState{planned: map[int64]string{}}}
	r.opsCtx, r.cancelOps = context.WithCancel(context.Background())
	return r
}

// envSecrets is local mode: secrets from SECRET_<NAME>, connections kept nowhere.
type envSecrets struct{ manifest.EnvSource }

func (envSecrets) WriteConnection(context.Context, string, json.RawMessage) error { return nil }

// Health returns the state of the outside services as the last cycle saw them.
func (r *Reconciler) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.health
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

type opKind string

const (
	opApply   opKind = "apply"
	opObserve opKind = "observe" // read a stand's outputs when its status is missing or stale; no pulumi up
	opDrift   opKind = "drift"
	opDestroy opKind = "destroy"
)

type op struct {
	kind   opKind
	id     string
	in     *engine.Stand
	ref    engine.StackRef
	commit string
}

// desiredState is what a snapshot declares, judged stand by stand.
type desiredState struct {
	ev         *evaluation
	desired    []diff.Desired
	inputs     map[string]*engine.Stand
	secretsErr error
	unreadable []string
	allow      map[string]bool
}

// Cycle runs one reconciliation: it decides, records the decisions, and starts the operations it
// decided on without waiting for them (Wait does). A failed fetch or inventory changes nothing.
func (r *Reconciler) Cycle(ctx context.Context) error {
	snap, err := r.src.Fetch(ctx)
	if err != nil {
		r.mu.Lock()
		r.health.Source = err
		r.mu.Unlock()
		return fmt.Errorf("fetch stands repository: %w", err)
	}
	log := r.log.With("commit", short(snap.Source))
	if err := r.loadPublished(ctx); err != nil {
		r.mu.Lock()
		r.health.Source = err
		r.mu.Unlock()
		return err
	}
	d, err := r.judge(ctx, snap)
	if err != nil {
		return err
	}
	stacks, err := r.eng.Inventory(ctx)
	r.mu.Lock()
	r.health.Source, r.health.Secrets, r.health.Backend = nil, d.secretsErr, err
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("read inventory: %w", err)
	}
	actual, refs := r.actual(stacks)
	in := diff.Input{Desired: d.desired, Actual: actual, SourceOK: len(d.unreadable) == 0, MaxDestroyShare: r.cfg.MaxDestroyShare,
		AllowDestroy: d.allow, AllowMassDestroy: r.cfg.AllowMassDestroy}
	if d.secretsErr != nil {
		in.Hold = ReasonVaultUnavailable
		log.Warn("secret store unavailable: nothing is applied or destroyed this cycle", "err", d.secretsErr)
	}
	plan := diff.Plan(in)

	r.mu.Lock()
	r.unreadable = d.unreadable
	ops := r.decide(plan, d, refs, snap.Source)
	r.health.Cycles++
	r.mu.Unlock()

	counts := map[diff.Kind]int{}
	for _, a := range plan {
		counts[a.Kind]++
	}
	log.Info("cycle planned", "create", counts[diff.Create], "update", counts[diff.Update], "destroy", counts[diff.Destroy],
		"noop", counts[diff.Noop], "blocked", counts[diff.Blocked], "operations", len(ops))
	r.publish(ctx)
	for _, o := range ops {
		r.ops.Add(1)
		go r.run(o)
	}
	r.previews(ctx, d.ev, actual)
	return nil
}

// loadPublished starts, once, from the status files the repository already has, so a restart
// neither rewrites them nor forgets a stand's phase.
func (r *Reconciler) loadPublished(ctx context.Context) error {
	r.mu.Lock()
	loaded := r.loaded
	r.mu.Unlock()
	if loaded {
		return nil
	}
	files, err := r.src.StatusFiles(ctx)
	if err != nil {
		return fmt.Errorf("read published status: %w", err)
	}
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range loadStatuses(files) {
		if st := r.state(id); st.status == nil {
			st.status = s
		}
		r.published[statusPath(id)] = s.encode()
	}
	if data, err := fs.ReadFile(files, gitsource.StatusFile); err == nil {
		r.published[gitsource.StatusFile] = data
	}
	r.loaded = true
	return nil
}

// vaultMessage is the status message of a stand waiting for Vault.
const vaultMessage = "the secrets cannot be resolved: vault is unavailable; nothing is applied or destroyed until it answers"

// verdict is one stand of a snapshot as preflight judged it. Exactly one of problem and input is set.
type verdict struct {
	id, file string
	reason   string // of the problem: InvalidManifest, VaultUnavailable, OtherOwner
	problem  string // why it cannot go on; scrubbed of secret values
	input    *engine.Stand
}

// evaluation is what a snapshot declares, judged stand by stand. It does not touch the reconciler's
// state, so pull request previews use it too.
type evaluation struct {
	verdicts   []verdict
	secretsErr error
	unreadable []string
	allow      map[string]bool
}

func (r *Reconciler) evaluate(ctx context.Context, files fs.FS) (*evaluation, error) {
	paths, err := manifest.Discover(files)
	if err != nil {
		return nil, fmt.Errorf("list stands: %w", err)
	}
	results, err := manifest.PreflightAll(ctx, files, paths, manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: r.cfg.Owner}, Secrets: r.sec, KeepGoing: true})
	var rep *manifest.Report
	if err != nil && !errors.As(err, &rep) {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	ev := &evaluation{allow: allowDestroy(files)}
	for _, res := range results {
		s := res.Stand
		if s == nil || s.ID == "" || s.Project == "" || s.Env == "" || s.Owner == "" {
			msg := res.File + ": the stand's id cannot be read"
			if res.Err != nil {
				msg = res.Err.Error()
			}
			ev.unreadable = append(ev.unreadable, msg)
			continue
		}
		v := verdict{id: s.ID, file: res.File}
		switch {
		case res.Err != nil:
			v.reason, v.problem = ReasonInvalid, res.Err.Error()
		case res.SourceErr != nil:
			// The message stays the same through an outage (an error's text may carry a port that
			// changes each time) so it is committed once; the error itself goes to the log.
			ev.secretsErr = res.SourceErr
			v.reason, v.problem = ReasonVaultUnavailable, vaultMessage
		case s.Owner != r.cfg.Owner:
			v.reason, v.problem = ReasonOtherOwner, fmt.Sprintf("stand.owner is %q; this reconciler manages owner %q", s.Owner, r.cfg.Owner)
		default:
			hash, err := manifest.SpecHash(files, s, res.Secrets, r.cfg.Passphrase)
			if err != nil {
				v.reason, v.problem = ReasonInvalid, res.Secrets.Scrub(err.Error())
			} else {
				v.input = &engine.Stand{FS: files, Stand: s, Secrets: res.Secrets, SpecHash: hash}
			}
		}
		ev.verdicts = append(ev.verdicts, v)
	}
	return ev, nil
}

// desired is the diff's view of the evaluation; skip marks stands to hold as they are (running).
func (ev *evaluation) desired(skip func(id string) bool) []diff.Desired {
	var out []diff.Desired
	for _, v := range ev.verdicts {
		if v.input == nil || skip(v.id) {
			out = append(out, diff.Desired{ID: v.id, Invalid: true})
			continue
		}
		s := v.input.Stand
		out = append(out, diff.Desired{ID: v.id, SpecHash: v.input.SpecHash, Suspend: s.Suspend, Protect: s.Protect})
	}
	return out
}

// judge evaluates the snapshot and records the status of the stands that cannot go on.
func (r *Reconciler) judge(ctx context.Context, snap *gitsource.Snapshot) (*desiredState, error) {
	ev, err := r.evaluate(ctx, snap.Files)
	if err != nil {
		return nil, err
	}
	d := &desiredState{ev: ev, inputs: map[string]*engine.Stand{}, allow: ev.allow, secretsErr: ev.secretsErr, unreadable: ev.unreadable}
	r.mu.Lock()
	defer r.mu.Unlock()
	d.desired = ev.desired(func(id string) bool { return r.state(id).running })
	r.declaredIDs = map[string]bool{}
	for _, v := range ev.verdicts {
		r.declaredIDs[v.id] = true
	}
	for _, v := range ev.verdicts {
		st := r.state(v.id)
		if st.running {
			continue
		}
		if v.input != nil {
			d.inputs[v.id] = v.input
			if st.status != nil {
				st.status.File = v.file // a moved stand.yml
			}
			continue
		}
		if v.reason == ReasonVaultUnavailable && st.status != nil && st.status.Phase == Stalled {
			continue // stays Stalled: whether its input changed is unknown until Vault answers
		}
		phase := map[string]Phase{ReasonInvalid: Failed, ReasonVaultUnavailable: Progressing, ReasonOtherOwner: Blocked}[v.reason]
		r.setStatus(st, v.id, func(x *Status) {
			x.Phase, x.Reason, x.Message, x.File, x.NextAttempt = phase, v.reason, v.problem, v.file, nil
			if v.reason == ReasonInvalid {
				x.LastAttemptedCommit = snap.Source
			}
		})
	}
	return d, nil
}

// actual turns the inventory into the diff's view, keyed by stand id.
func (r *Reconciler) actual(stacks []engine.StackInfo) ([]diff.Actual, map[string]engine.StackRef) {
	var out []diff.Actual
	refs := map[string]engine.StackRef{}
	for _, s := range stacks {
		id := s.StandID
		if id == "" {
			id = r.cfg.Owner + "_" + s.Project + "_" + s.Env
		}
		out = append(out, diff.Actual{ID: id, Owned: s.Owned, SpecHash: s.SpecHash, Protected: s.Protect})
		refs[id] = engine.StackRef{Project: s.Project, Env: s.Env}
	}
	return out, refs
}

// decide turns the plan into statuses and operations. Called with r.mu held.
func (r *Reconciler) decide(plan []diff.Action, d *desiredState, refs map[string]engine.StackRef, commit string) []op {
	now := r.cfg.Now()
	var ops []op
	for _, a := range plan {
		st := r.state(a.ID)
		if st.running {
			continue
		}
		in := d.inputs[a.ID]
		switch a.Kind {
		case diff.Create, diff.Update:
			if st.failSpec != in.SpecHash {
				st.failures, st.waits, st.next, st.failSpec = 0, 0, time.Time{}, in.SpecHash
			}
			if d.secretsErr != nil {
				// Nothing is applied while the secret store is down: the connection record could
				// not be kept, and other stands' specs are unknown.
				if st.failures < r.cfg.StallAfter {
					r.setStatus(st, a.ID, func(x *Status) { x.Phase, x.Reason, x.Message = Progressing, ReasonVaultUnavailable, vaultMessage })
				}
				continue
			}
			if st.failures >= r.cfg.StallAfter {
				continue // Stalled until the spec changes
			}
			if now.Before(st.next) {
				continue
			}
			ops = append(ops, op{kind: opApply, id: a.ID, in: in, commit: commit})
		case diff.Destroy:
			if st.failSpec != "destroy" {
				st.failures, st.waits, st.next, st.failSpec = 0, 0, time.Time{}, "destroy"
			}
			if st.failures >= r.cfg.StallAfter || now.Before(st.next) {
				continue
			}
			ops = append(ops, op{kind: opDestroy, id: a.ID, ref: refs[a.ID], commit: commit})
		case diff.Noop:
			switch a.Reason {
			case diff.ReasonSuspended:
				r.setStatus(st, a.ID, func(x *Status) {
					x.Phase, x.Reason, x.Message = Suspended, diff.ReasonSuspended, "stand.suspend is true: no apply, no destroy, no drift check"
				})
			case diff.ReasonUpToDate:
				s := st.status
				if st.failSpec != in.SpecHash {
					st.failures, st.waits, st.next, st.failSpec = 0, 0, time.Time{}, in.SpecHash
				}
				if st.failures >= r.cfg.StallAfter || now.Before(st.next) {
					continue
				}
				switch {
				case s == nil || s.SpecHash != in.SpecHash || (s.Phase != Ready && s.Phase != Drifted):
					ops = append(ops, op{kind: opObserve, id: a.ID, in: in, commit: commit})
				case st.connSaved == "":
					ops = append(ops, op{kind: opObserve, id: a.ID, in: in, commit: commit})
				case r.cfg.DriftInterval > 0 && st.lastDrift.IsZero():
					st.lastDrift = now
				case r.cfg.DriftInterval > 0 && now.Sub(st.lastDrift) >= r.cfg.DriftInterval:
					st.lastDrift = now
					ops = append(ops, op{kind: opDrift, id: a.ID, in: in, commit: commit})
				}
			}
		case diff.Blocked:
			if a.Reason == diff.ReasonInvalid {
				continue // its status says why already
			}
			reason, _, _ := strings.Cut(a.Reason, ":")
			msg := a.Reason
			switch reason {
			case diff.ReasonSourceUnavailable:
				msg = "a stand.yml of the repository cannot be read, so no stand is destroyed: " + strings.Join(d.unreadable, "; ")
			case diff.ReasonProtected:
				msg = "stand.protect was true at its last apply: remove it from the repository only after an apply with protect: false"
			case diff.ReasonForeign:
				msg = "a stack with this stand's name exists but was not made by stands-reconciler; it is never changed or replaced"
			case ReasonVaultUnavailable:
				msg = "removed from the repository; not destroyed while the secret store is unavailable"
			}
			r.setStatus(st, a.ID, func(x *Status) { x.Phase, x.Reason, x.Message, x.NextAttempt = Blocked, reason, msg, nil })
		}
	}
	// A stand that left the repository without ever having a stack (e.g. it never validated) has
	// nothing to destroy: its status says so instead of keeping its last failure forever.
	if len(d.unreadable) == 0 {
		planned := map[string]bool{}
		for _, a := range plan {
			planned[a.ID] = true
		}
		for id, st := range r.stands {
			if !planned[id] && !st.running && st.status != nil && st.status.Phase != Destroyed {
				r.setStatus(st, id, func(x *Status) {
					x.Phase, x.Reason, x.Message, x.NextAttempt = Destroyed, ReasonRemoved, "removed from the repository; it had no stack", nil
					x.Nodes, x.Connection, x.Failures = nil, nil, 0
				})
			}
		}
	}
	for _, o := range ops {
		st := r.stands[o.id]
		st.running = true
		if o.kind == opApply || o.kind == opDestroy {
			r.setStatus(st, o.id, func(x *Status) {
				x.Phase, x.Reason, x.Message, x.LastAttemptedCommit = Progressing, string(o.kind), "", commit
				if o.in != nil {
					x.SpecHash, x.File = o.in.SpecHash, o.in.Stand.Path
				}
			})
		}
	}
	return ops
}

// setStatus edits a stand's status in place (creating it), the one way statuses change.
func (r *Reconciler) setStatus(st *stand, id string, edit func(*Status)) {
	if st.status == nil {
		st.status = &Status{SchemaVersion: SchemaVersion, ID: id}
	}
	edit(st.status)
}

// run executes one operation in the worker pool and records its outcome.
func (r *Reconciler) run(o op) {
	defer r.ops.Done()
	select {
	case r.sem <- struct{}{}:
	case <-r.opsCtx.Done():
		r.finish(o, nil, r.opsCtx.Err(), r.cfg.Now())
		return
	}
	ctx := r.opsCtx
	log := r.log.With("stand", o.id, "operation", o.kind)
	if o.kind == opDestroy && r.declared(o.id) {
		// Put back in the repository while the destroy waited for a worker: it is not destroyed.
		<-r.sem
		log.Info("destroy skipped: the stand is in the repository again")
		r.mu.Lock()
		r.state(o.id).running = false
		r.mu.Unlock()
		return
	}
	started := r.cfg.Now()
	changing := o.kind == opApply || o.kind == opDestroy
	if changing {
		r.setCommitStatus(ctx, o.commit, "stands/"+o.id, gitsource.StatePending, string(o.kind)+" running", r.statusURL(o.id))
	}
	var res *engine.Result
	var err error
	switch o.kind {
	case opApply, opObserve:
		res, err = r.eng.Apply(ctx, *o.in, false)
	case opDrift:
		res, err = r.eng.Drift(ctx, *o.in)
		if err == nil && res.Changed && r.cfg.DriftApply {
			log.Info("stand drifted; applying it again", "changes", res.Changes)
			res, err = r.eng.Apply(ctx, *o.in, true)
			o.kind = opApply
		}
	case opDestroy:
		res, err = r.eng.Destroy(ctx, o.ref)
	}
	if err == nil && res != nil && res.Connection != nil {
		r.saveConnection(ctx, o.id, json.RawMessage(res.Connection), log)
	}
	if err != nil {
		c := engine.Classify(err)
		log.Warn("operation failed", "reason", c.Reason, "kind", c.Kind, "err", r.scrub(o, err.Error()))
	}
	r.finish(o, res, err, started)
	<-r.sem                            // the commits below must not hold a worker: Gitea may be slow
	if changing || o.kind == opApply { // a drift repaired by an apply counts too
		st := r.Status(o.id)
		state := gitsource.StateSuccess
		if err != nil {
			state = gitsource.StateFailure
		}
		r.setCommitStatus(ctx, o.commit, "stands/"+o.id, state, string(st.Phase)+": "+cmp.Or(st.Message, st.Reason), r.statusURL(o.id))
	}
	r.publish(ctx)
}

func (r *Reconciler) statusURL(id string) string {
	if r.cfg.Forge == nil {
		return ""
	}
	return r.cfg.Forge.FileURL(r.cfg.StatusBranch, statusPath(id))
}

// declared reports whether the last evaluated snapshot declares the stand.
func (r *Reconciler) declared(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.declaredIDs[id]
}

// saveConnection writes the unmasked record to the secret store when it changed.
func (r *Reconciler) saveConnection(ctx context.Context, id string, record json.RawMessage, log *slog.Logger) {
	sum := sha256.Sum256(record)
	digest := hex.EncodeToString(sum[:])
	r.mu.Lock()
	saved := r.state(id).connSaved
	r.mu.Unlock()
	if saved == digest {
		return
	}
	if err := r.sec.WriteConnection(ctx, id, record); err != nil {
		r.mu.Lock()
		st := r.state(id)
		st.waits++
		st.next = r.cfg.Now().Add(r.backoff(st.waits))
		r.mu.Unlock()
		log.Warn("connection record not stored; retrying later", "err", err, "next_attempt", st.next)
		return
	}
	r.mu.Lock()
	r.state(id).connSaved = digest
	r.mu.Unlock()
}

func (r *Reconciler) scrub(o op, s string) string {
	if o.in != nil {
		return o.in.Secrets.Scrub(s)
	}
	return s
}

// maxMessage bounds a status message: Pulumi's errors carry the whole CLI output.
const maxMessage = 2000

// finish records an operation's outcome.
func (r *Reconciler) finish(o op, res *engine.Result, err error, started time.Time) {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(o.id)
	st.running = false
	if err == nil {
		st.failures, st.waits, st.next = 0, 0, time.Time{}
	}
	r.setStatus(st, o.id, func(x *Status) {
		timings := &Timings{Operation: string(o.kind), Started: started.UTC(), Finished: now.UTC(), Seconds: now.Sub(started).Round(time.Millisecond).Seconds()}
		if err != nil {
			c := engine.Classify(err)
			msg := r.scrub(o, err.Error())
			if len(msg) > maxMessage {
				msg = msg[:maxMessage] + "…"
			}
			x.Phase, x.Reason, x.Message, x.LastAttemptedCommit, x.Timings = Failed, string(c.Reason), msg, o.commit, timings
			if c.Kind == engine.Waiting {
				st.waits++
				st.next = now.Add(r.backoff(st.waits))
			} else {
				st.failures++
				st.next = now.Add(r.backoff(st.failures))
				x.Failures = st.failures
			}
			next := st.next.UTC()
			x.NextAttempt = &next
			if st.failures >= r.cfg.StallAfter {
				x.Phase, x.NextAttempt = Stalled, nil
				x.Message = fmt.Sprintf("%d attempts failed on this spec; no retry until the stand's input changes. Last error (%s): %s",
					st.failures, c.Reason, msg)
			}
			return
		}
		x.Failures, x.NextAttempt = 0, nil
		switch o.kind {
		case opDestroy:
			x.Phase, x.Reason, x.Message = Destroyed, ReasonRemoved, summary(res.Changes, "deleted")
			x.LastSuccessfulCommit, x.Timings, x.Changes, x.Nodes, x.Connection, x.SpecHash = o.commit, timings, res.Changes, nil, nil, ""
			return
		case opDrift:
			if res.Changed {
				x.Phase, x.Reason, x.Message = Drifted, ReasonDrift, "the servers differ from the last apply: "+summary(res.Changes, "")
			} else if x.Phase == Drifted {
				x.Phase, x.Reason, x.Message = Ready, ReasonUpToDate, ""
			}
			return
		case opApply:
			x.Reason, x.Message, x.Timings, x.Changes = ReasonApplied, summary(res.Changes, ""), timings, res.Changes
			st.lastDrift = now
		case opObserve:
			if x.Phase != Ready {
				x.Reason, x.Message = ReasonUpToDate, ""
			}
		}
		x.Phase, x.SpecHash, x.LastSuccessfulCommit, x.File = Ready, res.SpecHash, o.commit, o.in.Stand.Path
		if x.LastAttemptedCommit == "" {
			x.LastAttemptedCommit = o.commit
		}
		x.NodesMode, x.Nodes, x.Connection = res.NodesMode, res.Nodes, res.Masked
	})
}

// backoff is capped exponential with ±20% jitter.
func (r *Reconciler) backoff(n int) time.Duration {
	d := r.cfg.BackoffBase << min(n-1, 20)
	if d <= 0 || d > r.cfg.BackoffMax {
		d = r.cfg.BackoffMax
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// summary says what Pulumi did, from its step counts, in a fixed order.
func summary(changes map[string]int, fallback string) string {
	var parts []string
	for _, k := range []string{"create", "update", "replace", "delete", "same"} {
		if n := changes[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(parts) == 0 {
		return fallback
	}
	return strings.Join(parts, ", ")
}

// publish commits the statuses that changed since the last commit, with STATUS.md. A failure is
// logged and retried at the next change or cycle: nothing is lost, the statuses stay in memory.
func (r *Reconciler) publish(ctx context.Context) {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	r.mu.Lock()
	all := map[string]*Status{}
	files := map[string][]byte{}
	phases := map[string]Phase{}
	for id, st := range r.stands {
		if st.status != nil {
			all[id] = st.status
			phases[id] = st.status.Phase
			files[statusPath(id)] = st.status.encode()
		}
	}
	files[gitsource.StatusFile] = statusTable(all, r.unreadable)
	r.mu.Unlock()
	changed := map[string][]byte{}
	var what []string
	for p, data := range files {
		if string(r.published[p]) != string(data) {
			changed[p] = data
			if id, ok := strings.CutSuffix(strings.TrimPrefix(p, gitsource.StatusDir+"/"), ".json"); ok {
				what = append(what, id+" "+string(phases[id]))
			}
		}
	}
	if len(changed) == 0 {
		return
	}
	sort.Strings(what)
	msg := "status: " + strings.Join(what, ", ")
	if len(what) == 0 {
		msg = "status: summary"
	}
	commit, err := r.src.Publish(ctx, changed, msg)
	if err != nil {
		r.log.Warn("status not committed; retrying at the next change", "err", err)
		return
	}
	for p, data := range changed {
		r.published[p] = data
	}
	if commit != "" {
		r.log.Info("status committed", "commit", short(commit), "stands", what)
	}
}

// allowDestroy reads the committed override: one stand id per line, # comments.
func allowDestroy(files fs.FS) map[string]bool {
	out := map[string]bool{}
	f, err := files.Open(AllowDestroyFile)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if id := strings.TrimSpace(line); id != "" {
			out[id] = true
		}
	}
	return out
}
