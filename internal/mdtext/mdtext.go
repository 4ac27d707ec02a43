// Package mdtext is the one layer that renders what the reconciler writes where people read it in
// Gitea — STATUS.md, pull request plan comments, commit status descriptions: Markup that only the
// reconciler writes, with every value from a repository or a commit inert inside it (markup.go), and
// the shortening of commits, lines and messages.
package mdtext

import (
	"strings"
	"unicode/utf8"
)

// Short is a commit's first 12 characters, as the status table and the plan comment show it.
func Short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// FirstLine is s up to its first line break, at most 160 bytes.
func FirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) <= 160 {
		return line
	}
	return Truncate(line, 160-len("…"))
}

// Truncate cuts s to at most n bytes on a rune boundary and marks the cut with "…" (3 bytes more).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
