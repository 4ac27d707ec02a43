package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for the goroutines of a test and of the code under it, e.g. as a
// logger's writer.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
