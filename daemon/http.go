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
	"github.com/prometheus/client_golang/prometheus/promauto"
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
	addWebhook(mux, l, secret, log, metrics)
	addProbes(mux, l, log, metrics)
	return mux
}

// addWebhook serves POST /webhook on mux.
func addWebhook(mux *http.ServeMux, l loop, secret func() []byte, log *slog.Logger, metrics *prometheus.Registry) {
	var reg prometheus.Registerer // none without a registry: a nil *Registry is not a nil Registerer
	if metrics != nil {
		reg = metrics
	}
	deliveries := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Name: "stands_webhook_deliveries_total",
		Help: "Webhook requests by what became of them: triggered (a cycle asked for), duplicate, coalesced, refused, limited, too_large, bad_method."},
		[]string{"result"})
	refused := &refusals{log: log, every: time.Minute, msg: "webhook refused: bad or missing signature, no poll started"}
	limited := &refusals{log: log, every: time.Minute, msg: "webhooks over the rate refused (429), no poll started"}
	hook := gitsource.NewWebhook(secret, l.Trigger, func(d gitsource.Delivery, h gitsource.Hook) {
		deliveries.WithLabelValues(string(d)).Inc()
		switch d {
		case gitsource.Triggered:
			log.Info("webhook: polling now", "event", h.Event)
		case gitsource.Duplicate, gitsource.Coalesced:
			log.Debug("webhook: nothing new", "result", string(d), "event", h.Event, "delivery", h.Delivery)
		case gitsource.Refused:
			refused.add(h.From, time.Now())
		case gitsource.Limited:
			limited.add(h.From, time.Now())
		}
	})
	mux.Handle("POST /webhook", hook)
}

// addProbes serves /metrics, /healthz and /readyz on mux.
func addProbes(mux *http.ServeMux, l loop, log *slog.Logger, metrics *prometheus.Registry) {
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
}

// refusals logs webhooks refused: the first at once, then at most one record per interval counting
// those since, so a caller guessing signatures or flooding cannot flood the log.
type refusals struct {
	log   *slog.Logger
	every time.Duration
	msg   string

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
	f.log.Warn(f.msg, "remote", remote, "refused", f.since)
	f.last, f.since, f.logged = now, 0, true
}
