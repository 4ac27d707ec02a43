//go:build !stands_hints_off

package gitsource

// hintsOffBuild is the stands_hints_off build's control (hints_off.go); not this one.
const hintsOffBuild = false
