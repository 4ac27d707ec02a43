package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/safeguard"
	"github.com/stands-engine/stands-reconciler/stands"
)

// ProtectionInterval is how often the tracked branch's protection is read again: a rule an
// administrator weakens shows within it.
const ProtectionInterval = 10 * time.Minute

// ProtectionReader reads the tracked branch's protection (gitsource.Gitea).
type ProtectionReader interface {
	Protection(ctx context.Context, branch string) (stands.Protection, error)
}

// CheckProtection reads branch's protection and judges it against the safeguards the reconciler
// relies on (docs/pr-workflow.md#branch-protection).
func CheckProtection(ctx context.Context, r ProtectionReader, branch string) ([]safeguard.Finding, error) {
	p, err := r.Protection(ctx, branch)
	if err != nil {
		return nil, err
	}
	return safeguard.Check(p, prplan.PlanContext), nil
}

// protectionWatch reports the tracked branch's safeguards: in the log whenever what is known of them
// changes, in metrics, and in STATUS.md's header (through report).
type protectionWatch struct {
	r      ProtectionReader
	branch string
	log    *slog.Logger
	report func(missing, unknown []string)
	// approvals gets the rule's required approvals at each read (the review gate asks as many).
	approvals func(n int64)
	missing   *prometheus.GaugeVec
	read      prometheus.Gauge
	last      string
}

func newProtectionWatch(r ProtectionReader, branch string, log *slog.Logger, reg prometheus.Registerer, report func(missing, unknown []string), approvals func(int64)) *protectionWatch {
	return &protectionWatch{r: r, branch: branch, log: log, report: report, approvals: approvals,
		missing: promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{Name: "stands_branch_safeguard_missing",
			Help: "1 for each safeguard the tracked branch's protection lacks, 0 for each it has; a safeguard the token cannot read has no series."}, []string{"safeguard"}),
		read: promauto.With(reg).NewGauge(prometheus.GaugeOpts{Name: "stands_branch_protection_read",
			Help: "1 when the tracked branch's protection rule was read whole at the last check, 0 when only in part or not at all."})}
}

// run checks at once, then every ProtectionInterval, until ctx ends. A read that fails is tried
// again sooner: 15 s, doubling up to the interval (Gitea answers 500 for a repository it still
// thinks empty, just after the first push).
func (w *protectionWatch) run(ctx context.Context) {
	retry := 15 * time.Second
	for {
		wait := ProtectionInterval
		if w.once(ctx) {
			retry = 15 * time.Second
		} else {
			wait, retry = retry, min(2*retry, ProtectionInterval)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// once checks the protection and reports it; false when it could not be read.
func (w *protectionWatch) once(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	p, err := w.r.Protection(cctx, w.branch)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.read.Set(0)
			w.log.Warn("branch protection not read; what was known of it stays", "branch", w.branch, "err", err)
		}
		return false
	}
	w.approvals(p.RequiredApprovals)
	findings := safeguard.Check(p, prplan.PlanContext)
	missing, unknown := safeguard.Lacking(findings), safeguard.Unread(findings)
	for _, f := range findings {
		switch f.State {
		case safeguard.Missing:
			w.missing.WithLabelValues(f.Name).Set(1)
		case safeguard.Present:
			w.missing.WithLabelValues(f.Name).Set(0)
		default:
			w.missing.DeleteLabelValues(f.Name)
		}
	}
	if len(unknown) == 0 {
		w.read.Set(1)
	} else {
		w.read.Set(0)
	}
	w.report(missing, unknown)
	key := strings.Join(missing, ",") + "|" + strings.Join(unknown, ",")
	if key == w.last {
		return true
	}
	w.last = key
	for _, f := range findings {
		switch f.State {
		case safeguard.Missing:
			w.log.Warn("branch protection lacks a safeguard: a merge can apply what no reviewer approved", "branch", w.branch,
				"safeguard", f.Name, "allows", f.Why, "fix", f.Fix)
		case safeguard.Unknown:
			w.log.Warn("branch protection safeguard not known", "branch", w.branch, "safeguard", f.Name, "why", f.Why)
		}
	}
	if len(missing)+len(unknown) == 0 {
		w.log.Info("branch protection has every safeguard", "branch", w.branch, "safeguards", safeguard.Names)
	}
	return true
}

// ErrNoForge is CheckSettingsProtection's error when the settings give no Gitea API to read from.
var ErrNoForge = errors.New("no Gitea API (an http(s) repository or --gitea-url, and a token): the branch protection cannot be read")

// CheckSettingsProtection reads the tracked branch's protection with the API and token of s, as the
// daemon would (config check).
func (s *Settings) CheckSettingsProtection(ctx context.Context, env Env) ([]safeguard.Finding, error) {
	log := slog.New(slog.DiscardHandler)
	token, err := credential.Watch(env, "STANDS_GIT_TOKEN", log)
	if err != nil {
		return nil, err
	}
	defer token.Close()
	forge := s.forge(token, log)
	if forge == nil {
		return nil, ErrNoForge
	}
	return CheckProtection(ctx, forge, s.Branch)
}

// Ungated says why a daemon of these settings applies every change as it lands, reviewed or not
// (docs/pr-workflow.md#apply-only-what-was-reviewed); "" when its review gate is on. What Open
// finds later (a token the API refuses) is logged there.
func (s *Settings) Ungated(env Env) string {
	switch {
	case !s.RequireReview:
		return "--require-review=false"
	case s.giteaAPI() == "":
		return "no Gitea API to read reviews in: a local or SSH repository without --gitea-url"
	case env("STANDS_GIT_TOKEN_FILE") == "" && env("STANDS_GIT_TOKEN") == "":
		return "no STANDS_GIT_TOKEN for the Gitea API"
	}
	return ""
}
