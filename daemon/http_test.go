package daemon

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reconcile"
)

type fakeLoop struct {
	h        reconcile.Health
	triggers *int
}

func (l fakeLoop) Trigger() {
	if l.triggers != nil {
		*l.triggers++
	}
}
func (l fakeLoop) Health() reconcile.Health { return l.h }

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
			httpHandler(fakeLoop{h: c.health}, func() []byte { return nil }, slog.New(slog.DiscardHandler), nil).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
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

// TestWebhookRefusalsAreLoggedNotFlooded: a webhook with a bad or missing signature is 401, starts
// no poll and is logged; a caller sending many gets one record per minute counting them, and a
// signed one still starts its poll.
func TestWebhookRefusalsAreLoggedNotFlooded(t *testing.T) {
	var logs bytes.Buffer
	triggers := 0
	key := []byte("hook-key")
	h := httpHandler(fakeLoop{triggers: &triggers}, func() []byte { return key }, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	body := `{"ref":"refs/heads/main"}`
	post := func(sig string) int {
		req := httptest.NewRequest("POST", "/webhook", strings.NewReader(body))
		if sig != "" {
			req.Header.Set("X-Gitea-Signature", sig)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, sig := range []string{"", "zz", strings.Repeat("0", 64), hex.EncodeToString([]byte("not an hmac"))} {
		if code := post(sig); code != http.StatusUnauthorized {
			t.Errorf("signature %q: %d, want 401", sig, code)
		}
	}
	if n := strings.Count(logs.String(), "webhook refused"); n != 1 || triggers != 0 {
		t.Errorf("%d records of refusals (want 1), %d polls (want 0):\n%s", n, triggers, logs.String())
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	if code := post(hex.EncodeToString(m.Sum(nil))); code != http.StatusAccepted || triggers != 1 {
		t.Errorf("signed: %d and %d polls, want 202 and 1", code, triggers)
	}

	var later bytes.Buffer
	f := &refusals{log: slog.New(slog.NewTextHandler(&later, nil)), every: time.Minute, msg: "webhook refused"}
	start := time.Now()
	for i := range 100 {
		f.add("127.0.0.1:1", start.Add(time.Duration(i)*time.Second))
	}
	if n := strings.Count(later.String(), "webhook refused"); n != 2 || !strings.Contains(later.String(), "refused=60") {
		t.Errorf("100 refusals over 100 s: %d records, want 2, the second counting 60:\n%s", n, later.String())
	}
}
