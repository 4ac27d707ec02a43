// Package bench measures the reconciler at scale against the real Pulumi CLI, Gitea and Vault and
// hcloudsim (`make bench`, build tag bench; not part of `make test`). It writes bench/results.md
// and the results section of docs/performance.md. How its 1,000 stacks are made, and how they are
// checked against stacks the CLI made, is in docs/performance.md.
package bench
