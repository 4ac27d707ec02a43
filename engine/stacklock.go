package engine

import (
	"context"
	"sync"

	"github.com/stands-engine/stands-reconciler/stands"
)

// stackLocks makes this process's operations that write a stack take turns. The diy backend's lock
// is the CLI's, taken after it has read the stack: two CLIs started together can each find the
// other's lock and both give up, or one can read a checkpoint the other is saving. Other processes
// are still kept out by the backend's lock alone.
type stackLocks struct {
	mu   sync.Mutex
	busy map[stands.StackRef]chan struct{} // closed when the holder is done
}

// lock waits until no other operation of this process holds ref, or ctx ends.
func (l *stackLocks) lock(ctx context.Context, ref stands.StackRef) (unlock func(), err error) {
	for {
		l.mu.Lock()
		done, held := l.busy[ref]
		if !held {
			if l.busy == nil {
				l.busy = map[stands.StackRef]chan struct{}{}
			}
			done = make(chan struct{})
			l.busy[ref] = done
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.busy, ref)
				l.mu.Unlock()
				close(done)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
