package manifest

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
)

// LifetimeFile is the repository's lifetime policy (docs/lifetime.md). A change to it is reviewed
// like any other, and a pull request's plan shows what it changes.
const LifetimeFile = ".stands/lifetime.yml"

// DefaultWarnBefore is how long before its expiry a stand's warning pull request opens when the
// policy names no time.
const DefaultWarnBefore = 24 * time.Hour

// Lifetime is the repository's lifetime policy. The zero value is a repository without the file:
// no default, no maximum, nothing required.
type Lifetime struct {
	// Default is the lifetime of a stand that declares no stand.expires, counted from when the
	// reconciler first saw it declared on the tracked branch (0: such a stand never expires).
	Default time.Duration
	// Maximum is how far from now a stand.expires may lie (0: any time).
	Maximum time.Duration
	// Required: every stand that is not protected declares stand.expires.
	Required bool
	// WarnBefore: the warning pull request opens this long before the expiry (DefaultWarnBefore).
	WarnBefore time.Duration
	// MergeAtExpiry: at expiry the reconciler merges its own warning pull request, a change the
	// repository approved by this setting (docs/lifetime.md#removal-at-the-end).
	MergeAtExpiry bool
	// At names each setting's place, for messages ("maximum" → .stands/lifetime.yml:2).
	At map[string]Pos
}

// Expiry is when a stand ends and what says so.
type Expiry struct {
	At time.Time // zero: never
	// By is what set it: ByManifest or ByDefault ("" when the stand never expires).
	By  string
	Pos Pos // of stand.expires, or of the policy's default
}

// What an expiry comes from.
const (
	ByManifest = "stand.expires"
	ByDefault  = "default"
)

// IsZero reports whether the stand never expires.
func (e Expiry) IsZero() bool { return e.At.IsZero() }

// ExpiryOf is when a stand ends under the policy: its stand.expires, else the default counted from
// since (when the stand was first seen; zero: not yet, so the default's expiry is not known).
// A protected stand never expires.
func (l Lifetime) ExpiryOf(s *Stand, since time.Time) Expiry {
	switch {
	case s == nil || s.Protect:
		return Expiry{}
	case !s.Expires.IsZero():
		return Expiry{At: s.Expires, By: ByManifest, Pos: s.ExpiresPos}
	case l.Default > 0 && !l.Required && !since.IsZero():
		return Expiry{At: since.Add(l.Default).UTC(), By: ByDefault, Pos: l.At["default"]}
	}
	return Expiry{}
}

// Warn is how long before an expiry its warning pull request opens.
func (l Lifetime) Warn() time.Duration {
	if l.WarnBefore > 0 {
		return l.WarnBefore
	}
	return DefaultWarnBefore
}

// ReadLifetime reads the repository's policy. A repository without LifetimeFile has the zero policy;
// a file that cannot be read or has a mistake is a report with file and line, and every stand is
// refused with it: a policy is not guessed.
func ReadLifetime(fsys fs.FS) (Lifetime, *Report) {
	return ReadPolicy(fsys).Lifetime()
}

// A Policy is the text of a repository's LifetimeFile, as one commit holds it. The review gate keeps
// the one in force (the last reviewed) and judges the tracked branch under it: a policy pushed
// around review takes no effect (docs/lifetime.md#only-reviewed-ends-take-effect).
type Policy struct {
	Data    []byte `json:"data,omitempty"`
	Present bool   `json:"present,omitempty"`
	// Unreadable says why the file is there but cannot be read (a symbolic link, too large).
	Unreadable string `json:"unreadable,omitempty"`
	Symlink    bool   `json:"symlink,omitempty"`
}

// ReadPolicy reads the repository's LifetimeFile.
func ReadPolicy(fsys fs.FS) Policy {
	data, err := fs.ReadFile(fsys, LifetimeFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Policy{}
	case err != nil:
		return Policy{Present: true, Unreadable: fsErr(err).Error(), Symlink: errors.Is(err, repofs.ErrSymlink)}
	}
	return Policy{Data: data, Present: true}
}

// Print names what the policy says, not how the file says it: two texts with the same settings (a
// comment, an order, a default written out) have one print, and a repository without the file the
// print "". A policy that cannot be read prints as its text's digest.
func (p Policy) Print() string {
	l, rep := p.Lifetime()
	switch {
	case !p.Present:
		return ""
	case p.Unreadable != "":
		return "unreadable: " + p.Unreadable
	case rep != nil:
		sum := sha256.Sum256(p.Data)
		return "invalid " + hex.EncodeToString(sum[:8])
	}
	var out []string
	for _, s := range []struct {
		name string
		v    time.Duration
	}{{"default", l.Default}, {"maximum", l.Maximum}} {
		if s.v > 0 {
			out = append(out, s.name+"="+FormatLifetime(s.v))
		}
	}
	if l.Required {
		out = append(out, "required")
	}
	if l.Warn() != DefaultWarnBefore {
		out = append(out, "warn_before="+FormatLifetime(l.Warn()))
	}
	if l.MergeAtExpiry {
		out = append(out, "merge_at_expiry")
	}
	return strings.Join(out, " ")
}

// Lifetime parses the policy, as ReadLifetime does the file.
func (p Policy) Lifetime() (Lifetime, *Report) {
	var l Lifetime
	rep := &Report{}
	at := Pos{File: LifetimeFile, Line: 1, Col: 1}
	switch {
	case !p.Present:
		return l, nil
	case p.Symlink:
		rep.addf(at, RuleSymlink, "%s", p.Unreadable)
		return l, rep
	case p.Unreadable != "":
		rep.addf(at, RuleLifetime, "read the lifetime policy: %s", p.Unreadable)
		return l, rep
	}
	root, diags := parseYAML(LifetimeFile, p.Data, false)
	rep.add(diags...)
	if root == nil || len(diags) > 0 {
		return l, rep
	}
	d := &decoder{rep: rep}
	d.fields(root, LifetimeFile, "default", "maximum", "required", "warn_before", "merge_at_expiry")
	l.At = map[string]Pos{}
	for _, f := range root.fields {
		l.At[f.key] = f.value.pos
	}
	l.Default = d.duration(root.get("default"), "default")
	l.Maximum = d.duration(root.get("maximum"), "maximum")
	l.WarnBefore = d.duration(root.get("warn_before"), "warn_before")
	l.Required = d.boolean(root.get("required"), "required")
	l.MergeAtExpiry = d.boolean(root.get("merge_at_expiry"), "merge_at_expiry")
	if l.Maximum > 0 && l.Default > l.Maximum {
		rep.addf(l.At["default"], RuleLifetime, "default %s is longer than maximum %s", FormatLifetime(l.Default), FormatLifetime(l.Maximum))
	}
	if len(rep.Diags) > 0 {
		return Lifetime{}, rep
	}
	return l, nil
}

// duration decodes a lifetime: whole numbers with units w, d, h, m (7d, 1d12h, 90m). Seconds are
// refused: no lifetime is that short.
func (d *decoder) duration(n *node, where string) time.Duration {
	if n == nil {
		return 0
	}
	v, err := ParseLifetime(n.value)
	if n.kind != kindScalar || err != nil {
		d.rep.addf(n.pos, RuleLifetime, "%s must be a lifetime such as 7d, 36h or 1d12h (units w, d, h, m)", where)
		return 0
	}
	return v
}

// ParseLifetime parses 7d, 36h, 1w2d, 90m: whole numbers, each with one of the units w, d, h, m, the
// largest first. It is positive.
func ParseLifetime(s string) (time.Duration, error) {
	units := []struct {
		u rune
		d time.Duration
	}{{'w', 7 * 24 * time.Hour}, {'d', 24 * time.Hour}, {'h', time.Hour}, {'m', time.Minute}}
	var total time.Duration
	rest, next := strings.TrimSpace(s), 0
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if i <= 0 {
			return 0, fmt.Errorf("lifetime %q: want a number then a unit (w, d, h, m)", s)
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n > 10_000 {
			return 0, fmt.Errorf("lifetime %q: %q is too large", s, rest[:i])
		}
		u := rune(rest[i])
		k := next
		for k < len(units) && units[k].u != u {
			k++
		}
		if k == len(units) {
			return 0, fmt.Errorf("lifetime %q: unit %q is not one of w, d, h, m in that order", s, string(u))
		}
		total += time.Duration(n) * units[k].d
		rest, next = rest[i+1:], k+1
	}
	if total <= 0 {
		return 0, fmt.Errorf("lifetime %q is not positive", s)
	}
	return total, nil
}

// FormatLifetime writes a duration as ParseLifetime reads it, to the minute (36h → 1d12h).
func FormatLifetime(v time.Duration) string {
	if v < time.Minute {
		return "0m"
	}
	var b strings.Builder
	for _, u := range []struct {
		s string
		d time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}} {
		if n := v / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.s)
			v -= n * u.d
		}
	}
	return b.String()
}

// expires decodes stand.expires: an RFC 3339 date-time with its zone (docs/lifetime.md#declaring-an-end
// says why a date-time and not a duration).
func (d *decoder) expires(n *node, s *Stand) {
	if n == nil {
		return
	}
	s.ExpiresPos = n.pos
	t, err := time.Parse(time.RFC3339, n.value)
	if n.kind != kindScalar || err != nil {
		d.rep.addf(n.pos, RuleLifetime, "stand.expires must be a date-time with its zone, such as 2026-12-24T18:00:00Z or 2026-12-24T18:00:00+03:00")
		return
	}
	s.Expires = t.UTC()
}

// check refuses what the policy forbids of one stand; now is when it is judged.
func (l Lifetime) check(s *Stand, now time.Time, rep *Report) {
	policy := func(key string) string {
		if p, ok := l.At[key]; ok {
			return p.String()
		}
		return LifetimeFile
	}
	switch {
	case s.Protect && !s.Expires.IsZero():
		rep.addf(s.ExpiresPos, RuleLifetime, "a protected stand never expires: remove stand.expires, or stand.protect to let it expire")
	case s.Protect:
	case s.Expires.IsZero() && l.Required:
		rep.addf(s.Pos, RuleLifetime, "stand.expires is required by %s: declare when this stand ends, such as expires: %s",
			policy("required"), now.Add(min(cmp.Or(l.Default, week), cmp.Or(l.Maximum, week))).UTC().Truncate(time.Hour).Format(time.RFC3339))
	case !s.Expires.IsZero() && l.Maximum > 0 && s.Expires.Sub(now) > l.Maximum:
		rep.addf(s.ExpiresPos, RuleLifetime, "stand.expires %s is more than %s from now, the repository's maximum (%s): the latest it may be now is %s",
			s.Expires.Format(time.RFC3339), FormatLifetime(l.Maximum), policy("maximum"), now.Add(l.Maximum).UTC().Truncate(time.Minute).Format(time.RFC3339))
	}
}

const week = 7 * 24 * time.Hour

// Describe says in words when a stand ends, judged at now: what validate prints.
func (l Lifetime) Describe(s *Stand, now time.Time) string {
	switch e := l.ExpiryOf(s, time.Time{}); {
	case s.Protect:
		return "never expires: it is protected"
	case e.By == ByManifest && !e.At.After(now):
		return fmt.Sprintf("expired at %s, %s ago", e.At.Format(time.RFC3339), FormatLifetime(now.Sub(e.At)))
	case e.By == ByManifest:
		return fmt.Sprintf("expires at %s, in %s", e.At.Format(time.RFC3339), FormatLifetime(e.At.Sub(now)))
	case l.Default > 0 && !l.Required:
		return fmt.Sprintf("expires %s after the reconciler first sees it on the tracked branch (the repository's default, %s)",
			FormatLifetime(l.Default), l.At["default"])
	}
	return "never expires"
}

// ExpiresKey is what a manifest's text says of stand.expires, as written ("" when nothing): what
// changes where a commit set a stand's end.
func ExpiresKey(file string, data []byte) string {
	if data == nil {
		return ""
	}
	root, diags := parseYAML(file, data, true)
	if root == nil || len(diags) > 0 {
		return "\x00unreadable"
	}
	if n := root.get("stand").get("expires"); n != nil {
		return n.value
	}
	return ""
}

// EndPrint names a stand's own end as the review gate compares it: "protected" (it never ends),
// its stand.expires in UTC, or "" when it declares none (the policy's default is its end).
func EndPrint(s *Stand) string {
	switch {
	case s.Protect:
		return EndProtected
	case !s.Expires.IsZero():
		return s.Expires.UTC().Format(time.RFC3339)
	}
	return ""
}

// EndProtected is the EndPrint of a protected stand.
const EndProtected = "protected"

// WithEnd is a copy of s whose own end is the one print names (EndPrint's), declared at pos: the
// end in force where the tracked branch asks for another that no review let through.
func WithEnd(s *Stand, print string, pos Pos) (*Stand, error) {
	c := *s
	c.Protect, c.Expires, c.ExpiresPos = print == EndProtected, time.Time{}, pos
	if print != "" && print != EndProtected {
		t, err := time.Parse(time.RFC3339, print)
		if err != nil {
			return nil, fmt.Errorf("parse the end in force %q: %w", print, err)
		}
		c.Expires = t
	}
	return &c, nil
}
