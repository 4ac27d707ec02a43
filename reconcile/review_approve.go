package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// ctl approve releases a stand's whole pending change, from what is applied to what the named
// commit holds: every commit between, not only the one named (docs/pr-workflow.md#ctl-approve). So
// it lists them, and refuses a change made of more than one commit until the operator says they
// looked at all (All).

// Log lists the tracked branch's first-parent history (gitsource.Source.FirstParents).
type Log interface {
	FirstParents(ctx context.Context, tip, since, added string, max int) ([]stands.LogEntry, bool, error)
}

// maxApproveLog bounds the commits ctl approve lists.
const maxApproveLog = 50

// ApproveRequest is what ctl approve asks: release Stand's unreviewed change at Commit.
type ApproveRequest struct {
	Stand, Commit string
	By, Why       string
	// All: release the change though it holds more than one commit.
	All bool
}

// Approval is what ctl approve released, or would: the commits of the tracked branch that change
// the stand since what is applied, newest first. Complete: listed back to what is applied (or to
// the stand's creation).
type Approval struct {
	Stand    string            `json:"stand"`
	Commits  []stands.LogEntry `json:"commits"`
	Complete bool              `json:"complete"`
}

// ErrSeveralCommits is the error of a ctl approve of a change made of more than one commit, without
// ApproveRequest.All.
var ErrSeveralCommits = errors.New("the change holds more than one commit")

// ApproveChange is Approve for an operator: it lists the commits the change holds, and releases it
// only when it holds one, or q.All says so.
func (r *Reconciler) ApproveChange(ctx context.Context, q ApproveRequest) (Approval, error) {
	ap := Approval{Stand: q.Stand}
	commit, ok := r.heldAt(q.Stand)
	if !ok {
		if err := r.elsewhere(q.Stand); err != nil {
			return ap, err
		}
		return ap, fmt.Errorf("%w %q with an unreviewed change", ErrUnknownStand, q.Stand)
	}
	var err error
	ap.Commits, ap.Complete, err = r.pending(ctx, q.Stand, commit)
	switch {
	case q.All:
	case err != nil:
		return ap, fmt.Errorf("the commits of %s's change cannot be listed (%v): look at the branch, then approve with --all", q.Stand, err)
	case q.Stand != manifest.LifetimeFile && (len(ap.Commits) > 1 || !ap.Complete):
		more := ""
		if !ap.Complete {
			more = fmt.Sprintf(" (and more: only the last %d commits were read)", maxApproveLog)
		}
		return ap, fmt.Errorf("%w: %s's change from what is applied to %s is made of %d commits%s: %s; look at each, then approve again with --all",
			ErrSeveralCommits, q.Stand, mdtext.Short(commit), len(ap.Commits), more, logLine(ap.Commits))
	}
	return ap, r.Approve(q.Stand, q.Commit, q.By, q.Why)
}

// elsewhere says, with replicas, which replica holds subject's changes when this one does not: the
// stand's holder, the leader for the lifetime policy.
func (r *Reconciler) elsewhere(subject string) error {
	c := r.claims
	switch {
	case c == nil:
		return nil
	case subject == manifest.LifetimeFile && !c.leader():
		return errors.New("the lifetime policy's changes are judged by the leader replica: run ctl approve on it (docs/replicas.md#the-review-gate)")
	case subject != manifest.LifetimeFile && !c.holds(subject):
		return fmt.Errorf("%s is operated by replica %s, not %s: run ctl approve on it (docs/replicas.md#the-review-gate)",
			subject, cmp.Or(c.owner(subject), "another"), c.self())
	}
	return nil
}

// heldAt is the commit of subject's held change: a stand's spec change, else its end, else the
// lifetime policy's.
func (r *Reconciler) heldAt(subject string) (string, bool) {
	if u, ok := r.gate.heldChange(subject); ok {
		return u.commit, true
	}
	if u, ok := r.gate.heldEnd(subject); ok {
		return u.commit, true
	}
	return "", false
}

// pending lists the commits up to commit that change subject since what is applied: for a stand,
// those changing its folder or any file outside every other stand's folder (a base, a shared file)
// but the repository's policies in .stands/; for the lifetime policy, those changing it.
func (r *Reconciler) pending(ctx context.Context, subject, commit string) ([]stands.LogEntry, bool, error) {
	log, ok := r.src.(Log)
	if !ok {
		return nil, false, errors.New("the repository's history cannot be read")
	}
	r.mu.Lock()
	var since, file string
	var others []string
	for id, st := range r.stands {
		if st.status == nil || st.status.File == "" {
			continue
		}
		if id == subject {
			file, since = st.status.File, st.status.LastSuccessfulCommit
			continue
		}
		others = append(others, path.Dir(st.status.File)+"/")
	}
	r.mu.Unlock()
	if subject == manifest.LifetimeFile {
		file, since = manifest.LifetimeFile, ""
	}
	if u, ok := r.gate.heldChange(subject); ok {
		file = cmp.Or(u.file, file) // a stand not made yet has no file in its status
		if u.from == "" {
			since = "" // a create: back to the commit that added it
		}
	}
	if file == "" {
		return nil, false, fmt.Errorf("the stand.yml of %s is not known", subject)
	}
	entries, complete, err := log.FirstParents(ctx, commit, since, file, maxApproveLog)
	if err != nil {
		return nil, false, err
	}
	var out []stands.LogEntry
	for _, e := range entries {
		if changes(e.Paths, subject, file, others) {
			out = append(out, e)
		}
	}
	return out, complete, nil
}

// changes says whether paths change subject, whose file is file, beside the other stands' folders.
func changes(paths []string, subject, file string, others []string) bool {
	for _, p := range paths {
		switch {
		case subject == manifest.LifetimeFile:
			if p == manifest.LifetimeFile {
				return true
			}
		case stands.IsStatusPath(p), strings.HasPrefix(p, ".stands/"):
			// The reconciler's status, and the repository's policies: no stand's content.
		case strings.HasPrefix(p, path.Dir(file)+"/"):
			return true
		default:
			other := false
			for _, o := range others {
				if strings.HasPrefix(p, o) {
					other = true
					break
				}
			}
			if !other {
				return true
			}
		}
	}
	return false
}

// logLine is commits in one line: "1a2b3c4d5e6f by alice: resize a; …".
func logLine(commits []stands.LogEntry) string {
	var out []string
	for _, c := range commits {
		out = append(out, fmt.Sprintf("%s by %s: %s", mdtext.Short(c.Commit), c.Author, c.Subject))
	}
	return strings.Join(out, "; ")
}
