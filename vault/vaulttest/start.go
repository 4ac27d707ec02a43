package vaulttest

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// Start serves a new Server on 127.0.0.1 with an ephemeral port until the test ends. It returns the
// server and its address (http://127.0.0.1:PORT), the value of VAULT_ADDR.
func Start(t testing.TB, opts ...Option) (*Server, string) {
	t.Helper()
	s := New(opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("vaulttest: listen: %v", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("vaulttest: serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}
