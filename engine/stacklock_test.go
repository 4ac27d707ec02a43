package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
)

// TestStackLocks: operations on one stack take turns, on different stacks they do not wait, and a
// waiter whose context ends gives up without the lock.
func TestStackLocks(t *testing.T) {
	var l stackLocks
	a, b := stands.StackRef{Project: "p", Env: "a"}, stands.StackRef{Project: "p", Env: "b"}
	unlockA, err := l.lock(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := l.lock(context.Background(), b)
	if err != nil {
		t.Fatalf("another stack waited: %v", err)
	}
	unlockB()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second holder of a busy stack: %v", err)
	}

	got := make(chan struct{})
	go func() {
		unlock, err := l.lock(context.Background(), a)
		if err == nil {
			unlock()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("the lock was taken while held")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock once it was free")
	}
}
