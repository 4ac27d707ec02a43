package daemon

// The daemon's HTTP side: Gitea's push webhook (HMAC-checked), the probes systemd and a load
// balancer read, and /metrics.

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// loop is what the HTTP handler needs of the reconciler.
type loop interface {
	Health() reconcile.Health
	Trigger()
}

// httpHandler serves POST /webhook (signed with the secret secret returns; none refuses every call),
// GET /healthz (the process answers) and GET /readyz: 503 until a cycle succeeded and while the
// repository, the secret store or the Pulumi backend is unreachable.
func httpHandler(l loop, secret func() []byte, log *slog.Logger, metrics *prometheus.Registry) http.Handler {
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
