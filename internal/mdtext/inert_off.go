//go:build stands_inert_off

package mdtext

// A build with this tag renders repository strings as the reconciler did before Markup existed, so
// the rendering tests can be shown to fail without it (docs/architecture.md#rendering).
func init() { inert = false }
