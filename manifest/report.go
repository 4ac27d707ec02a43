package manifest

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Rule names the check a diagnostic comes from, so tests and tools can tell problems apart without
// matching message text.
const (
	RuleSyntax       = "syntax"       // not YAML, wrong shape, unknown or duplicate key
	RuleRequired     = "required"     // a required field is missing or empty
	RuleType         = "type"         // a field has the wrong type
	RuleIDPart       = "id-part"      // owner/project/env/node name not [a-z0-9-]+
	RuleDuplicateID  = "duplicate-id" // two stands with the same id
	RuleBase         = "base"         // from_dep_manifest missing, cyclic or outside the repository
	RuleRefProfile   = "ref-profile"  // node names an unknown profile
	RuleRefApp       = "ref-app"      // placement names an unknown app or instance
	RuleRefRegistry  = "ref-registry" // app names an unknown registry
	RulePlacement    = "placement"    // instance placed on no node or on several
	RuleFileMissing  = "file-missing" // a referenced file or package does not exist
	RuleSecret       = "secret"       // secret misuse or a secret that cannot be resolved
	RuleSecretPath   = "secret-path"  // a secret path that escapes the prefix
	RuleRender       = "render"       // a template fails to render
	RuleCloudInit    = "cloud-init"   // rendered cloud-init is not a #cloud-config YAML mapping
	RulePodYAML      = "pod-yaml"     // rendered Pod YAML does not parse or is not a Pod
	RuleConnection   = "connection"   // connection template does not render to a JSON object
	RuleConnName     = "connection-name"
	RuleUploadDest   = "upload-dest"   // upload destination not absolute or clashing
	RuleUploadMode   = "upload-mode"   // upload mode not an octal permission
	RulePortConflict = "port-conflict" // two instances on one node claim a host port
	RulePort         = "port"          // a role port is invalid or not published
	RuleImage        = "image"         // an image reference is empty or malformed
	RuleManifestName = "manifest-name" // a file under stands/ named like stand.yml but not it
	RuleServerName   = "server-name"   // two stands' nodes get the same server name
	RuleNameLength   = "name-length"   // a name too long for the label, unit, file or hostname it becomes
	RuleSymlink      = "symlink"       // a file or folder the stand needs is a symbolic link (internal/repofs)
	RuleSize         = "size"          // a file the stand needs is larger than repofs.MaxFileSize
	RuleMako         = "mako"          // a referenced file is a Stands Engine Mako template, not converted
	RuleLifetime     = "lifetime"      // stand.expires or the repository's lifetime policy (LifetimeFile)
)

// RuleDeprecated marks a warning: the manifest loads, in a form that should change.
const RuleDeprecated = "deprecated"

// Rules lists every rule; each has a fixture in testdata/rules.
var Rules = []string{
	RuleSyntax, RuleRequired, RuleType, RuleIDPart, RuleDuplicateID, RuleBase, RuleRefProfile, RuleRefApp,
	RuleRefRegistry, RulePlacement, RuleFileMissing, RuleSecret, RuleSecretPath, RuleRender, RuleCloudInit,
	RulePodYAML, RuleConnection, RuleConnName, RuleUploadDest, RuleUploadMode, RulePortConflict, RulePort,
	RuleImage, RuleManifestName, RuleServerName, RuleNameLength, RuleSymlink, RuleSize, RuleMako, RuleLifetime,
}

// Diagnostic is one problem found in a stand, with the place that caused it.
type Diagnostic struct {
	Pos  Pos
	Rule string
	Msg  string
}

func (d Diagnostic) String() string {
	return fmt.Sprintf("%s: %s [%s]", d.Pos, d.Msg, d.Rule)
}

// Report collects every independent problem so the user fixes them in one round. It is an error; its
// text never holds a secret value (see redactor).
type Report struct {
	Diags []Diagnostic
}

func (r *Report) Error() string {
	lines := make([]string, len(r.Diags))
	for i, d := range r.Diags {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// Has reports whether a diagnostic of the given rule exists.
func (r *Report) Has(rule string) bool {
	return slices.ContainsFunc(r.Diags, func(d Diagnostic) bool { return d.Rule == rule })
}

func (r *Report) add(d ...Diagnostic) { r.Diags = append(r.Diags, d...) }

// Add adds diagnostics found elsewhere (a render in another process) and sorts the report again.
func (r *Report) Add(d ...Diagnostic) {
	r.add(d...)
	r.normalize()
}

func (r *Report) addf(pos Pos, rule, format string, args ...any) {
	r.Diags = append(r.Diags, Diagnostic{Pos: pos, Rule: rule, Msg: fmt.Sprintf(format, args...)})
}

// err returns the report as an error, or nil when it is empty.
func (r *Report) err() error {
	if r == nil || len(r.Diags) == 0 {
		return nil
	}
	r.normalize()
	return r
}

// normalize sorts diagnostics by place and drops repeats (a base shared by several instances reports
// its problem once, not once per use).
func (r *Report) normalize() {
	for i := range r.Diags {
		// A check that knows only the line (a template engine's error, a line of rendered output)
		// points at its start: editors and CI annotations read file:line:col.
		if d := &r.Diags[i]; d.Pos.Line > 0 && d.Pos.Col == 0 {
			d.Pos.Col = 1
		}
	}
	slices.SortStableFunc(r.Diags, func(a, b Diagnostic) int {
		return cmp.Or(cmp.Compare(a.Pos.File, b.Pos.File), cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
	})
	r.Diags = slices.Compact(r.Diags)
}

// redactor removes secret values from text that might echo them: parser errors of rendered content
// may quote the offending value, and yaml.v3 quotes long values as their first seven characters
// followed by "...". Every report built from rendered content passes through it, as a second line of
// defence behind messages that name places, never values.
type redactor struct {
	values []string
	added  map[string]bool
}

// secrets registers every secret value of a set: placeholders and !secret-plain values are none, a
// message may show them.
func (r *redactor) secrets(s Secrets) {
	for ref, v := range s.values {
		if !s.placeholder[ref] && !ref.Plain {
			r.add(v)
		}
	}
}

// minRedact is the shortest secret replaced wherever it appears; shorter ones would blank out line
// numbers and words. truncated is yaml.v3's cut-off for values it quotes in errors.
const (
	minRedact = 4
	truncated = 7
)

// add registers a secret value together with the forms a message may quote it in: Go's %q and JSON
// escape quotes, backslashes and control characters.
func (r *redactor) add(v string) {
	if len(v) < minRedact || r.added[v] {
		return // a value many stands share is scrubbed once
	}
	if r.added == nil {
		r.added = map[string]bool{}
	}
	r.added[v] = true
	r.values = append(r.values, v)
	if q := strconv.Quote(v); q[1:len(q)-1] != v {
		r.values = append(r.values, q[1:len(q)-1])
	}
	if j, err := json.Marshal(v); err == nil && string(j[1:len(j)-1]) != v {
		r.values = append(r.values, string(j[1:len(j)-1]))
	}
	// Encoded forms a URL, a header or a config file may carry.
	for _, e := range []string{url.QueryEscape(v), url.PathEscape(v), base64.StdEncoding.EncodeToString([]byte(v)),
		base64.RawStdEncoding.EncodeToString([]byte(v)), base64.URLEncoding.EncodeToString([]byte(v))} {
		if e != v {
			r.values = append(r.values, e)
		}
	}
}

func (r *redactor) scrub(s string) string {
	if r == nil {
		return s
	}
	// Longest first: a secret that contains another must not be cut by the shorter one's replacement.
	values := slices.Clone(r.values)
	slices.SortFunc(values, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, v := range values {
		s = strings.ReplaceAll(s, v, "***")
		if len(v) > truncated {
			s = strings.ReplaceAll(s, v[:truncated]+"...", "***")
		}
	}
	return s
}

func (r *redactor) scrubReport(rep *Report) {
	for i := range rep.Diags {
		rep.Diags[i].Msg = r.scrub(rep.Diags[i].Msg)
	}
}
