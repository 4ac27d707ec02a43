package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// lifetime sets a new status's end and cost from the stand as the tracked branch declares it
// (docs/lifetime.md). A stand judged invalid keeps what its last valid judgement said. Called with
// r.mu held.
func (r *Reconciler) lifetime(st *stand, next *Status) {
	if next.DeclaredSince == nil {
		since := r.cfg.Now().UTC().Truncate(time.Second)
		next.DeclaredSince = &since
	}
	if st.declared == nil {
		return
	}
	next.Expires, next.ExpiresBy = nil, ""
	if e := endOf(st.lifetime, st.declared, next, r.cfg.Now()); !e.IsZero() {
		at := e.At.UTC()
		next.Expires, next.ExpiresBy = &at, e.By
	}
	next.MonthlyCost = nil
	if r.prices == nil {
		return
	}
	var c Cost
	for _, n := range st.declared.Nodes {
		for _, p := range st.declared.Profiles {
			if p.Name != n.Profile {
				continue
			}
			price, ok := r.prices.Of(p.ServerType, p.Location)
			if !ok {
				return
			}
			c.Amount, c.Currency = c.Amount+price.Monthly, price.Currency
		}
	}
	c.Amount = math.Round(c.Amount*100) / 100
	next.MonthlyCost = &c
}

// readPrices reads the server types' prices when the last read is older than PricesInterval; a
// failed read keeps the last prices and is tried again at the next cycle.
func (r *Reconciler) readPrices(ctx context.Context) {
	if r.cfg.Prices == nil || (!r.pricesAt.IsZero() && r.cfg.Now().Sub(r.pricesAt) < r.cfg.PricesInterval) {
		return
	}
	p, err := r.cfg.Prices.Prices(ctx)
	if err != nil {
		r.log.Warn("server prices not read: monthly costs stay as they were", "err", err)
		return
	}
	r.pricesAt = r.cfg.Now()
	r.mu.Lock()
	r.prices = p
	r.mu.Unlock()
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
func (r *Reconciler) ended(st *stand) string {
	now := r.cfg.Now()
	e := endOf(st.lifetime, st.declared, st.status, now)
	if e.IsZero() || now.Before(e.At) {
		return ""
	}
	by := "stand.expires"
	if e.By == manifest.ByDefault {
		by = "the repository's default lifetime"
	}
	return fmt.Sprintf("ended at %s (%s, %s); it stays until a commit on %s removes it: merge its removal pull request, or extend stand.expires",
		e.At.UTC().Format("2006-01-02 15:04 UTC"), by, e.Pos, cmp.Or(r.cfg.Branch, "the tracked branch"))
}

// endings are the ends of the stands the judgement declares, for their removal pull requests.
func (r *Reconciler) endings(commit string, ev *judge.Evaluation) stands.Endings {
	l := ev.Lifetime
	e := stands.Endings{Commit: commit, Declared: map[string]bool{}, WarnBefore: l.Warn(), MergeAtEnd: l.MergeAtExpiry,
		PolicyAt: l.At["merge_at_expiry"].String()}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range ev.Verdicts {
		e.Declared[v.ID] = v.Input != nil
		st := r.stands[v.ID]
		if v.Input == nil || st == nil || st.status == nil {
			continue
		}
		x := endOf(l, v.Input.Stand, st.status, r.cfg.Now())
		if x.IsZero() {
			continue
		}
		end := stands.Ending{ID: v.ID, File: v.File, End: x.At, SetIn: x.Pos.File, At: x.Pos.String(), ByDefault: x.By == manifest.ByDefault}
		if end.ByDefault {
			end.SetIn = v.File
		}
		if c := st.status.MonthlyCost; c != nil {
			end.Cost = fmt.Sprintf("%.2f %s", c.Amount, c.Currency)
		}
		e.Ends = append(e.Ends, end)
	}
	return e
}

// ApproveRemoval lets the destroy of a stand through the review gate: its removal pull request was
// merged by the reconciler at its end, as the repository's lifetime policy allows (by says so).
func (r *Reconciler) ApproveRemoval(id, by string) {
	if !r.cfg.RequireReview {
		return
	}
	r.revMu.Lock()
	defer r.revMu.Unlock()
	r.loadReviews()
	r.approveLocked(id, "", by)
	r.saveReviews()
}
