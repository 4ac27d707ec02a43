// Package locks is TestTheLockCheckSeesACall's input: two parts, each calling the other under its
// leaf lock.
package locks

import "sync"

type leafMutex struct{ sync.Mutex }

type book struct {
	mu leafMutex
	c  *counter
	n  int
}

type counter struct {
	mu leafMutex
	b  *book
}

func (b *book) add() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	b.c.other() // under the lock, to the end
}

func (c *counter) other() {}

func (c *counter) bump() {
	c.mu.Lock()
	c.b.add() // under the lock
	c.mu.Unlock()
	c.b.add() // after it: fine
}
