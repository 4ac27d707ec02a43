// Package localserver runs the real servers the reconciler talks to — Gitea and Vault, as built by
// `make tools` — on 127.0.0.1 in a folder of their own, and waits until they answer. The tests
// (test/testenv) and the demo (cmd/stands-demo) start them the same way; this package returns
// errors and leaves failing to its caller.
package localserver
