//go:build stands_pull_unfiltered

package gitsource

// A build with this tag fetches a pull request's head whole, its large files too, and keeps it in
// memory without checking sizes first, as go-git's own fetch into its memory store did (the tracked
// branch, within TrackedLimits, comes whole too): the control of the fault case "pull requests of
// large files" (bench/faults_large_test.go), which shows its RSS sampling sees that (PullLimits.control).
const unfilteredBuild = true
