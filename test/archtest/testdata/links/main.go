// see docs/page.md#the-reconciler-run---once and docs/page.md#twice-1, docs/page.md#not-a-heading,
// docs/gone.md, docs/page.md#nowhere
package main
