package daemon

import (
	"github.com/stands-engine/stands-reconciler/expiry"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// Forge is the code forge's API, all the daemon's parts use of it: commit statuses and file links
// (reconcile), pull request plans and reviews (prplan), the removal pull requests (expiry) and the
// tracked branch's protection (the safeguards' watch). Gitea is behind it (gitsource.Gitea, made in
// Settings.forge); a second forge is a type of its own implementing it, made there
// (docs/architecture.md#where-do-i-add).
type Forge interface {
	reconcile.Forge
	prplan.Forge
	expiry.Forge
	ProtectionReader
}

var _ Forge = (*gitsource.Gitea)(nil)

// The review gate reads the tracked branch's history from the source (reconcile.History): without
// it, every reviewed change would be held.
var _ reconcile.History = (*gitsource.Source)(nil)

// ctl approve lists the commits a change holds from the source (reconcile.Log): without it, every
// approval would need --all.
var _ reconcile.Log = (*gitsource.Source)(nil)
