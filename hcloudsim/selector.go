package hcloudsim

import (
	"fmt"
	"regexp"
	"strings"
)

// selector is a parsed Hetzner label selector: comma-separated requirements, all of which must hold.
// Supported, as the API documents them: k=v, k==v, k!=v, k (exists), !k (absent), k in (a,b),
// k notin (a,b).
type selector []requirement

type requirement struct {
	key    string
	op     string // "=", "!=", "exists", "!exists", "in", "notin"
	values []string
}

var labelKeyRE = regexp.MustCompile(`^([a-z0-9A-Z]([a-z0-9A-Z.-]{0,251}[a-z0-9A-Z])?/)?[a-z0-9A-Z]([a-z0-9A-Z._-]{0,61}[a-z0-9A-Z])?$`)
var labelValueRE = regexp.MustCompile(`^([a-z0-9A-Z]([a-z0-9A-Z._-]{0,61}[a-z0-9A-Z])?)?$`)

func parseSelector(s string) (selector, error) {
	var out selector
	for _, part := range splitTop(s) {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("empty requirement in label selector %q", s)
		}
		r, err := parseRequirement(part)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// splitTop splits on commas outside parentheses.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

func parseRequirement(p string) (requirement, error) {
	if k, ok := strings.CutPrefix(p, "!"); ok {
		k = strings.TrimSpace(k)
		if !labelKeyRE.MatchString(k) {
			return requirement{}, fmt.Errorf("invalid label key %q", k)
		}
		return requirement{key: k, op: "!exists"}, nil
	}
	for _, op := range []string{" notin ", " in "} {
		if k, rest, ok := strings.Cut(p, op); ok {
			k, rest = strings.TrimSpace(k), strings.TrimSpace(rest)
			if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
				return requirement{}, fmt.Errorf("%q: values must be in parentheses", p)
			}
			var vals []string
			for v := range strings.SplitSeq(rest[1:len(rest)-1], ",") {
				v = strings.TrimSpace(v)
				if !labelValueRE.MatchString(v) {
					return requirement{}, fmt.Errorf("invalid label value %q", v)
				}
				vals = append(vals, v)
			}
			if !labelKeyRE.MatchString(k) {
				return requirement{}, fmt.Errorf("invalid label key %q", k)
			}
			return requirement{key: k, op: strings.TrimSpace(op), values: vals}, nil
		}
	}
	for _, op := range []string{"!=", "==", "="} {
		if k, v, ok := strings.Cut(p, op); ok {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if !labelKeyRE.MatchString(k) || !labelValueRE.MatchString(v) {
				return requirement{}, fmt.Errorf("invalid label requirement %q", p)
			}
			if op == "==" {
				op = "="
			}
			return requirement{key: k, op: op, values: []string{v}}, nil
		}
	}
	if !labelKeyRE.MatchString(p) {
		return requirement{}, fmt.Errorf("invalid label key %q", p)
	}
	return requirement{key: p, op: "exists"}, nil
}

func (s selector) matches(labels map[string]string) bool {
	for _, r := range s {
		v, has := labels[r.key]
		switch r.op {
		case "=":
			if !has || v != r.values[0] {
				return false
			}
		case "!=":
			if has && v == r.values[0] {
				return false
			}
		case "exists":
			if !has {
				return false
			}
		case "!exists":
			if has {
				return false
			}
		case "in":
			if !has || !contains(r.values, v) {
				return false
			}
		case "notin":
			if has && contains(r.values, v) {
				return false
			}
		}
	}
	return true
}

func contains(l []string, v string) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

// validLabels checks labels as the API does on create and update.
func validLabels(labels map[string]string) error {
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) {
			return fmt.Errorf("invalid label key %q", k)
		}
		if !labelValueRE.MatchString(v) {
			return fmt.Errorf("invalid label value %q", v)
		}
	}
	return nil
}
