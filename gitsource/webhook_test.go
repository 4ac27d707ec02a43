package gitsource

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

var hookKey = []byte("hook-secret")

func sign(body string) string {
	mac := hmac.New(sha256.New, hookKey)
	mac.Write([]byte(body))
	return hex.EncodeToString(mac.Sum(nil))
}

func pushBody(commit string) string {
	return fmt.Sprintf(`{"ref":"refs/heads/main","before":"%040d","after":%q}`, 0, commit)
}

func delivery(h http.Handler, method, id, event, body, sig string) (int, string) {
	req := httptest.NewRequest(method, "/webhook", strings.NewReader(body))
	req.Header.Set("X-Gitea-Delivery", id)
	req.Header.Set("X-Gitea-Event", event)
	if sig != "" {
		req.Header.Set("X-Gitea-Signature", sig)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// TestWebhook: each kind of request, in order, against one handler: what it answers, what it
// became, and whether it asked for a cycle.
func TestWebhook(t *testing.T) {
	var polls atomic.Int32
	h := NewWebhook(func() []byte { return hookKey }, func() { polls.Add(1) }, nil)
	h.limiter = rate.NewLimiter(rate.Inf, 0)
	a, b := pushBody(strings.Repeat("a", 40)), pushBody(strings.Repeat("b", 40))
	pr := func(action, sha string) string {
		return fmt.Sprintf(`{"action":%q,"number":7,"pull_request":{"head":{"sha":%q}}}`, action, sha)
	}
	for _, c := range []struct {
		name, method, id, event, body, sig string
		code                               int
		result                             Delivery
		polls                              int32
	}{
		{"signed push", "POST", "d1", "push", a, sign(a), http.StatusAccepted, Triggered, 1},
		{"bad signature", "POST", "d2", "push", b, strings.Repeat("0", 64), http.StatusUnauthorized, Refused, 1},
		{"missing signature", "POST", "d3", "push", b, "", http.StatusUnauthorized, Refused, 1},
		{"not hex", "POST", "d4", "push", b, "zz", http.StatusUnauthorized, Refused, 1},
		{"the same delivery again", "POST", "d1", "push", a, sign(a), http.StatusOK, Duplicate, 1},
		{"another delivery of the same push", "POST", "d5", "push", a, sign(a), http.StatusAccepted, Coalesced, 1},
		{"a push of another commit", "POST", "d6", "push", b, sign(b), http.StatusAccepted, Triggered, 2},
		{"a pull request opened", "POST", "d7", "pull_request", pr("opened", "c"), sign(pr("opened", "c")), http.StatusAccepted, Triggered, 3},
		{"the same pull request closed", "POST", "d8", "pull_request", pr("closed", "c"), sign(pr("closed", "c")), http.StatusAccepted, Triggered, 4},
		{"a body naming nothing", "POST", "d9", "ping", `{"zen":"x"}`, sign(`{"zen":"x"}`), http.StatusAccepted, Triggered, 5},
		{"GET", "GET", "d10", "push", b, sign(b), http.StatusMethodNotAllowed, BadMethod, 5},
		{"over 1 MiB", "POST", "d11", "push", strings.Repeat(" ", maxWebhookBody+1), sign(strings.Repeat(" ", maxWebhookBody+1)), http.StatusRequestEntityTooLarge, TooLarge, 5},
	} {
		code, body := delivery(h, c.method, c.id, c.event, c.body, c.sig)
		if code != c.code || !strings.Contains(body, string(c.result)) || polls.Load() != c.polls {
			t.Errorf("%s: %d %q and %d polls, want %d %q and %d", c.name, code, body, polls.Load(), c.code, c.result, c.polls)
		}
	}
}

// TestWebhookDeliveriesAreHints: a thousand replays of one delivery, and a thousand distinct
// deliveries about one push, sent at once, each ask for one cycle; a flood past the rate is
// answered 429 at once. Its control run, built with every delivery a command (stands_hints_off),
// fails.
func TestWebhookDeliveriesAreHints(t *testing.T) {
	var polls atomic.Int32
	h := NewWebhook(func() []byte { return hookKey }, func() { polls.Add(1) }, nil)
	h.limiter = rate.NewLimiter(rate.Inf, 0)
	flood := func(body func(i int) (id, body string)) {
		var wg sync.WaitGroup
		for i := range 1000 {
			wg.Go(func() {
				id, b := body(i)
				if code, _ := delivery(h, "POST", id, "push", b, sign(b)); code/100 != 2 {
					t.Errorf("delivery %d: %d", i, code)
				}
			})
		}
		wg.Wait()
	}
	one := pushBody(strings.Repeat("1", 40))
	flood(func(int) (string, string) { return "replayed", one })
	if n := polls.Swap(0); n != 1 {
		t.Errorf("1,000 replays of one delivery asked for %d cycles, want 1", n)
	}
	flood(func(i int) (string, string) {
		// Distinct deliveries and bodies (Gitea's payloads differ in their timestamps), one commit.
		return fmt.Sprintf("delivery-%d", i), strings.Replace(pushBody(strings.Repeat("2", 40)), "{", fmt.Sprintf(`{"n":%d,`, i), 1)
	})
	if n := polls.Swap(0); n != 1 {
		t.Errorf("1,000 distinct deliveries of one push asked for %d cycles, want 1", n)
	}
	testenv.ShowFailsWithTags(t, ".", "TestWebhookDeliveriesAreHints", "stands_hints_off", "asked for 1000 cycles, want 1")

	limited := NewWebhook(func() []byte { return hookKey }, func() {}, nil)
	start, codes := time.Now(), map[int]int{}
	for i := range 1000 {
		code, _ := delivery(limited, "POST", fmt.Sprint(i), "push", "{}", "")
		codes[code]++
	}
	if codes[http.StatusTooManyRequests] < 1000-webhookBurst-webhookRate || time.Since(start) > 5*time.Second {
		t.Errorf("1,000 unsigned requests at once: %v in %s, want all but about %d answered 429 at once", codes, time.Since(start), webhookBurst)
	}
}

// TestRecentIsBounded: what a Webhook remembers stays within its bound whatever arrives, forgets
// after its time, and remembers what is recent.
func TestRecentIsBounded(t *testing.T) {
	r := newRecent(time.Minute, 100)
	now := time.Now()
	for i := range 10000 {
		r.add(fmt.Sprint(i), now)
	}
	if len(r.at) > 100 || len(r.order) > 100 {
		t.Errorf("%d keys kept (%d in order), want at most 100", len(r.at), len(r.order))
	}
	if !r.add("9999", now) || r.add("0", now) {
		t.Error("the newest key forgotten, or the oldest remembered")
	}
	if r.add("9999", now.Add(2*time.Minute)) {
		t.Error("a key remembered past its time")
	}
}
