package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// lifetimes are the stands' ends and costs (docs/lifetime.md): the server types' prices, read again
// every Prices.Interval, and what a stand's declared end and servers make of its status. The prices
// are swapped whole (an atomic pointer) and read without a lock; when they were read is the cycles'
// own (cycles never overlap).
type lifetimes struct {
	pricer   Pricer
	interval time.Duration
	branch   string
	now      func() time.Time
	log      *slog.Logger

	prices   atomic.Pointer[stands.Prices] // the last read; nil before one succeeded
	pricesAt time.Time                     // when they were last asked for: by cycles only
}

func newLifetimes(cfg Config) *lifetimes {
	return &lifetimes{pricer: cfg.Prices.Pricer, interval: cfg.Prices.Interval, branch: cfg.Branch, now: cfg.Now, log: cfg.Log}
}

// stamp sets a new status's end and cost from the stand as the tracked branch declares it. A stand
// judged invalid keeps what its last valid judgement said.
func (lt *lifetimes) stamp(st *stand, next *Status) {
	if next.DeclaredSince == nil {
		since := lt.now().UTC().Truncate(time.Second)
		next.DeclaredSince = &since
	}
	if st.declared == nil {
		return
	}
	next.Expires, next.ExpiresBy, next.EndHeld = nil, "", st.endHeld
	if e := endOf(st.lifetime, st.declared, next, lt.now()); !e.IsZero() {
		at := e.At.UTC()
		next.Expires, next.ExpiresBy = &at, e.By
	}
	next.MonthlyCost = nil
	prices := lt.prices.Load()
	if prices == nil || *prices == nil {
		return
	}
	var c Cost
	for _, n := range st.declared.Nodes {
		for _, p := range st.declared.Profiles {
			if p.Name != n.Profile {
				continue
			}
			price, ok := prices.Of(p.ServerType, p.Location)
			if !ok {
				return
			}
			c.Amount, c.Currency = c.Amount+price.Monthly, price.Currency
		}
	}
	c.Amount = math.Round(c.Amount*100) / 100
	next.MonthlyCost = &c
}

// refresh reads the server types' prices when the last read is older than the interval; a failed
// read keeps the last prices and is tried again at the next cycle.
func (lt *lifetimes) refresh(ctx context.Context) {
	if lt.pricer == nil || (!lt.pricesAt.IsZero() && lt.now().Sub(lt.pricesAt) < lt.interval) {
		return
	}
	p, err := lt.pricer.Prices(ctx)
	if err != nil {
		lt.log.Warn("server prices not read: monthly costs stay as they were", "err", err)
		return
	}
	lt.pricesAt = lt.now()
	lt.prices.Store(&p)
}

// endOf is a declared stand's end under the policy: the default counts from its status's
// declaredSince, or from now when it has none yet.
func endOf(l manifest.Lifetime, s *manifest.Stand, status *Status, now time.Time) manifest.Expiry {
	since := now
	if status != nil && status.DeclaredSince != nil {
		since = *status.DeclaredSince
	}
	return l.ExpiryOf(s, since)
}

// ended says why a declared stand is past its end now; "" when it is not. The text holds no
// relative time: a status changes only when the stand does.
func (lt *lifetimes) ended(st *stand) string {
	now := lt.now()
	e := endOf(st.lifetime, st.declared, st.status, now)
	if e.IsZero() || now.Before(e.At) {
		return ""
	}
	by := "stand.expires"
	if e.By == manifest.ByDefault {
		by = "the repository's default lifetime"
	}
	return fmt.Sprintf("ended at %s (%s, %s); it stays until a commit on %s removes it: merge its removal pull request, or extend stand.expires",
		e.At.UTC().Format("2006-01-02 15:04 UTC"), by, e.Pos, cmp.Or(lt.branch, "the tracked branch"))
}

// endings are the ends of the stands the judgement declares, for their removal pull requests;
// status is each stand's status now (nil when it has none).
func (lt *lifetimes) endings(commit string, d *desiredState, status func(id string) *Status) stands.Endings {
	ev := d.ev
	l := ev.Lifetime
	e := stands.Endings{Commit: commit, Declared: map[string]bool{}, WarnBefore: l.Warn(), MergeAtEnd: l.MergeAtExpiry,
		PolicyAt: l.At["merge_at_expiry"].String()}
	for _, v := range ev.Verdicts {
		e.Declared[v.ID] = v.Input != nil
		st := status(v.ID)
		if v.Input == nil || st == nil {
			continue
		}
		x := endOf(l, d.declared(v), st, lt.now())
		if x.IsZero() {
			continue
		}
		end := stands.Ending{ID: v.ID, File: v.File, End: x.At, SetIn: x.Pos.File, At: x.Pos.String(), ByDefault: x.By == manifest.ByDefault}
		if end.ByDefault {
			end.SetIn = v.File
		}
		if c := st.MonthlyCost; c != nil {
			end.Cost = fmt.Sprintf("%.2f %s", c.Amount, c.Currency)
		}
		e.Ends = append(e.Ends, end)
	}
	return e
}
