package gitsource

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxWebhookBody bounds what an unauthenticated caller can make us read. Gitea's push payloads
// list at most a few commits, far below it.
const maxWebhookBody = 1 << 20

// VerifySignature checks Gitea's X-Gitea-Signature: the hex HMAC-SHA256 of the body under the secret.
func VerifySignature(secret, body []byte, signature string) bool {
	want, err := hex.DecodeString(signature)
	if err != nil || len(secret) == 0 {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), want)
}

// A Delivery is what became of one webhook request.
type Delivery string

const (
	Triggered Delivery = "triggered"  // a cycle was asked for
	Duplicate Delivery = "duplicate"  // the same delivery again: nothing done
	Coalesced Delivery = "coalesced"  // news already asked for: nothing done
	Refused   Delivery = "refused"    // bad or missing signature
	Limited   Delivery = "limited"    // over the rate: nothing read
	TooLarge  Delivery = "too_large"  // body over maxWebhookBody: nothing done
	BadMethod Delivery = "bad_method" // not a POST
)

// Webhook answers Gitea's webhooks as hints, never as commands (docs/operations.md#probes-and-the-webhook):
// a delivery only asks for a cycle, which reads the truth from Git and Gitea's API itself. So a
// delivery seen before (its id and the hash of its signed body) does nothing, and neither does one
// naming what an earlier delivery already asked for (the same event, action and commit) within the
// coalescing window: a thousand replays, or a thousand deliveries about one push, ask for one cycle.
// Requests past the rate are refused before their body is read. Memory is bounded: at most
// maxRemembered deliveries and news of each kind, each for a bounded time.
type Webhook struct {
	secret  func() []byte
	trigger func()
	observe func(Delivery, Hook)
	limiter *rate.Limiter

	mu         sync.Mutex
	deliveries *recent // delivery id and body hash
	news       *recent // event, action and commit
}

// Bounds of what a Webhook remembers, and its rate.
const (
	maxRemembered   = 10000
	deliveryMemory  = time.Hour
	coalesceWindow  = 10 * time.Minute
	webhookRate     = 100 // requests a second, sustained
	webhookBurst    = 300
	retryAfterLimit = "1" // seconds, in a 429's Retry-After
)

// Hook is what a webhook request says of itself, as the forge's headers name it: what callers log
// (Gitea's headers are read here and nowhere else).
type Hook struct {
	Event    string // push, pull_request, …
	Delivery string // the forge's id of the delivery
	From     string // the remote address
}

// hookOf reads a request's Hook.
func hookOf(r *http.Request) Hook {
	return Hook{Event: r.Header.Get(headerEvent), Delivery: r.Header.Get(headerDelivery), From: r.RemoteAddr}
}

// Gitea's webhook headers.
const (
	headerEvent     = "X-Gitea-Event"
	headerDelivery  = "X-Gitea-Delivery"
	headerSignature = "X-Gitea-Signature"
)

// NewWebhook answers webhooks signed with secret's key by calling trigger; observe, when not nil,
// hears what became of each request.
func NewWebhook(secret func() []byte, trigger func(), observe func(Delivery, Hook)) *Webhook {
	if observe == nil {
		observe = func(Delivery, Hook) {}
	}
	return &Webhook{secret: secret, trigger: trigger, observe: observe, limiter: rate.NewLimiter(webhookRate, webhookBurst),
		deliveries: newRecent(deliveryMemory, maxRemembered), news: newRecent(coalesceWindow, maxRemembered)}
}

func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	result, code := h.serve(r)
	h.observe(result, hookOf(r))
	switch code {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfterLimit)
	case http.StatusOK, http.StatusAccepted:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, string(result)+"\n")
		return
	}
	http.Error(w, string(result), code)
}

func (h *Webhook) serve(r *http.Request) (Delivery, int) {
	if r.Method != http.MethodPost {
		return BadMethod, http.StatusMethodNotAllowed
	}
	if !h.limiter.Allow() {
		return Limited, http.StatusTooManyRequests
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxWebhookBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return TooLarge, http.StatusRequestEntityTooLarge
	case err != nil:
		return Refused, http.StatusBadRequest
	}
	if !VerifySignature(h.secret(), body, r.Header.Get(headerSignature)) {
		return Refused, http.StatusUnauthorized
	}
	if hintsOffBuild {
		h.trigger()
		return Triggered, http.StatusAccepted
	}
	sum := sha256.Sum256(body)
	now := time.Now()
	h.mu.Lock()
	hook := hookOf(r)
	dup := h.deliveries.add(hook.Delivery+" "+hex.EncodeToString(sum[:]), now)
	known := !dup && h.news.add(newsOf(hook.Event, body, sum), now)
	h.mu.Unlock()
	switch {
	case dup:
		return Duplicate, http.StatusOK
	case known:
		return Coalesced, http.StatusAccepted
	}
	h.trigger()
	return Triggered, http.StatusAccepted
}

// newsOf is what a delivery tells: its event, action, pull request and commit, as much of it as the
// body names. A body naming none of these is news by its hash alone.
func newsOf(event string, body []byte, sum [sha256.Size]byte) string {
	var p struct {
		Ref         string `json:"ref"`
		After       string `json:"after"`
		Action      string `json:"action"`
		Number      int64  `json:"number"`
		PullRequest *struct {
			Head struct {
				SHA string `json:"sha"`
			} `json:"head"`
		} `json:"pull_request"`
	}
	if json.Unmarshal(body, &p) != nil {
		return event + " " + hex.EncodeToString(sum[:])
	}
	commit := p.After
	if p.PullRequest != nil {
		commit = p.PullRequest.Head.SHA
	}
	if commit == "" {
		return event + " " + hex.EncodeToString(sum[:])
	}
	return event + " " + p.Action + " " + strconv.FormatInt(p.Number, 10) + " " + p.Ref + " " + commit
}

// recent remembers keys for ttl, at most max of them: the oldest go first when it is full.
type recent struct {
	ttl   time.Duration
	max   int
	at    map[string]time.Time
	order []string // keys by the time they were added, oldest first
}

func newRecent(ttl time.Duration, max int) *recent {
	return &recent{ttl: ttl, max: max, at: map[string]time.Time{}}
}

// add remembers key and reports whether it was remembered already.
func (r *recent) add(key string, now time.Time) bool {
	for len(r.order) > 0 && (len(r.at) >= r.max || now.Sub(r.at[r.order[0]]) > r.ttl) {
		delete(r.at, r.order[0])
		r.order = r.order[1:]
	}
	if _, ok := r.at[key]; ok {
		return true
	}
	r.at[key] = now
	r.order = append(r.order, key)
	return false
}
