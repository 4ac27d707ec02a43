//go:build !stands_pull_unfiltered

package gitsource

// unfilteredBuild is the stands_pull_unfiltered build's control (pull_unfiltered.go); not this one.
const unfilteredBuild = false
