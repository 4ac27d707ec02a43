package stands

// Protection is the forge's protection of the tracked branch, as far as the reconciler's token could
// read it: the rule that applies to the branch (the forge's own choice among its rules), and the
// settings of it the reconciler relies on.
type Protection struct {
	Branch string
	Rule   string // the rule that applies; "" when none does
	// Partial says why only part of the rule was read ("" when all of it was). Then only
	// RequiredApprovals, StatusCheck and StatusCheckContexts are known.
	Partial             string
	RequiredApprovals   int64
	StatusCheck         bool
	StatusCheckContexts []string // patterns
	// StaleApprovalsDismissed: a push after an approval dismisses it, or keeps it from counting.
	StaleApprovalsDismissed bool
	BlockOutdatedBranch     bool
	BlockAdminMergeOverride bool
	// PushRestricted: nobody pushes to the branch, or only those on an allow-list.
	PushRestricted bool
}
