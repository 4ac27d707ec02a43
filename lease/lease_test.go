package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

func stores(t *testing.T, db *sql.DB, ttl, grace time.Duration, ids ...string) []*Store {
	t.Helper()
	var out []*Store
	for _, id := range ids {
		s, err := New(context.Background(), db, id, WithTTL(ttl), WithGrace(grace))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestOneHolder: of many replicas racing for one lease (each from its own pool, as separate
// processes are), exactly one holds it; the others are told who; a renewal keeps the token.
func TestOneHolder(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	// New on separate pools at once: the tables are created once, without a catalogue error.
	ss := make([]*Store, 6)
	var wg sync.WaitGroup
	errs := make([]error, len(ss))
	for i := range ss {
		wg.Go(func() {
			ss[i], errs[i] = New(ctx, pg.DB(t), fmt.Sprintf("r%d", i))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent New: %v", err)
	}
	won := make([]bool, len(ss))
	holders := make([]string, len(ss))
	tokens := make([]int64, len(ss))
	for i, s := range ss {
		wg.Go(func() {
			l, ok, holder, err := s.Acquire(ctx, "demo/a")
			won[i], holders[i], tokens[i], errs[i] = ok, holder, l.Token, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	winner := -1
	for i, ok := range won {
		if ok {
			if winner >= 0 {
				t.Fatalf("both r%d and r%d hold the lease", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("nobody holds the lease")
	}
	for i, h := range holders {
		if h != ss[winner].ID() {
			t.Errorf("r%d was told the holder is %q, not %s", i, h, ss[winner].ID())
		}
	}
	again, ok, _, err := ss[winner].Acquire(ctx, "demo/a")
	if err != nil || !ok || again.Token != tokens[winner] {
		t.Errorf("the holder's second acquire: %+v %v %v (token was %d)", again, ok, err, tokens[winner])
	}
	renewed, err := ss[winner].Renew(ctx)
	if err != nil || renewed["demo/a"].Token != tokens[winner] || len(renewed) != 1 {
		t.Errorf("renew: %+v %v", renewed, err)
	}
	if cur, err := ss[winner].Current(ctx, "demo/a", tokens[winner]); err != nil || !cur {
		t.Errorf("the holder's token is not current: %v %v", cur, err)
	}
}

// TestTakeoverWaitsForExpiryAndGrace: a holder that stops renewing keeps its lease for the TTL and
// nobody takes it for the grace after; then another does, with a larger token, and the old token is
// refused: the holder's renewal no longer returns it, Current says no, a fenced write changes nothing.
func TestTakeoverWaitsForExpiryAndGrace(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	ttl, grace := 2*time.Second, 2*time.Second
	ss := stores(t, pg.DB(t), ttl, grace, "a", "b")
	a, b := ss[0], ss[1]
	la, ok, _, err := a.Acquire(ctx, "demo/x")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if time.Until(la.Deadline) > ttl || time.Until(la.Deadline) < ttl-time.Second {
		t.Errorf("deadline %v from now, want about %v", time.Until(la.Deadline), ttl)
	}
	start := time.Now()
	var lb stands.Lease
	for {
		l, ok, holder, err := b.Acquire(ctx, "demo/x")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			lb = l
			break
		}
		if holder != "a" {
			t.Fatalf("held by %q", holder)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waited := time.Since(start)
	if waited < ttl+grace-500*time.Millisecond {
		t.Errorf("taken over after %v, before the TTL %v and grace %v", waited, ttl, grace)
	}
	t.Logf("taken over %v after the last renewal (TTL %v + grace %v)", waited.Round(10*time.Millisecond), ttl, grace)
	if lb.Token <= la.Token || lb.Took != "a" {
		t.Errorf("takeover lease %+v after %+v", lb, la)
	}
	held, err := a.Renew(ctx)
	if err != nil || len(held) != 0 {
		t.Errorf("the old holder still renews %+v (%v)", held, err)
	}
	if cur, _ := a.Current(ctx, "demo/x", la.Token); cur {
		t.Error("the old token is current")
	}
	if err := a.Release(ctx, la); !errors.Is(err, stands.ErrLeaseLost) {
		t.Errorf("the old holder released the new one's lease: %v", err)
	}
	// A write fenced by the token: the old holder's changes nothing, the new holder's lands.
	db := pg.DB(t)
	if _, err := db.Exec(`CREATE TABLE fenced (name TEXT PRIMARY KEY, token BIGINT)`); err != nil {
		t.Fatal(err)
	}
	write := func(l stands.Lease) int64 {
		res, err := db.Exec(`INSERT INTO fenced (name, token) SELECT $1, $2 FROM stands_leases WHERE `+CurrentSQL("$1", "$2")+`
			ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token`, l.Name, l.Token)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := res.RowsAffected()
		return n
	}
	if n := write(la); n != 0 {
		t.Error("a write with the stale token landed")
	}
	if n := write(lb); n != 1 {
		t.Error("the holder's write was refused")
	}
}

// TestReleaseFreesAtOnce: a released lease needs no grace, and its old token is dead.
func TestReleaseFreesAtOnce(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	ss := stores(t, pg.DB(t), time.Minute, time.Minute, "a", "b")
	la, _, _, err := ss[0].Acquire(ctx, "demo/y")
	if err != nil {
		t.Fatal(err)
	}
	if err := ss[0].Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb, ok, _, err := ss[1].Acquire(ctx, "demo/y")
	if err != nil || !ok || lb.Token <= la.Token || lb.Took != "" {
		t.Fatalf("acquire after release: %+v %v %v", lb, ok, err)
	}
	if h, tok, _ := ss[0].Holder(ctx, "demo/y"); h != "b" || tok != lb.Token {
		t.Errorf("holder %q %d", h, tok)
	}
}

// TestLiveReplicas: a replica is live while its heartbeat lasts; one that leaves is gone at once.
func TestLiveReplicas(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	ss := stores(t, pg.DB(t), time.Second, time.Second, "a", "b", "c")
	for _, s := range ss {
		if err := s.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := ss[2].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if live, err := ss[0].Live(ctx); err != nil || fmt.Sprint(live) != "[a b]" {
		t.Errorf("live %v %v", live, err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := ss[0].Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if live, err := ss[0].Live(ctx); err != nil || fmt.Sprint(live) != "[a]" {
		t.Errorf("live after b's heartbeat expired: %v %v", live, err)
	}
}

// TestDatabaseDown: with PostgreSQL stopped a renewal fails and deadlines stand (the holder must
// stop by them); once it is back within the TTL the lease is renewed with its token.
func TestDatabaseDown(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	s := stores(t, pg.DB(t), 20*time.Second, 5*time.Second, "a")[0]
	l, _, _, err := s.Acquire(ctx, "demo/z")
	if err != nil {
		t.Fatal(err)
	}
	pg.Stop(t)
	if _, err := s.Renew(ctx); err == nil {
		t.Fatal("renewed with the database down")
	}
	pg.Start(t)
	held, err := s.Renew(ctx)
	if err != nil || held["demo/z"].Token != l.Token || !held["demo/z"].Deadline.After(l.Deadline) {
		t.Errorf("renew after the restart: %+v %v", held, err)
	}
}

// TestOwnerSpreads: names spread over the replicas, every replica computes the same owner, and a
// replica leaving moves only its own names.
func TestOwnerSpreads(t *testing.T) {
	three := []string{"r0", "r1", "r2"}
	count := map[string]int{}
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("demo/stand-%d", i)
		count[Owner(names[i], three)]++
	}
	for _, r := range three {
		if count[r] < 70 {
			t.Errorf("%s owns %d of 300: %v", r, count[r], count)
		}
	}
	two := []string{"r0", "r2"}
	for _, n := range names {
		before, after := Owner(n, three), Owner(n, two)
		if before != "r1" && before != after {
			t.Errorf("%s moved from %s to %s when r1 left", n, before, after)
		}
	}
	if Owner("x", nil) != "" {
		t.Error("an owner among no replicas")
	}
}

// TestRecordsAreFenced: a record lands only under the live lease; after a takeover the old holder's
// write is refused and leaves the new holder's record as it was, even written later.
func TestRecordsAreFenced(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	ss := stores(t, pg.DB(t), time.Second, 500*time.Millisecond, "a", "b")
	a, b := ss[0], ss[1]
	la, _, _, err := a.Acquire(ctx, "demo/s")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, la, []byte("a: applying")); err != nil {
		t.Fatal(err)
	}
	var lb stands.Lease
	waitFor(t, 10*time.Second, "b to take the lease over", func() bool {
		l, ok, _, err := b.Acquire(ctx, "demo/s")
		lb = l
		return err == nil && ok
	})
	if err := b.Put(ctx, lb, []byte("b: ready")); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, la, []byte("a: failed")); !errors.Is(err, stands.ErrLeaseLost) {
		t.Errorf("the old holder's late write: %v", err)
	}
	if err := a.DeleteRecord(ctx, la); !errors.Is(err, stands.ErrLeaseLost) {
		t.Errorf("the old holder's delete: %v", err)
	}
	recs, err := a.Records(ctx, nil)
	if err != nil || string(recs["demo/s"].Body) != "b: ready" || recs["demo/s"].Token != lb.Token || recs["demo/s"].Holder != "b" {
		t.Errorf("records %+v %v", recs, err)
	}
	// Two writes landed: a reader that saw the first tells the record changed from its version alone.
	if v, err := a.Versions(ctx); err != nil || v["demo/s"] != 2 || recs["demo/s"].Version != 2 {
		t.Errorf("versions %v %v, record version %d: want 2 after two writes", v, err, recs["demo/s"].Version)
	}
	if one, err := a.Records(ctx, []string{"demo/s", "demo/none"}); err != nil || len(one) != 1 {
		t.Errorf("records by name: %+v %v", one, err)
	}
	// A never-held lease cannot be written with a made-up token either.
	if err := a.Put(ctx, stands.Lease{Name: "demo/other", Token: lb.Token + 100}, []byte("x")); !errors.Is(err, stands.ErrLeaseLost) {
		t.Errorf("a write without a lease: %v", err)
	}
	if err := b.DeleteRecord(ctx, lb); err != nil {
		t.Fatal(err)
	}
	if recs, _ := a.Records(ctx, nil); len(recs) != 0 {
		t.Errorf("records after the delete: %+v", recs)
	}
}

// TestRestartedReplicaWaits: a replica started again under its name is listed once and gets the
// same stands by rendezvous, but its new life does not take its old life's live lease as its own
// (a stack lock may still carry that token): it waits for the expiry and the grace, and gets a new
// token.
func TestRestartedReplicaWaits(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	var lives []*Store
	for _, id := range []string{"r.old", "r.new"} {
		s, err := New(ctx, pg.DB(t), id, WithName("r"), WithTTL(time.Second), WithGrace(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		lives = append(lives, s)
	}
	old, now := lives[0], lives[1]
	if live, err := now.Live(ctx); err != nil || len(live) != 1 || live[0] != "r" {
		t.Errorf("live %v %v, want [r]", live, err)
	}
	was, ok, _, err := old.Acquire(ctx, "demo/x")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, ok, holder, err := now.Acquire(ctx, "demo/x"); err != nil || ok || holder != "r.old" {
		t.Fatalf("the new life took its old life's live lease: ok %v holder %q err %v", ok, holder, err)
	}
	start := time.Now()
	var got stands.Lease
	waitFor(t, 10*time.Second, "the new life to take the lease", func() bool {
		l, ok, _, err := now.Acquire(ctx, "demo/x")
		got = l
		return err == nil && ok
	})
	if waited := time.Since(start); waited < time.Second || got.Token <= was.Token || got.Took != "r.old" {
		t.Errorf("taken after %s with token %d (was %d) from %q", waited, got.Token, was.Token, got.Took)
	}
}
