package prplan

import (
	"fmt"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// A stand's lifetime is policy, not spec (docs/lifetime.md): a change of stand.expires or of the
// repository's lifetime policy changes no server, so no action shows it. The plan lists it on its
// own, and it is part of the plan's key, so an extension is planned and reviewed like any change.

// lifetimeChange is one stand whose end merging the pull request changes.
type lifetimeChange struct {
	ID, Before, After string
	past              bool // After lies in the past when planned: the stand would be expired at once
}

// endText is when a stand ends as a plan says it: absolute, so the comment stays true as it ages.
func endText(l manifest.Lifetime, s *manifest.Stand) string {
	e := l.ExpiryOf(s, time.Time{})
	switch {
	case s.Protect:
		return "never (protected)"
	case e.By == manifest.ByManifest:
		return e.At.UTC().Format("2006-01-02 15:04 UTC")
	case l.Default > 0 && !l.Required:
		return manifest.FormatLifetime(l.Default) + " after it is first applied (the repository's default)"
	}
	return "never"
}

// lifetimeChanges lists the stands the merge keeps or adds whose end it changes, in the merge's
// order. A stand it removes or leaves invalid has its own row.
func lifetimeChanges(main, merged *judge.Evaluation, now time.Time) []lifetimeChange {
	var out []lifetimeChange
	for _, v := range merged.Verdicts {
		if v.Input == nil {
			continue
		}
		s := v.Input.Stand
		c := lifetimeChange{ID: v.ID, Before: "not declared", After: endText(merged.Lifetime, s)}
		if in := main.Input(v.ID); in != nil {
			c.Before = endText(main.Lifetime, in.Stand)
		}
		if c.Before == c.After || (c.Before == "not declared" && c.After == "never" && merged.Lifetime.At == nil) {
			continue // without a policy, a new stand that never ends is the plan's create row alone
		}
		c.past = !s.Protect && !s.Expires.IsZero() && !s.Expires.After(now)
		out = append(out, c)
	}
	return out
}

// policyChanges lists the settings of the lifetime policy the merge changes, as "setting: before →
// after".
func policyChanges(main, merged manifest.Lifetime) []string {
	life := func(v time.Duration) string {
		if v == 0 {
			return "none"
		}
		return manifest.FormatLifetime(v)
	}
	var out []string
	for _, c := range []struct{ name, before, after string }{
		{"default", life(main.Default), life(merged.Default)},
		{"maximum", life(main.Maximum), life(merged.Maximum)},
		{"required", fmt.Sprint(main.Required), fmt.Sprint(merged.Required)},
		{"warn_before", life(main.Warn()), life(merged.Warn())},
		{"merge_at_expiry", fmt.Sprint(main.MergeAtExpiry), fmt.Sprint(merged.MergeAtExpiry)},
	} {
		if c.before != c.after {
			out = append(out, c.name+": "+c.before+" → "+c.after)
		}
	}
	return out
}

// lifetimeSection is the plan comment's part on lifetimes; empty when the merge changes none.
func (p *prPlan) lifetimeSection() mdtext.Markup {
	if len(p.lifetimes) == 0 && len(p.policy) == 0 {
		return ""
	}
	var d mdtext.Doc
	d.Add("\n#### Lifetimes\n\nWhen stands end: a stand reaching its end gets a pull request that removes it.\n\n")
	for _, c := range p.policy {
		d.F("- lifetime policy %s: %s\n", manifest.LifetimeFile, c)
	}
	if len(p.lifetimes) > 0 {
		if len(p.policy) > 0 {
			d.Add("\n")
		}
		d.F("| stand | end on %s | end once merged |\n|---|---|---|\n", p.branch)
		for _, c := range p.lifetimes {
			after := mdtext.Code(c.After)
			if c.past {
				after = mdtext.F("%s (already past: it is expired once merged)", c.After)
			}
			d.Add(mdtext.Row(c.ID, c.Before, after))
		}
	}
	return d.Markup()
}

// ends is what a successful plan changes of the stands' own ends (manifest.EndPrint) and of the
// lifetime policy (manifest.Policy.Print, under manifest.LifetimeFile): the review gate lets an end
// take effect only where an approved plan showed it (docs/lifetime.md#only-reviewed-ends-take-effect).
// Like changes, a change this head's earlier plan showed and main now holds stays.
func ends(j *judgement, was plannedHead, now time.Time) map[string]plannedChange {
	out := map[string]plannedChange{}
	same := was.Head == j.pr.HeadSHA
	add := func(id, from, to string) {
		if from == to {
			return
		}
		c := plannedChange{From: from, Print: to, Since: now}
		if old, ok := was.Ends[id]; ok && same && old.From == from && old.Print == to {
			c.Since = old.Since
		}
		out[id] = c
	}
	add(manifest.LifetimeFile, manifest.ReadPolicy(j.main.Files).Print(), manifest.ReadPolicy(j.merged.Files).Print())
	for _, v := range j.merged.Verdicts {
		if v.Input == nil {
			continue
		}
		from := ""
		if in := j.main.Input(v.ID); in != nil {
			from = manifest.EndPrint(in.Stand)
		}
		add(v.ID, from, manifest.EndPrint(v.Input.Stand))
	}
	if same {
		for id, c := range was.Ends {
			if _, ok := out[id]; !ok {
				out[id] = c
			}
		}
	}
	return out
}
