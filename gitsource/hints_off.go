//go:build stands_hints_off

package gitsource

// A build with this tag triggers a cycle on every signed webhook delivery, as the reconciler did
// before deliveries were hints, so TestWebhookDeliveriesAreHints can be shown to fail without them.
const hintsOffBuild = true
