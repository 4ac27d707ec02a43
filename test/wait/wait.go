// Package wait is the one way tests wait for something asynchronous: a condition polled until it
// holds or its time is up, the test failed naming what it waited for and the last reason it did not
// hold. A check that follows an asynchronous action waits with it; a bare read after a poll races
// on a busy machine (docs/development.md#waiting-in-tests).
package wait

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Option tunes a wait.
type Option func(*config)

type config struct {
	every time.Duration
	abort func() error
}

// Every polls every d (100 ms by default): longer where a poll is costly (a fetch, an API call).
func Every(d time.Duration) Option { return func(c *config) { c.every = d } }

// Unless ends the wait early, as a failure, once gone returns an error: the thing that was to make
// the condition true has ended (a daemon exited), so waiting longer only hides why.
func Unless(gone func() error) Option { return func(c *config) { c.abort = gone } }

// ErrTimeout is Until's error when the time is up.
var ErrTimeout = errors.New("not within the time given")

// For fails the test unless cond holds within the time given, and returns how long it took.
func For(t testing.TB, what string, within time.Duration, cond func() bool, opts ...Option) time.Duration {
	t.Helper()
	return NoError(t, what, within, boolCond(cond), opts...)
}

// NoError fails the test unless cond returns nil within the time given, naming cond's last error,
// and returns how long it took.
func NoError(t testing.TB, what string, within time.Duration, cond func() error, opts ...Option) time.Duration {
	t.Helper()
	start := time.Now()
	if err := until(context.Background(), within, cond, opts); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return time.Since(start)
}

// Value polls get until it says ok, fails the test unless it does within the time given, and
// returns the value that did.
func Value[T any](t testing.TB, what string, within time.Duration, get func() (T, bool), opts ...Option) T {
	t.Helper()
	var v T
	For(t, what, within, func() bool {
		var ok bool
		v, ok = get()
		return ok
	}, opts...)
	return v
}

// Until polls cond until it holds (nil), the time is up (ErrTimeout, with cond's last error) or ctx
// ends, for code that reports rather than fails a test (a measurement that goes on past a miss).
func Until(ctx context.Context, within time.Duration, cond func() error, opts ...Option) error {
	return until(ctx, within, cond, opts)
}

func until(ctx context.Context, within time.Duration, cond func() error, opts []Option) error {
	c := config{every: 100 * time.Millisecond}
	for _, o := range opts {
		o(&c)
	}
	deadline := time.Now().Add(within)
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if c.abort != nil {
			if gone := c.abort(); gone != nil {
				return fmt.Errorf("gave up: %w (last: %w)", gone, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%v): %w", ErrTimeout, within, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// errNotYet is a boolean condition's "not yet".
var errNotYet = errors.New("the condition does not hold yet")

func boolCond(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}
}
