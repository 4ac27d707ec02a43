package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stands-engine/stands-reconciler/reconcile"
)

type loop struct{ h reconcile.Health }

func (l loop) Trigger()                 {}
func (l loop) Health() reconcile.Health { return l.h }

// TestReadyzSaysWhy: /readyz answers 503 naming each outside service that fails, an operation that
// ran past its deadline included, and 200 when none does.
func TestReadyzSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name   string
		health reconcile.Health
		code   int
		key    string
	}{
		{"ready", reconcile.Health{Cycles: 3}, http.StatusOK, ""},
		{"an operation timed out", reconcile.Health{Cycles: 3, Timeout: errors.New("apply of local_a_dev took longer than 1h0m0s")}, http.StatusServiceUnavailable, "operations"},
		{"vault down", reconcile.Health{Cycles: 3, Secrets: errors.New("vault is unavailable")}, http.StatusServiceUnavailable, "secrets"},
		{"no cycle yet", reconcile.Health{}, http.StatusServiceUnavailable, "cycle"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Handler(loop{c.health}, func() []byte { return nil }, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			var body struct {
				Ready    bool              `json:"ready"`
				Problems map[string]string `json:"problems"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != c.code || (c.key != "" && body.Problems[c.key] == "") || body.Ready != (c.key == "") {
				t.Errorf("%d %s (%v)", rec.Code, rec.Body, err)
			}
		})
	}
}
