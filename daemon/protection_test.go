package daemon

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// protectionIs is a tracked branch whose protection is p.
type protectionIs struct{ p stands.Protection }

func (r *protectionIs) Protection(context.Context, string) (stands.Protection, error) {
	return r.p, nil
}

// TestProtectionSetsRequiredApprovals: each read of the tracked branch's protection hands its
// required approvals to the review gate (docs/pr-workflow.md#four-eyes), a rule raised later too.
func TestProtectionSetsRequiredApprovals(t *testing.T) {
	r := &protectionIs{stands.Protection{Branch: "main", Rule: "main", RequiredApprovals: 2}}
	var approvals atomic.Int64
	w := newProtectionWatch(r, "main", testenv.Logger(t), prometheus.NewRegistry(), func(_, _ []string) {}, approvals.Store)
	for _, want := range []int64{2, 3} {
		r.p.RequiredApprovals = want
		if !w.once(t.Context()) {
			t.Fatal("the protection was not read")
		}
		if got := approvals.Load(); got != want {
			t.Errorf("required approvals %d, want the rule's %d", got, want)
		}
	}
}
