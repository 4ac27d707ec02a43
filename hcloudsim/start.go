package hcloudsim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener serves a simulator on an address until Close.
type Listener struct {
	Sim      *Sim
	Endpoint string // http://host:port/v1, for hcloud.WithEndpoint
	srv      *http.Server
	done     chan error
	once     sync.Once
	err      error
}

// Listen serves sim on addr ("127.0.0.1:0" for an ephemeral port).
func Listen(sim *Sim, addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{Sim: sim, Endpoint: "http://" + ln.Addr().String() + "/v1", done: make(chan error, 1),
		srv: &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}}
	go func() { l.done <- l.srv.Serve(ln) }()
	return l, nil
}

// Close stops serving, waiting up to ctx for requests in flight. Closing twice is harmless.
func (l *Listener) Close(ctx context.Context) error {
	l.once.Do(func() {
		l.err = l.srv.Shutdown(ctx)
		if serr := <-l.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			l.err = serr
		}
	})
	return l.err
}
