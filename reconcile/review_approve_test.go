package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// TestCtlApproveListsTheCommits: ctl approve releases a stand's whole change from what is applied,
// so it lists the commits that change the stand (its folder, not another stand's, not the
// repository's policies) and refuses more than one without All; one commit, or All, releases it.
func TestCtlApproveListsTheCommits(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(c *Config) { c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json" })
	h.mustCycle() // the first import, at h001
	port := func(id, p string) string {
		return strings.Replace(fakes.StandYML(id, ""), "cache: {}", "cache: {preferences: {port: "+p+"}}", 1)
	}
	h.src.Commit(map[string]string{fakes.StandFile("a"): port("a", "6390")})      // h002
	h.src.Commit(map[string]string{fakes.StandFile("b"): port("b", "6390")})      // h003
	h.src.Commit(map[string]string{".stands/lifetime.yml": "warn_before: 24h\n"}) // h004
	h.src.Commit(map[string]string{fakes.StandFile("a"): port("a", "6391")})      // h005
	h.mustCycle()
	ctx := context.Background()
	commits := func(ap Approval) string {
		var out []string
		for _, c := range ap.Commits {
			out = append(out, c.Commit)
		}
		return strings.Join(out, " ")
	}

	ap, err := h.r.ApproveChange(ctx, ApproveRequest{Stand: "local_a_dev", Commit: "h005", By: "ops", Why: "looked"})
	if !errors.Is(err, ErrSeveralCommits) || commits(ap) != "h005 h002" || !ap.Complete {
		t.Errorf("a's change of two commits: %q (complete %v), %v; want h005 h002 refused", commits(ap), ap.Complete, err)
	}
	if err != nil && !strings.Contains(err.Error(), "h005 by dev: change; h002 by dev: change") {
		t.Errorf("the refusal does not list the commits: %v", err)
	}
	ap, err = h.r.ApproveChange(ctx, ApproveRequest{Stand: "local_b_dev", Commit: "h005", By: "ops", Why: "looked"})
	if err != nil || commits(ap) != "h003" {
		t.Errorf("b's change of one commit: %q, %v", commits(ap), err)
	}
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 1 || h.eng.UpsOf("local_b_dev") != 2 {
		t.Errorf("after b's approval: a %d ups, b %d", h.eng.UpsOf("local_a_dev"), h.eng.UpsOf("local_b_dev"))
	}
	if _, err := h.r.ApproveChange(ctx, ApproveRequest{Stand: "local_a_dev", Commit: "h005", By: "ops", Why: "looked at both", All: true}); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 2 {
		t.Errorf("a after ctl approve --all: %d ups", h.eng.UpsOf("local_a_dev"))
	}

	// A stand made around review: its change starts at the commit that added it, not before (a
	// shared file changed just before is no part of it).
	h.src.Commit(map[string]string{"bases/notes.md": "shared\n"})                  // h006
	h.src.Commit(map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")}) // h007
	h.mustCycle()
	ap, err = h.r.ApproveChange(ctx, ApproveRequest{Stand: "local_c_dev", Commit: "h007", By: "ops", Why: "a new stand"})
	if err != nil || commits(ap) != "h007" {
		t.Errorf("c's creation: %q, %v; want h007 alone", commits(ap), err)
	}
}
