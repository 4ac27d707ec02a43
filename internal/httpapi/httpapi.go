// Package httpapi is the daemon's HTTP side: Gitea's push webhook (HMAC-checked), the probes
// systemd and a load balancer read, and /metrics. It owns its listener: Close stops it and waits for it.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	gocollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// Loop is what the handler needs of the reconciler.
type Loop interface {
	Health() reconcile.Health
	Trigger()
}

// Handler serves POST /webhook (signed with the secret secret returns; none refuses every call),
// GET /healthz (the process answers) and GET /readyz: 503 until a cycle succeeded and while the
// repository, the secret store or the Pulumi backend is unreachable.
func Handler(l Loop, secret func() []byte, log *slog.Logger, metrics *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	hook := gitsource.WebhookHandler(secret, func() {
		log.Info("webhook: polling now")
		l.Trigger()
	})
	refused := &refusals{log: log, every: time.Minute}
	mux.HandleFunc("POST /webhook", func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		hook.ServeHTTP(rec, r)
		if rec.code == http.StatusUnauthorized {
			refused.add(r.RemoteAddr, time.Now())
		}
	})
	if metrics != nil {
		// Unauthenticated, like /healthz: the listener is 127.0.0.1 by default.
		mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		h := l.Health()
		problems := map[string]string{}
		for name, err := range h.Dependencies() {
			if err != nil {
				problems[name] = err.Error()
			}
		}
		if h.Cycles == 0 && len(problems) == 0 {
			problems["cycle"] = "no cycle has completed yet"
		}
		w.Header().Set("Content-Type", "application/json")
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": len(problems) == 0, "problems": problems, "cycles": h.Cycles})
	})
	return mux
}

// NewRegistry is a registry of the process's own metrics (Go runtime, process), for the daemon's
// parts to register theirs on.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(gocollectors.NewGoCollector(), gocollectors.NewProcessCollector(gocollectors.ProcessCollectorOpts{}))
	return reg
}

// Server is a listening HTTP server.
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// Listen starts serving h on addr.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http listener stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is the address it listens on.
func (s *Server) Addr() string { return s.addr }

// Close lets requests in flight finish for a few seconds, then stops the server and waits for it.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// refusals logs webhooks refused for their signature: the first at once, then at most one record
// per interval counting those since, so a caller guessing signatures cannot flood the log.
type refusals struct {
	log   *slog.Logger
	every time.Duration

	mu     sync.Mutex
	last   time.Time
	since  int
	logged bool
}

func (f *refusals) add(remote string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since++
	if f.logged && now.Sub(f.last) < f.every {
		return
	}
	f.log.Warn("webhook refused: bad or missing signature, no poll started", "remote", remote, "refused", f.since)
	f.last, f.since, f.logged = now, 0, true
}

// statusRecorder keeps the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}
