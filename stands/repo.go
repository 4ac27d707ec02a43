package stands

import (
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

// ErrTooLarge marks a commit whose files are more than a snapshot holds (MaxTreeSize).
var ErrTooLarge = errors.New("repository too large")

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
