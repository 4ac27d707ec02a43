package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// The replicas' loops against real leases on a real PostgreSQL; the engine is the fake one, shared
// as the replicas share one Pulumi backend. cmd/stands-reconciler's TestReplicas runs the daemons
// themselves with the real Pulumi CLI.

const (
	replicaTTL    = 2 * time.Second
	replicaGrace  = 2 * time.Second
	replicaBudget = 500 * time.Millisecond
)

// replica is one reconciler of a group: its own pool, member, view of the source and engine.
type replica struct {
	name string
	db   *sql.DB
	m    *lease.Member
	r    *Reconciler
	src  *replicaSource
	eng  *replicaEngine
	stop context.CancelFunc
}

// replicaSource is the shared repository as one replica sees it: its status commits are counted.
type replicaSource struct {
	*fakeSource
	mu      sync.Mutex
	commits int
}

func (s *replicaSource) Publish(ctx context.Context, files map[string][]byte, msg string) (string, error) {
	s.mu.Lock()
	s.commits++
	s.mu.Unlock()
	return s.fakeSource.Publish(ctx, files, msg)
}

func (s *replicaSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

// replicaEngine is the shared engine as one replica calls it: it logs when each apply of this
// replica started and ended, and checks every apply runs under its stand's lease.
type replicaEngine struct {
	*fakeEngine
	t   *testing.T
	log *opLog
	by  string
}

type opSpan struct {
	by, id     string
	start, end time.Time
	err        error
}

type opLog struct {
	mu    sync.Mutex
	spans []opSpan
	begun map[string]string // stand → the replica whose apply of it has begun
}

// applying is the stands whose applies have begun and not ended, with who applies them.
func (l *opLog) applying() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.begun)
}

func (l *opLog) of(id string) []opSpan {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []opSpan
	for _, s := range l.spans {
		if s.id == id {
			out = append(out, s)
		}
	}
	return out
}

func (e *replicaEngine) Apply(ctx context.Context, in stands.Input, force bool) (*stands.Result, error) {
	if f, ok := stands.FenceOf(ctx); !ok || f.Token == 0 || f.Stop == nil {
		e.t.Errorf("%s applied %s outside a lease: %+v", e.by, in.Stand.ID, f)
	}
	span := opSpan{by: e.by, id: in.Stand.ID, start: time.Now()}
	e.log.mu.Lock()
	if e.log.begun == nil {
		e.log.begun = map[string]string{}
	}
	e.log.begun[span.id] = e.by
	e.log.mu.Unlock()
	res, err := e.fakeEngine.Apply(ctx, in, force)
	span.end, span.err = time.Now(), err
	e.log.mu.Lock()
	delete(e.log.begun, span.id)
	e.log.spans = append(e.log.spans, span)
	e.log.mu.Unlock()
	return res, err
}

// startReplicas runs n reconcilers on one repository, engine and PostgreSQL, each with a member
// running; it returns once every member sees all n live (the order they start in decides nothing).
func startReplicas(t *testing.T, pg *testenv.Postgres, src *fakeSource, eng *fakeEngine, names ...string) ([]*replica, *opLog) {
	t.Helper()
	log := &opLog{}
	var out []*replica
	for _, name := range names {
		out = append(out, startReplica(t, pg, src, eng, log, name, 4))
	}
	waitLive(t, out...)
	return out, log
}

// startReplica runs one reconciler of the group, with workers workers.
func startReplica(t *testing.T, pg *testenv.Postgres, src *fakeSource, eng *fakeEngine, log *opLog, name string, workers int, tune ...func(*Config)) *replica {
	t.Helper()
	db := pg.DB(t)
	s, err := lease.New(context.Background(), db, name, lease.WithTTL(replicaTTL), lease.WithGrace(replicaGrace))
	if err != nil {
		t.Fatal(err)
	}
	m := lease.NewMember(s, lease.WithStopBudget(replicaBudget), lease.WithLogger(testenv.Logger(t).With("replica", name)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	rp := &replica{name: name, db: db, m: m, src: &replicaSource{fakeSource: src}, eng: &replicaEngine{fakeEngine: eng, t: t, log: log, by: name}}
	rp.stop = func() { cancel(); <-done }
	cfg := Config{Owner: "local", Passphrase: "pass", BackoffBase: time.Second, Replicas: m, Workers: workers,
		Log: testenv.Logger(t).With("replica", name)}
	for _, f := range tune {
		f(&cfg)
	}
	rp.r = New(cfg, rp.src, rp.eng, fakes.NewSecrets())
	t.Cleanup(func() { _ = shutdownWithin(rp.r, 5*time.Second); rp.stop() })
	return rp
}

// cutOff closes the replica's database, so it can no longer renew anything, and returns its lease
// name as it stands once a renewal that was on its way has landed.
func (rp *replica) cutOff(t *testing.T, name string) stands.Lease {
	t.Helper()
	rp.db.Close()
	// Rounds run one after another: once one has failed, a renewal that was on its way has landed.
	wait.For(t, rp.name+"'s renewals to fail", 15*time.Second, func() bool { return !rp.m.Renewing() }, wait.Every(10*time.Millisecond))
	held, _, ok := rp.m.Held(name)
	if !ok {
		t.Fatalf("%s lost the lease %s at once", rp.name, name)
	}
	return held
}

// waitLive waits until every replica given sees them all live.
func waitLive(t *testing.T, rs ...*replica) {
	t.Helper()
	wait.For(t, "every replica to see the others", 15*time.Second, func() bool {
		for _, rp := range rs {
			if len(rp.m.Live()) != len(rs) {
				return false
			}
		}
		return true
	}, wait.Every(50*time.Millisecond))
}

// standOf is the first stand (its id and folder: prefix0, prefix1, …) that is owner's by rendezvous
// among live.
func standOf(owner, prefix string, live ...string) (id, file string) {
	for i := 0; ; i++ {
		file = fmt.Sprintf("%s%d", prefix, i)
		if id = "local_" + file + "_dev"; lease.Owner(id, live) == owner {
			return id, file
		}
	}
}

// standNames are n stands' folder names (prefix00, prefix01, …) and their ids.
func standNames(prefix string, n int) (files, ids []string) {
	for i := range n {
		files = append(files, fmt.Sprintf("%s%02d", prefix, i))
		ids = append(ids, "local_"+files[i]+"_dev")
	}
	return files, ids
}

// cycleAll runs a cycle on every replica given, in turn, and waits for their operations.
func cycleAll(t *testing.T, rs ...*replica) {
	t.Helper()
	for _, rp := range rs {
		if err := rp.r.Cycle(context.Background()); err != nil {
			t.Logf("%s: cycle: %v", rp.name, err)
		}
	}
	for _, rp := range rs {
		rp.r.Wait()
	}
}

// TestReplicasSplitTheStands: three replicas on twelve stands apply each stand once, each the
// stands that are its own by rendezvous (and only under its lease), and only the leader commits
// status, from the records the others wrote: every stand Ready in the status files.
func TestReplicasSplitTheStands(t *testing.T) {
	pg := testenv.StartPostgres(t)
	files, ids := standNames("s", 12)
	src, eng := newFakeSource(t, repoWith(files...)), fakes.NewEngine()
	rs, log := startReplicas(t, pg, src, eng, "r0", "r1", "r2")
	// Two rounds: the first takes the leases and applies, the second finds nothing to do; the
	// leader commits what the others wrote at its next publish.
	cycleAll(t, rs...)
	cycleAll(t, rs...)
	var leader *replica
	for _, rp := range rs {
		if rp.m.Leader() {
			leader = rp
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	wait.For(t, "the leader to commit every stand Ready", 10*time.Second, func() bool {
		_ = leader.r.publish(context.Background())
		for _, id := range ids {
			if !src.has(stands.StatusPath(id)) || src.statusOf(t, id).Phase != reason.Ready {
				return false
			}
		}
		return true
	}, wait.Every(50*time.Millisecond))
	live := []string{"r0", "r1", "r2"}
	per := map[string]int{}
	for _, id := range ids {
		spans := log.of(id)
		if len(spans) != 1 || eng.UpsOf(id) != 1 {
			t.Errorf("%s: applied %d times (%d ups): %+v", id, len(spans), eng.UpsOf(id), spans)
			continue
		}
		if want := lease.Owner(id, live); spans[0].by != want {
			t.Errorf("%s applied by %s, its rendezvous owner is %s", id, spans[0].by, want)
		}
		per[spans[0].by]++
	}
	t.Logf("stands applied per replica: %v; leader %s", per, leader.name)
	for _, rp := range rs {
		if per[rp.name] == 0 {
			t.Errorf("%s applied nothing: %v", rp.name, per)
		}
		if rp != leader && rp.src.count() != 0 {
			t.Errorf("%s is not the leader and committed status %d times", rp.name, rp.src.count())
		}
	}
	if leader.src.count() == 0 {
		t.Error("the leader committed nothing")
	}
}

// TestReplicaCutOffStopsBeforeTakeover: a replica that loses PostgreSQL mid-apply stops the apply
// before its lease can expire for the others (its operation's context ends, as the engine's fence
// kills its CLIs); the survivor takes the stand over only after the expiry and the grace, applies it
// once, becomes the leader and commits it Ready. The cut-off replica's failure never reaches the
// status files.
func TestReplicaCutOffStopsBeforeTakeover(t *testing.T) {
	pg := testenv.StartPostgres(t)
	id, file := standOf("a", "x", "a", "b")
	src, eng := newFakeSource(t, repoWith(file)), fakes.NewEngine()
	eng.Hang = map[string]bool{id: true}
	rs, log := startReplicas(t, pg, src, eng, "a", "b")
	a, b := rs[0], rs[1]
	if err := a.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a's apply to start", 10*time.Second, func() bool {
		eng.Mu.Lock()
		defer eng.Mu.Unlock()
		return eng.Running == 1
	}, wait.Every(50*time.Millisecond))
	if _, _, ok := a.m.Held(id); !ok {
		t.Fatal("a applies without holding the stand's lease")
	}
	cut := time.Now()
	held := a.cutOff(t, id)
	eng.Mu.Lock()
	eng.Hang = nil
	eng.Mu.Unlock()
	// b cycles until it has applied the stand.
	wait.For(t, "b to take the stand over and apply it", 30*time.Second, func() bool {
		cycleAll(t, b)
		for _, s := range log.of(id) {
			if s.by == "b" && s.err == nil {
				return true
			}
		}
		return false
	}, wait.Every(50*time.Millisecond))
	wait.For(t, "a's apply to end", 10*time.Second, func() bool { return len(log.of(id)) == 2 }, wait.Every(50*time.Millisecond))
	spans := log.of(id)
	if len(spans) != 2 || spans[0].by != "a" || spans[1].by != "b" {
		t.Fatalf("applies of %s: %+v", id, spans)
	}
	aEnd, bStart := spans[0].end, spans[1].start
	t.Logf("cut off at +0; a's apply ended at +%s (its lease's deadline +%s); b's apply started at +%s",
		aEnd.Sub(cut).Round(time.Millisecond), held.Deadline.Sub(cut).Round(time.Millisecond), bStart.Sub(cut).Round(time.Millisecond))
	if !aEnd.Before(held.Deadline) {
		t.Errorf("a's apply ended %s after its lease's deadline", aEnd.Sub(held.Deadline))
	}
	if !aEnd.Before(bStart) || bStart.Sub(held.Deadline) < replicaGrace-replicaBudget {
		t.Errorf("b started %s after a's deadline (grace %s), a ended %s before it", bStart.Sub(held.Deadline), replicaGrace, bStart.Sub(aEnd))
	}
	if st := a.r.Status(id); st == nil || st.Reason != reason.LeaseLost || strings.Contains(st.Message, "reconciler's stop") {
		t.Errorf("a's own view of the stand: %+v, want LeaseLost (and no stop: a is running)", st)
	}
	if eng.UpsOf(id) != 1 {
		t.Errorf("%d ups, want 1", eng.UpsOf(id))
	}
	wait.For(t, "b to lead and commit the stand Ready", 20*time.Second, func() bool {
		_ = b.r.publish(context.Background())
		return b.m.Leader() && src.has(stands.StatusPath(id)) && src.statusOf(t, id).Phase == reason.Ready
	}, wait.Every(50*time.Millisecond))
	for _, files := range src.publishedFiles() {
		if data, ok := files[stands.StatusPath(id)]; ok && slices.Contains([]string{string(reason.LeaseLost)}, string(decodeOrEmpty(id, data).Reason)) {
			t.Errorf("a status commit carried the cut-off replica's failure: %s", data)
		}
	}
}

func decodeOrEmpty(id string, data []byte) Status {
	if s, ok := decodeRecord(id, data); ok {
		return *s
	}
	return Status{}
}

func (s *fakeSource) has(path string) bool {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	_, ok := s.Files[path]
	return ok
}

func (s *fakeSource) publishedFiles() []map[string][]byte {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return slices.Clone(s.Published)
}

// TestQueuedStandsMoveToANewReplica: a replica alone takes every stand; the operations still
// waiting for its one worker when a second replica joins are left to the one each belongs to now,
// not worked through by the first: each stand applied once, the queued ones by their owners.
func TestQueuedStandsMoveToANewReplica(t *testing.T) {
	pg := testenv.StartPostgres(t)
	files, ids := standNames("q", 6)
	src, eng := newFakeSource(t, repoWith(files...)), fakes.NewEngine()
	eng.Gate = make(chan struct{})
	log := &opLog{}
	a := startReplica(t, pg, src, eng, log, "a", 1)
	waitLive(t, a)
	if err := a.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, _, ok := a.m.Held(id); !ok {
			t.Fatalf("a alone does not hold %s", id)
		}
	}
	// a's one worker is inside an apply before b joins: the others wait in a's queue. Which stand it
	// took is the scheduler's choice; if that stand is b's, it stays with a until the apply ends.
	var busy string
	wait.For(t, "a's worker to begin an apply", 10*time.Second, func() bool {
		for id := range log.applying() {
			busy = id
		}
		return busy != ""
	}, wait.Every(10*time.Millisecond))
	b := startReplica(t, pg, src, eng, log, "b", 1)
	waitLive(t, a, b)
	joined := time.Now()
	// While a's one worker is still busy, its queued operations of b's stands leave, and the stands
	// pass to b.
	var bs []string
	for _, id := range ids {
		if lease.Owner(id, []string{"a", "b"}) == "b" && id != busy {
			bs = append(bs, id)
		}
	}
	if len(bs) == 0 {
		t.Fatalf("no stand queued at a is b's by rendezvous: %v, a applies %s", ids, busy)
	}
	wait.For(t, "b to hold its stands while a's worker is busy", 20*time.Second, func() bool {
		for _, rp := range []*replica{a, b} {
			if err := rp.r.Cycle(context.Background()); err != nil {
				t.Logf("%s: %v", rp.name, err)
			}
		}
		for _, id := range bs {
			if _, _, ok := b.m.Held(id); !ok {
				return false
			}
		}
		return true
	}, wait.Every(50*time.Millisecond))
	close(eng.Gate) // a's one running apply ends
	a.r.Wait()
	wait.For(t, "every stand applied", 20*time.Second, func() bool {
		cycleAll(t, a, b)
		for _, id := range ids {
			if eng.UpsOf(id) == 0 {
				return false
			}
		}
		return true
	}, wait.Every(50*time.Millisecond))
	started, byB := 0, 0
	for _, id := range ids {
		spans := log.of(id)
		if len(spans) != 1 || eng.UpsOf(id) != 1 {
			t.Errorf("%s applied %d times: %+v", id, len(spans), spans)
			continue
		}
		if spans[0].start.Before(joined) {
			started++ // a's one worker had it before b joined: a finishes it
			continue
		}
		if spans[0].by == "b" {
			byB++
		}
		if want := lease.Owner(id, []string{"a", "b"}); spans[0].by != want {
			t.Errorf("%s, queued when b joined, applied by %s, its owner is %s", id, spans[0].by, want)
		}
	}
	if started != 1 || byB == 0 {
		t.Errorf("%d applies started before b joined (want 1), %d by b", started, byB)
	}
}

// TestHealOfACutOffReplicaStops: a heal's restart over SSH runs under the stand's lease, as an
// operation does: cut off from the database, the replica ends it before the lease's deadline,
// records no heal step for it, and makes no further check or restart of the stand.
func TestHealOfACutOffReplicaStops(t *testing.T) {
	pg := testenv.StartPostgres(t)
	id, file := standOf("a", "h", "a", "b")
	src, eng := newFakeSource(t, repoWith(file)), fakes.NewEngine()
	eng.NodesMode = "full"
	chk := newFakeChecker()
	chk.set(file, &stands.Health{Instances: []stands.InstanceHealth{{Instance: "web--front", Server: "s1", State: "failed",
		Problems: []string{"unit failed"}}}})
	chk.hang = true
	log := &opLog{}
	a := startReplica(t, pg, src, eng, log, "a", 1, func(c *Config) { c.Health.Checker, c.Health.Heal, c.Health.Settle = chk, true, time.Millisecond })
	b := startReplica(t, pg, src, eng, log, "b", 1)
	waitLive(t, a, b)
	cycleAll(t, a)
	if st := a.r.Status(id); st == nil || st.Phase != reason.Ready {
		t.Fatalf("after the apply: %+v", st)
	}
	healed := make(chan struct{})
	go func() { defer close(healed); a.r.HealthCycle(context.Background()) }()
	wait.For(t, "a's restart to begin", 10*time.Second, func() bool {
		chk.mu.Lock()
		defer chk.mu.Unlock()
		return len(chk.restarts) == 1
	}, wait.Every(10*time.Millisecond))
	held := a.cutOff(t, id)
	select {
	case <-healed:
	case <-time.After(time.Until(held.Deadline) + replicaGrace):
		t.Fatalf("a's restart still runs %s after its lease's deadline", replicaGrace)
	}
	chk.mu.Lock()
	ended, checks, restarts := chk.restartEnded, chk.checks, len(chk.restarts)
	chk.mu.Unlock()
	if !ended.Before(held.Deadline) {
		t.Errorf("a's restart ended %s after its lease's deadline", ended.Sub(held.Deadline))
	}
	if checks != 1 || restarts != 1 {
		t.Errorf("%d checks and %d restarts, want 1 each: nothing after the cut", checks, restarts)
	}
	if st := a.r.Status(id); st == nil || len(st.Healing) != 0 {
		t.Errorf("a recorded a heal step of an interrupted restart: %+v", st)
	}
}

// TestPlanOfALeaderCutOffStops: a pull request's plan runs under the leader lease: cut off from the
// database, the leader ends the plan before the lease's deadline and writes no comment or commit
// status of it, so it never edits the plan beside the next leader.
func TestPlanOfALeaderCutOffStops(t *testing.T) {
	pg := testenv.StartPostgres(t)
	src, eng, f := newFakeSource(t, repoWith("p0")), fakes.NewEngine(), fakes.NewForge()
	plans := prplan.New(prplan.Config{Branch: "main", Guards: judge.Guards{Owner: "local"}, Passphrase: "pass"}, f, eng, f, fakes.NewSecrets())
	a := startReplica(t, pg, src, eng, &opLog{}, "a", 1, func(c *Config) {
		c.Branch, c.StatusBranch, c.Forge, c.Plans = "main", "main", f, plans
	})
	wait.For(t, "a to lead", 10*time.Second, a.m.Leader, wait.Every(50*time.Millisecond))
	cycleAll(t, a)
	eng.Mu.Lock()
	gate := make(chan struct{})
	eng.PreviewGate, eng.Previewing = gate, make(chan string, 1)
	eng.Mu.Unlock()
	src.Mu.Lock()
	base := maps.Clone(src.Files)
	src.Mu.Unlock()
	f.Open(1, "head1", base, map[string]string{fakes.StandFile("p0"): fakes.StandYML("p0", "node_profiles:\n  small:\n    type_serv: cx32")}, true)
	if err := a.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-eng.Previewing:
	case <-time.After(10 * time.Second):
		t.Fatal("the plan did not start")
	}
	f.Mu.Lock()
	statuses := maps.Clone(f.Statuses)
	f.Mu.Unlock()
	held := a.cutOff(t, stands.LeaderLease)
	wait.For(t, "a's plan to end", time.Until(held.Deadline)+replicaGrace, func() bool {
		eng.Mu.Lock()
		defer eng.Mu.Unlock()
		return len(eng.PreviewsEnded) == 1
	}, wait.Every(20*time.Millisecond))
	close(gate) // a plan still running would go on to its comment now
	stopped := make(chan struct{})
	go func() { plans.Wait(); close(stopped) }()
	wait.For(t, "a's plan worker to stop", 10*time.Second, func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	}, wait.Every(20*time.Millisecond))
	eng.Mu.Lock()
	ended := eng.PreviewsEnded[0]
	eng.Mu.Unlock()
	if !ended.Before(held.Deadline) {
		t.Errorf("a's plan ended %s after its leader lease's deadline", ended.Sub(held.Deadline))
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if c := f.Comments[1]; c != "" {
		t.Errorf("a, cut off, commented its plan:\n%s", c)
	}
	if !maps.Equal(f.Statuses, statuses) {
		t.Errorf("a, cut off, set commit statuses: %v, before the cut %v", f.Statuses, statuses)
	}
}
