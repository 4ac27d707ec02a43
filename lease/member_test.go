package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

const (
	testTTL    = 2 * time.Second
	testGrace  = 2 * time.Second
	testBudget = 500 * time.Millisecond
)

type group struct {
	members []*Member
	cancel  []context.CancelFunc
	done    []chan struct{}
}

// startGroup runs n members, each on its own pool as separate processes would be, until the test ends.
func startGroup(t *testing.T, pg *testenv.Postgres, n int) *group {
	t.Helper()
	g := &group{}
	for i := range n {
		s, err := New(context.Background(), pg.DB(t), fmt.Sprintf("r%d", i), WithTTL(testTTL), WithGrace(testGrace))
		if err != nil {
			t.Fatal(err)
		}
		m := NewMember(s, WithStopBudget(testBudget), WithLogger(testenv.Logger(t)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); m.run(ctx, true) }()
		g.members, g.cancel, g.done = append(g.members, m), append(g.cancel, cancel), append(g.done, done)
	}
	t.Cleanup(func() {
		for i := range g.members {
			g.cancel[i]()
			<-g.done[i]
		}
	})
	waitFor(t, 10*time.Second, "every member to see the others", func() bool {
		for _, m := range g.members {
			m.mu.Lock()
			k := len(m.live)
			m.mu.Unlock()
			if k != n {
				return false
			}
		}
		return true
	})
	return g
}

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	return wait.For(t, what, within, ok, wait.Every(50*time.Millisecond))
}

// claim has every member acquire the names it owns; it returns who holds what.
func (g *group) claim(t *testing.T, names []string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, m := range g.members {
		for _, n := range names {
			if m.Owner(n) != m.Name() {
				continue
			}
			if _, _, ok, _, err := m.Acquire(context.Background(), n); err == nil && ok {
				got[n] = m.ID()
			}
		}
	}
	return got
}

func names(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("demo/stand-%02d", i))
	}
	return out
}

// TestMembersSpreadAndTakeOver: 12 stands spread over 3 live replicas, each held by exactly one; a
// replica that dies without a word (no leave, no release) stops what it runs before its leases
// expire, and the two others take its stands over only after the lease time and the grace.
func TestMembersSpreadAndTakeOver(t *testing.T) {
	pg := testenv.StartPostgres(t)
	g := startGroup(t, pg, 3)
	all := names(12)
	held := g.claim(t, all)
	count := map[string]int{}
	for _, n := range all {
		count[held[n]]++
	}
	if len(held) != 12 || count["r0"] == 0 || count["r1"] == 0 || count["r2"] == 0 {
		t.Fatalf("12 stands over 3 replicas: %v", count)
	}
	// The leader's lease is taken after the live list is read, on a renewal of its own.
	waitFor(t, 2*testTTL, "a leader", func() bool { return g.members[0].Leader() || g.members[1].Leader() || g.members[2].Leader() })
	// A second claim changes nothing: every name is held, and by its owner.
	if again := g.claim(t, all); fmt.Sprint(again) != fmt.Sprint(held) {
		t.Errorf("a second claim moved stands: %v → %v", held, again)
	}
	// r1 dies: its loop ends without leaving; its stops must close before its leases expire.
	dead := g.members[1]
	var stops []<-chan struct{}
	var theirs []string
	for _, n := range all {
		if held[n] == "r1" {
			_, stop, ok, _, err := dead.Acquire(context.Background(), n) // already held: its stop
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			stops, theirs = append(stops, stop), append(theirs, n)
		}
	}
	dead.mu.Lock()
	dead.beatErr = fmt.Errorf("dead") // as good as killed: nothing new starts here
	dead.mu.Unlock()
	g.cancel[1]()
	<-g.done[1]
	died := time.Now()
	var wg sync.WaitGroup
	stoppedWhileHeld := make([]bool, len(stops))
	for i, stop := range stops {
		wg.Go(func() {
			<-stop
			h, _, err := g.members[0].s.Holder(context.Background(), theirs[i])
			stoppedWhileHeld[i] = err == nil && h == "r1"
		})
	}
	wg.Wait()
	t.Logf("r1's work stopped %v after its death", time.Since(died).Round(10*time.Millisecond))
	for i, ok := range stoppedWhileHeld {
		if !ok {
			t.Errorf("%s: r1's stop closed after its lease had expired", theirs[i])
		}
	}
	survivors := &group{members: []*Member{g.members[0], g.members[2]}}
	waitFor(t, 4*(testTTL+testGrace), "the survivors to take r1's stands", func() bool {
		return len(survivors.claim(t, theirs)) == len(theirs)
	})
	took := time.Since(died)
	if took < testTTL+testGrace-testTTL/3 {
		t.Errorf("taken over %v after the death, before the lease time and grace (%v)", took, testTTL+testGrace)
	}
	t.Logf("%d stands taken over %v after r1 died (TTL %v, grace %v)", len(theirs), took.Round(10*time.Millisecond), testTTL, testGrace)
	if n := testutil.ToFloat64(g.members[0].takeovers) + testutil.ToFloat64(g.members[2].takeovers); int(n) != len(theirs) {
		t.Errorf("%v takeovers counted, want %d", n, len(theirs))
	}
}

// TestMemberDatabaseOutage: with PostgreSQL down every held lease's stop closes by its deadline,
// nothing is acquired meanwhile and readiness fails; once it is back the members heartbeat again and
// the stands are held again, each by one replica (the recovery is measured).
func TestMemberDatabaseOutage(t *testing.T) {
	pg := testenv.StartPostgres(t)
	g := startGroup(t, pg, 2)
	all := names(6)
	held := g.claim(t, all)
	if len(held) != 6 {
		t.Fatalf("held %v", held)
	}
	var stops []<-chan struct{}
	for _, n := range all {
		for _, m := range g.members {
			if held[n] == m.ID() {
				_, stop, _, _, _ := m.Acquire(context.Background(), n)
				stops = append(stops, stop)
			}
		}
	}
	pg.Stop(t)
	down := time.Now()
	for _, stop := range stops {
		select {
		case <-stop:
		case <-time.After(testTTL + time.Second):
			t.Fatal("a lease's work was not stopped within the lease time of the outage")
		}
	}
	if time.Since(down) > testTTL {
		t.Errorf("stopped %v into the outage, after the lease time %v", time.Since(down), testTTL)
	}
	if _, _, ok, _, err := g.members[0].Acquire(context.Background(), "demo/other"); ok || err == nil {
		t.Error("acquired with the database down")
	}
	waitFor(t, 2*testTTL, "readiness to fail", func() bool { return g.members[0].Ready() != nil })
	pg.Start(t)
	up := time.Now()
	waitFor(t, 30*time.Second, "the stands to be held again", func() bool {
		return len(g.claim(t, all)) == 6
	})
	t.Logf("PostgreSQL down %v; all 6 stands held again %v after it came back", up.Sub(down).Round(10*time.Millisecond), time.Since(up).Round(10*time.Millisecond))
	// Readiness clears on each member's own next renewal, a moment after its stands are held.
	for _, m := range g.members {
		wait.NoError(t, m.ID()+" ready after the outage", 2*testTTL, m.Ready)
	}
}
