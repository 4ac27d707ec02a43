package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stands-engine/stands-reconciler/test/wait"
)

// gauge is the value of one series of a gathered metric; -1 when it is not there.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestMetrics: the gauges read the reconciler's own state (on a worker vs queued for one, the
// controls in force), the secret store's errors are counted where they happen.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h := newHarness(t, repoWith("a", "b", "c"), func(c *Config) { c.Workers, c.Metrics = 1, reg })
	h.eng.Gate = make(chan struct{})
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "one operation running", 10*time.Second, func() bool { return gauge(t, reg, "stands_operations_running", nil) == 1 }, wait.Every(10*time.Millisecond))
	if r, q := gauge(t, reg, "stands_operations_running", nil), gauge(t, reg, "stands_operations_queued", nil); r != 1 || q != 2 {
		t.Errorf("with one worker and three operations: %v running, %v queued", r, q)
	}
	for range 3 {
		h.eng.Gate <- struct{}{}
	}
	h.r.Wait()
	if r, q := gauge(t, reg, "stands_operations_running", nil), gauge(t, reg, "stands_operations_queued", nil); r != 0 || q != 0 {
		t.Errorf("after the operations: %v running, %v queued", r, q)
	}
	if got := gauge(t, reg, "stands_control_active", map[string]string{"control": "paused"}); got != 0 {
		t.Errorf("paused before the pause: %v", got)
	}
	if err := h.r.Pause("test", "why"); err != nil {
		t.Fatal(err)
	}
	h.sec.SetDown(true)
	h.src.Commit(portChange("a", 6393))
	h.mustCycle()
	if got := gauge(t, reg, "stands_control_active", map[string]string{"control": "paused"}); got != 1 {
		t.Errorf("paused: %v", got)
	}
	if got := gauge(t, reg, "stands_secret_store_errors_total", map[string]string{"operation": "read"}); got != 1 {
		t.Errorf("secret store read errors: %v", got)
	}
}
