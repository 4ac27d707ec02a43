package lease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestDocumentLosesNoWrite: replicas that each add one to a counter document, reading and saving over
// the version read and reading again when another wrote first, end with every addition counted; a
// writer over a version read before another's write changes nothing.
func TestDocumentLosesNoWrite(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	ss := stores(t, pg.DB(t), time.Minute, time.Second, "a", "b", "c", "d")
	const each = 15
	var wg sync.WaitGroup
	errs := make([]error, len(ss))
	conflicts := make([]int, len(ss))
	for i, s := range ss {
		wg.Go(func() {
			doc := s.Document("counter")
			for range each {
				for {
					body, v, err := doc.Load(ctx, 0)
					if err != nil {
						errs[i] = err
						return
					}
					n, _ := strconv.Atoi(string(body))
					_, ok, err := doc.Save(ctx, []byte(strconv.Itoa(n+1)), v)
					if err != nil {
						errs[i] = err
						return
					}
					if ok {
						break
					}
					conflicts[i]++
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	body, v, err := ss[0].Document("counter").Load(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(each * len(ss)); string(body) != want || v != int64(each*len(ss)) {
		t.Errorf("counter %q at version %d after %s additions; conflicts seen %v", body, v, want, conflicts)
	}
	t.Logf("conflicts retried by each writer: %v", conflicts)

	// A stale writer changes nothing; a reader that knows the version reads no body.
	doc := ss[1].Document("counter")
	if next, ok, err := doc.Save(ctx, []byte("0"), v-1); err != nil || ok || next != v-1 {
		t.Errorf("a save over version %d when %d is stored: ok %v, next %d, %v", v-1, v, ok, next, err)
	}
	if _, ok, err := ss[2].Document("other").Save(ctx, []byte("x"), 0); err != nil || !ok {
		t.Fatalf("first save of a new document: %v %v", ok, err)
	}
	if _, ok, _ := ss[3].Document("other").Save(ctx, []byte("y"), 0); ok {
		t.Error("a second first save of one document landed")
	}
	if body, got, err := doc.Load(ctx, v); err != nil || body != nil || got != v {
		t.Errorf("a load at the known version %d: %q, version %d, %v", v, body, got, err)
	}
	if body, got, err := ss[0].Document("none").Load(ctx, 0); err != nil || body != nil || got != 0 {
		t.Errorf("a document never written: %q, version %d, %v", body, got, err)
	}
}
