package stands

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// Snapshot is the tracked branch (or a pull request's head) at one commit. Files is read-only.
type Snapshot struct {
	Commit string // the commit read
	// Source is the newest commit that is not one of the reconciler's own status commits: what the
	// stands were declared by. Status commits move Commit, never Source.
	Source  string
	Message string // of Source
	Author  string // of Source
	Time    time.Time
	Files   fs.FS
}

// ErrTooLarge marks a commit whose files are more than a snapshot holds (MaxTreeSize), or whose
// Git objects are more than a fetch takes.
var ErrTooLarge = errors.New("repository too large")

// TooLarge is an ErrTooLarge naming the limit passed. Its text is the reconciler's own (sizes and
// counts), never the repository's content, so a pull request's status may show it.
type TooLarge struct{ Limit string }

func (e *TooLarge) Error() string        { return ErrTooLarge.Error() + ": " + e.Limit }
func (e *TooLarge) Is(target error) bool { return target == ErrTooLarge }

// MaxTreeSize bounds what a snapshot holds in memory: a repository of 1,000 stands is a few
// megabytes; a commit that holds more (a pull request's head, say) is refused as a whole.
const MaxTreeSize = 64 << 20

// Status paths: the only files the reconciler writes. A commit of its identity touching only these is
// its own and never triggers work.
const (
	StatusDir  = "status"
	StatusFile = "STATUS.md"
)

// IsStatusPath reports whether p is written by the reconciler only.
func IsStatusPath(p string) bool {
	return p == StatusFile || strings.HasPrefix(p, StatusDir+"/")
}

// StatusPath is the status file of a stand.
func StatusPath(id string) string { return StatusDir + "/" + id + ".json" }

// PullRequest is an open pull request as its plan needs it.
type PullRequest struct {
	Index   int64
	Title   string
	Author  string // the user who opened it: an approval of theirs is not a review
	HeadSHA string
	HeadRef string // the branch
	// SameRepo is false for a pull request from a fork: it gets no plan, since plans run with
	// production credentials (docs/pr-workflow.md).
	SameRepo bool
	URL      string
}

// Ref is the git ref Gitea keeps for the pull request's head.
func (p PullRequest) Ref() string { return fmt.Sprintf("refs/pull/%d/head", p.Index) }

// CommitState is a commit status's state, as Gitea names it.
type CommitState string

// Commit status states.
const (
	StatePending CommitState = "pending"
	StateSuccess CommitState = "success"
	StateFailure CommitState = "failure"
	StateError   CommitState = "error"
)

// Review is a review of a pull request, as the forge keeps it.
type Review struct {
	User   string
	State  ReviewState
	Commit string // the head it reviewed
	// Dismissed: taken back (by someone, or by a push when the branch's protection says so); Stale:
	// the pull request's head moved since.
	Dismissed, Stale bool
	// Official: the forge counts it towards the tracked branch's required approvals (Gitea: the
	// reviewer may write, or is on the protection's approvers list, when it was submitted).
	Official  bool
	Submitted time.Time
}

// ReviewState is a review's verdict, as Gitea names it.
type ReviewState string

// The verdicts that decide: an approval, and a request for changes, which withdraws its reviewer's
// earlier approvals.
const (
	Approved       ReviewState = "APPROVED"
	RequestChanges ReviewState = "REQUEST_CHANGES"
)

// A LogEntry is one commit of the tracked branch's first-parent history, and the paths it changes
// against its first parent: what ctl approve shows it releases.
type LogEntry struct {
	Commit  string   `json:"commit"`
	Author  string   `json:"author"`
	Subject string   `json:"subject"`
	Paths   []string `json:"-"`
}

// Contributors names who took part in a pull request's change, each with what they did: opened it,
// pushed to it, authored or committed one of its commits. By the forge's user name.
type Contributors map[string]string

// A Transition is one change of a stand, by its prints (judge.Print: what a plan shows and a review
// approves): From what it has ("" no stand: a create), To what it will have ("" a removal). A
// transition of an end (Authorisation.End, ReviewQuery.End) is between ends instead
// (manifest.EndPrint; for the repository's lifetime policy, manifest.Policy.Print).
type Transition struct{ From, To string }

// Unrecorded is the From of a stack applied before prints were recorded: no review leads from it.
const Unrecorded = "(no print recorded)"

// ChangeReview is what is known of the review of one transition of a stand.
type ChangeReview struct {
	Reviewed bool
	// Steps are the reviewed transitions that lead from its From to its To, in order: one, or a
	// chain of merges applied in one go.
	Steps []Authorisation
	Why   string // why it does not count as reviewed
}

// An Authorisation is one reviewed transition of a stand: what a merged pull request's successful
// plan showed, approved there by others. Each lets its transition through once (Key).
type Authorisation struct {
	Stand string
	// End: a transition of the stand's own end, or of the lifetime policy when Stand is
	// manifest.LifetimeFile, not of its spec.
	End bool
	Transition
	PR    int64
	Head  string // the head planned and approved
	Merge string // its merge commit, on the tracked branch
	By    string // the approvers
}

// Key names the authorisation among those used.
func (a Authorisation) Key() string {
	if a.End {
		return fmt.Sprintf("#%d end of %s %s>%s", a.PR, a.Stand, a.From, a.To)
	}
	return fmt.Sprintf("#%d %s %s>%s", a.PR, a.Stand, a.From, a.To)
}

// A ReviewQuery asks whether a stand's transition was reviewed (prplan.Planner.Reviewed).
type ReviewQuery struct {
	Stand string
	End   bool // of the stand's end, or of the lifetime policy (Authorisation.End)
	Transition
	// OnBranch says whether a merge commit is on the first-parent history of the commit to apply:
	// a merge the branch no longer holds (a reset, a force-push) authorises nothing.
	OnBranch func(ctx context.Context, merge string) (bool, error)
	// Used says whether an authorisation let its transition through already.
	Used func(key string) bool
}

// Author is who made a commit: its git author, and the forge's user of that address ("" when the
// forge knows none).
type Author struct {
	Commit      string
	Name, Email string
	Login       string
}

// The forge's refusals a removal pull request expects (package expiry): its branch is there, or a
// pull request from it is open, already.
var (
	ErrBranchExists = errors.New("the branch exists")
	ErrPullExists   = errors.New("a pull request from the branch is open")
)

// Ending is a declared stand's end, as its removal pull request needs it (package expiry).
type Ending struct {
	ID   string // the stand
	File string // its stand.yml: its folder is what the removal takes away
	End  time.Time
	// SetIn is the manifest that set the end and At its place (file:line:col); ByDefault: the
	// repository's default lifetime set it, counted from when the stand was first seen.
	SetIn, At string
	ByDefault bool
	Cost      string // monthly, "8.09 EUR"; "" when unknown
}

// Endings are the ends of a cycle's stands, with the lifetime policy that governs them.
type Endings struct {
	Commit   string          // the tracked branch's commit the stands were declared at
	Declared map[string]bool // every stand it declares: true where its manifest is valid
	Ends     []Ending        // the valid stands that end
	// WarnBefore: a removal pull request opens this long before an end; MergeAtEnd: the
	// reconciler merges it at the end (the policy's merge_at_expiry, set at PolicyAt).
	WarnBefore time.Duration
	MergeAtEnd bool
	PolicyAt   string
}
