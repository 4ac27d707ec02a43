package expiry

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
)

// testEnd is the end of the stand whose removal these tests merge.
var testEnd = time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)

// mergeForge is a forge whose merges fail with err; the rest of Forge is not asked here.
type mergeForge struct {
	Forge
	err error
}

func (f mergeForge) MergePullRequest(context.Context, int64, string, string) error { return f.err }

// ownRemoval is a repository whose removal branch is the reconciler's own.
type ownRemoval struct{ Repo }

func (ownRemoval) CheckRemoval(context.Context, string, string, string) (string, error) {
	return "", nil
}

// TestAFailedMergeTakesItsApprovalBack: the review gate hears of a removal the policy merges before
// the merge (the cycle the merge starts waits for it), and that it merged only once it did: a merge
// that fails takes the wait back.
func TestAFailedMergeTakesItsApprovalBack(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want []string
	}{
		{"merged", nil, []string{"merging local_x_dev", "merged local_x_dev"}},
		{"refused", errors.New("merge refused (HTTP 405)"), []string{"merging local_x_dev", "unmerged local_x_dev"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var heard []string
			w := New(Config{Branch: "main",
				Merging:  func(id, _ string) error { heard = append(heard, "merging "+id); return nil },
				Merged:   func(id string) { heard = append(heard, "merged "+id) },
				Unmerged: func(id string) { heard = append(heard, "unmerged "+id) }}, mergeForge{err: c.err}, ownRemoval{})
			defer w.Close()
			pr := stands.PullRequest{Index: 7, HeadSHA: "abc", HeadRef: Branch("local_x_dev", testEnd)}
			end := stands.Ending{ID: "local_x_dev", File: "stands/x/stand.yml", End: testEnd}
			if err := w.merge(context.Background(), pr, end, stands.Endings{}); !errors.Is(err, c.err) {
				t.Errorf("merge: %v, want %v", err, c.err)
			}
			if !slices.Equal(heard, c.want) {
				t.Errorf("the gate heard %v, want %v", heard, c.want)
			}
		})
	}
}
