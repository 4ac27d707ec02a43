package vaulttest

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Start serves a new Server on 127.0.0.1 with an ephemeral port until the test ends. It returns the
// server and its address (http://127.0.0.1:PORT), the value of VAULT_ADDR.
func Start(t testing.TB, opts ...Option) (*Server, string) {
	t.Helper()
	l := Serve(t, New(opts...))
	return l.Server, l.Addr
}

// Listener serves a Server on a fixed loopback address. Stop and Start simulate an outage: the
// address refuses connections in between, and the server keeps its state (tokens, secrets).
type Listener struct {
	Server *Server
	Addr   string // http://127.0.0.1:PORT

	t    testing.TB
	host string
	mu   sync.Mutex
	srv  *http.Server
	done chan error
}

// Serve serves s on an ephemeral loopback port until the test ends.
func Serve(t testing.TB, s *Server) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("vaulttest: listen: %v", err)
	}
	l := &Listener{Server: s, Addr: "http://" + ln.Addr().String(), t: t, host: ln.Addr().String()}
	l.serve(ln)
	t.Cleanup(l.Stop)
	return l
}

func (l *Listener) serve(ln net.Listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.srv = &http.Server{Handler: l.Server, ReadHeaderTimeout: 10 * time.Second}
	l.done = make(chan error, 1)
	srv, done := l.srv, l.done
	go func() { done <- srv.Serve(ln) }()
}

// Stop closes the listener and every connection.
func (l *Listener) Stop() {
	l.mu.Lock()
	srv, done := l.srv, l.done
	l.srv = nil
	l.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		l.t.Errorf("vaulttest: serve: %v", err)
	}
}

// Start listens on the same address again after Stop.
func (l *Listener) Start() {
	l.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger for a moment after Close
		if ln, err = net.Listen("tcp", l.host); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		l.t.Fatalf("vaulttest: listen on %s again: %v", l.host, err)
	}
	l.serve(ln)
}
