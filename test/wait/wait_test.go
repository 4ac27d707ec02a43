package wait

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fatalT records the failure For reports and ends the goroutine, as testing.T's Fatalf does.
type fatalT struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn with a fatalT in a goroutine of its own and returns what it failed with ("" when not).
func run(t *testing.T, fn func(tb testing.TB)) string {
	f := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

func TestFor(t *testing.T) {
	gone := errors.New("the daemon exited")
	cases := []struct {
		name   string
		cond   func(n int) error
		opts   []Option
		within time.Duration
		fails  []string // what the failure names; none: it must not fail
	}{
		{"holds at once", func(int) error { return nil }, nil, time.Second, nil},
		{"holds on the fourth poll", func(n int) error {
			if n < 4 {
				return errors.New("not yet")
			}
			return nil
		}, []Option{Every(time.Millisecond)}, 10 * time.Second, nil},
		{"never holds: the last error named", func(n int) error { return fmt.Errorf("status is Progressing (poll %d)", n) },
			[]Option{Every(10 * time.Millisecond)}, 50 * time.Millisecond,
			[]string{"waiting for the thing", "not within the time given", "status is Progressing"}},
		{"what was to make it hold ended", func(int) error { return errors.New("not yet") },
			[]Option{Unless(func() error { return gone })}, time.Hour,
			[]string{"gave up", "the daemon exited", "not yet"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := 0
			start := time.Now()
			msg := run(t, func(tb testing.TB) {
				NoError(tb, "the thing", c.within, func() error { n++; return c.cond(n) }, c.opts...)
			})
			if len(c.fails) == 0 && msg != "" {
				t.Fatalf("failed: %s", msg)
			}
			for _, want := range c.fails {
				if !strings.Contains(msg, want) {
					t.Errorf("failure %q lacks %q", msg, want)
				}
			}
			if c.within == time.Hour && time.Since(start) > time.Minute {
				t.Errorf("Unless did not end the wait early: %v", time.Since(start))
			}
		})
	}
}

func TestValueReturnsWhatHeld(t *testing.T) {
	n := 0
	got := Value(t, "the third value", 10*time.Second, func() (int, bool) { n++; return n * 10, n == 3 }, Every(time.Millisecond))
	if got != 30 {
		t.Errorf("Value returned %d, want the value that held (30)", got)
	}
}

func TestUntilEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Until(ctx, time.Hour, func() error { return errors.New("not yet") })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Until after its context ended: %v", err)
	}
	if err := Until(context.Background(), 20*time.Millisecond, func() error { return errors.New("no") }, Every(5*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Errorf("Until past its time: %v, want ErrTimeout", err)
	}
}
