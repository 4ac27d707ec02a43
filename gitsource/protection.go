package gitsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/stands"
)

// ErrCannotRead marks an API answer that the token may not read (401, 403).
var ErrCannotRead = errors.New("the token may not read it")

// Protection reads the protection Gitea applies to branch. The branch itself says which rule applies
// (Gitea's own choice among its rules: priority, then plain names before patterns) and the settings
// every reader of the branch sees; the rest of the rule Gitea shows only to the repository's
// administrators, so with a token of a writer the protection is Partial, saying so.
func (g *Gitea) Protection(ctx context.Context, branch string) (stands.Protection, error) {
	var b struct {
		Protected           bool     `json:"protected"`
		Rule                string   `json:"effective_branch_protection_name"`
		RequiredApprovals   int64    `json:"required_approvals"`
		EnableStatusCheck   bool     `json:"enable_status_check"`
		StatusCheckContexts []string `json:"status_check_contexts"`
	}
	if err := g.get(ctx, "branches/"+escapeSegments(branch), &b); err != nil {
		return stands.Protection{}, fmt.Errorf("read branch %s: %w", branch, err)
	}
	p := stands.Protection{Branch: branch, RequiredApprovals: b.RequiredApprovals, StatusCheck: b.EnableStatusCheck,
		StatusCheckContexts: b.StatusCheckContexts}
	if !b.Protected {
		return stands.Protection{Branch: branch}, nil
	}
	// Gitea names the rule to administrators only.
	const partial = "the reconciler's token cannot read the rule: Gitea shows a branch protection rule only to the repository's " +
		"administrators (give the reconciler's user the Admin permission on the repository, or check the rule by hand)"
	if b.Rule == "" {
		p.Rule, p.Partial = "?", partial
		return p, nil
	}
	p.Rule = b.Rule
	var r struct {
		EnablePush              bool  `json:"enable_push"`
		EnablePushWhitelist     bool  `json:"enable_push_whitelist"`
		RequiredApprovals       int64 `json:"required_approvals"`
		DismissStaleApprovals   bool  `json:"dismiss_stale_approvals"`
		IgnoreStaleApprovals    bool  `json:"ignore_stale_approvals"`
		BlockOnOutdatedBranch   bool  `json:"block_on_outdated_branch"`
		BlockAdminMergeOverride bool  `json:"block_admin_merge_override"`
	}
	err := g.get(ctx, "branch_protections/"+escapeSegments(p.Rule), &r)
	switch {
	case errors.Is(err, ErrCannotRead):
		p.Partial = partial
		return p, nil
	case err != nil:
		return stands.Protection{}, fmt.Errorf("read branch protection %s: %w", p.Rule, err)
	}
	p.StaleApprovalsDismissed = r.DismissStaleApprovals || r.IgnoreStaleApprovals
	p.BlockOutdatedBranch, p.BlockAdminMergeOverride = r.BlockOnOutdatedBranch, r.BlockAdminMergeOverride
	p.PushRestricted = !r.EnablePush || r.EnablePushWhitelist
	return p, nil
}

// get reads the repository's API resource at path into v.
func (g *Gitea) get(ctx context.Context, path string, v any) error {
	tok, err := g.token()
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	u := g.base + "/api/v1/repos/" + url.PathEscape(g.owner) + "/" + url.PathEscape(g.repo) + "/" + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+tok)
	req.Header.Set("Accept", "application/json")
	resp, err := g.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w (HTTP %d)", ErrCannotRead, resp.StatusCode)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: HTTP %d: %s", ErrUnavailable, resp.StatusCode, apiMessage(body))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, apiMessage(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	return nil
}

func escapeSegments(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// apiMessage is the message of a Gitea API error, at most one line of 200 bytes.
func apiMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &e)
	return mdtext.Plain(e.Message, 200)
}
