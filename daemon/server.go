package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// server serves one of the daemon's listeners — the webhook, probes and /metrics on TCP, the
// controls on a Unix socket — until Close, which lets requests in flight finish for a few seconds,
// then stops it and waits for it.
type server struct {
	srv  *http.Server
	addr string
	done chan struct{}
	// after runs once the server has stopped (the control socket's file is removed).
	after func()
}

// serve serves h on ln in a goroutine of its own. connContext, when set, gives each connection's
// requests what the listener knows of the peer.
func serve(ln net.Listener, h http.Handler, connContext func(context.Context, net.Conn) context.Context, log *slog.Logger, what string) *server {
	s := &server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnContext: connContext},
		addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" stopped", "err", err)
		}
	}()
	return s
}

// listenTCP serves h on addr.
func listenTCP(addr string, h http.Handler, log *slog.Logger) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return serve(ln, h, nil, log, "http listener"), nil
}

// Addr is the address it listens on.
func (s *server) Addr() string { return s.addr }

func (s *server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	if s.after != nil {
		s.after()
	}
	return err
}
