package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// sharedDoc is a document replicas share, in memory: a save lands only over the version stored.
// interfere, when set, writes as another replica would between the gate's load and its save, once.
type sharedDoc struct {
	mu        sync.Mutex
	body      []byte
	version   int64
	err       error
	saves     int
	interfere func(state *reviewState)
}

func (d *sharedDoc) Load(_ context.Context, known int64) ([]byte, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, 0, d.err
	}
	if known == d.version {
		return nil, d.version, nil
	}
	return d.body, d.version, nil
}

func (d *sharedDoc) Save(_ context.Context, body []byte, version int64) (int64, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return 0, false, d.err
	}
	if f := d.interfere; f != nil {
		d.interfere = nil
		var st reviewState
		_ = json.Unmarshal(d.body, &st)
		f(&st)
		d.body, _ = json.Marshal(st)
		d.version++
	}
	if version != d.version {
		return d.version, false, nil
	}
	d.body, d.version, d.saves = body, d.version+1, d.saves+1
	return d.version, true, nil
}

func (d *sharedDoc) state(t *testing.T) reviewState {
	d.mu.Lock()
	defer d.mu.Unlock()
	var st reviewState
	if err := json.Unmarshal(d.body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestReviewStateSharedStore: the gate keeps its state in a store replicas share. A change another
// replica saved between the gate's load and its save is kept, and the gate's own made again over it;
// while the store cannot be read, no change starts, and once it answers the first import goes on.
func TestReviewStateSharedStore(t *testing.T) {
	var logs testenv.Buffer
	doc := &sharedDoc{err: errors.New("connection refused")}
	h := newHarness(t, repoWith("a", "b"), func(c *Config) {
		c.Review.Require, c.Review.Store = true, doc
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	h.mustCycle()
	h.mustCycle()
	if n := h.eng.UpsOf("local_a_dev") + h.eng.UpsOf("local_b_dev"); n != 0 {
		t.Errorf("%d pulumi up while the review gate's state could not be read", n)
	}
	if !strings.Contains(logs.String(), "the review gate's state cannot be kept: no change is applied this cycle") {
		t.Errorf("the log does not say why nothing was applied:\n%s", logs.String())
	}

	doc.mu.Lock()
	doc.err = nil
	doc.interfere = func(st *reviewState) { st.Used = map[string]time.Time{"#9 local_z_dev x>y": time.Now().UTC()} }
	doc.mu.Unlock()
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 1 || h.eng.UpsOf("local_b_dev") != 1 {
		t.Errorf("the first import once the store answers: a %d ups, b %d", h.eng.UpsOf("local_a_dev"), h.eng.UpsOf("local_b_dev"))
	}
	st := doc.state(t)
	if _, ok := st.Used["#9 local_z_dev x>y"]; !ok || st.Baseline == "" || st.Lifetime == nil {
		t.Errorf("the other replica's write or the gate's own is lost: used %v, baseline %q, lifetime %+v", st.Used, st.Baseline, st.Lifetime)
	}
}
