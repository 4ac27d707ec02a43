package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Pos is a place in a repository file. Line and Col are 1-based; zero means unknown.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	switch {
	case p.Line > 0 && p.Col > 0:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	case p.Line > 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	default:
		return p.File
	}
}

type kind uint8

const (
	kindNull kind = iota
	kindScalar
	kindMap
	kindSeq
	kindSecret
)

func (k kind) String() string {
	return [...]string{"null", "scalar", "mapping", "sequence", "secret"}[k]
}

// node is a YAML value that remembers the file and line it came from, so that errors found after
// from_dep_manifest merged several files still point at the file that declared the value.
type node struct {
	kind   kind
	pos    Pos
	tag    string // resolved YAML tag of a scalar: !!str, !!int, !!bool, !!float
	value  string
	secret SecretRef
	fields []field
	items  []*node
}

type field struct {
	key    string
	keyPos Pos
	value  *node
}

func (n *node) get(key string) *node {
	if n == nil || n.kind != kindMap {
		return nil
	}
	for _, f := range n.fields {
		if f.key == key {
			return f.value
		}
	}
	return nil
}

// maxNodes bounds alias expansion so a "billion laughs" document fails instead of eating memory.
const maxNodes = 100_000

// parseYAML reads one YAML document into a node tree. Errors are diagnostics with file:line.
func parseYAML(file string, data []byte, allowSecrets bool) (*node, []Diagnostic) {
	if pos, ok := invalidUTF8(data); !ok {
		// yaml.v3 reports these without a place, or at the wrong one.
		pos.File = file
		return nil, []Diagnostic{{Pos: pos, Rule: RuleSyntax, Msg: "invalid UTF-8: YAML files must be UTF-8 text"}}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &node{kind: kindMap, pos: Pos{File: file, Line: 1, Col: 1}}, nil
		}
		line := yamlErrLine(err, data)
		if tab, ok := indentTab(data, line+1); ok {
			tab.File = file
			return nil, []Diagnostic{{Pos: tab, Rule: RuleSyntax, Msg: "a tab in the indentation: YAML indents with spaces only (" + yamlErrText(err) + ")"}}
		}
		return nil, []Diagnostic{{Pos: Pos{File: file, Line: line, Col: firstCol(data, line)}, Rule: RuleSyntax, Msg: yamlErrText(err)}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, []Diagnostic{{Pos: Pos{File: file, Line: extra.Line, Col: max(1, extra.Column)}, Rule: RuleSyntax, Msg: "more than one YAML document; a manifest is a single document"}}
	}
	c := &converter{file: file, allowSecrets: allowSecrets}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return &node{kind: kindMap, pos: Pos{File: file, Line: 1}}, nil
		}
		root = root.Content[0]
	}
	n := c.convert(root, 0)
	return n, c.diags
}

// yamlErrLine finds the line of a yaml.v3 error. yaml.v3 reports parser errors ("did not find
// expected ...") at the 0-based line of the construct they are in, and scanner errors 1-based; the
// result is clamped to the document so a position always exists.
func yamlErrLine(err error, data []byte) int {
	var line int
	msg := err.Error()
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i:], "line %d", &line)
	}
	if strings.Contains(msg, "did not find expected") {
		line++
	}
	lines := bytes.Count(bytes.TrimRight(data, "\n"), []byte("\n")) + 1
	return max(1, min(line, lines))
}

// indentTab finds the first tab in a line's indentation up to line last: what yaml.v3 calls "found
// character that cannot start any token", or a tab "that violates indentation" a line too early.
func indentTab(data []byte, last int) (Pos, bool) {
	for i, l := range bytes.Split(data, []byte("\n")) {
		if i+1 > last {
			break
		}
		indent := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
		if col := bytes.IndexByte(indent, '\t'); col >= 0 {
			return Pos{Line: i + 1, Col: col + 1}, true
		}
	}
	return Pos{}, false
}

// invalidUTF8 finds the first byte that is not UTF-8, as a line and column (in bytes, 1-based).
func invalidUTF8(data []byte) (Pos, bool) {
	if utf8.Valid(data) {
		return Pos{}, true
	}
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return Pos{Line: line, Col: col}, false
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col += size
		}
		i += size
	}
	return Pos{Line: line, Col: col}, false
}

// firstCol is the column of the first non-blank character of a line (1 for a blank line): where a
// diagnostic that knows only its line points.
func firstCol(data []byte, line int) int {
	lines := bytes.Split(data, []byte("\n"))
	if line < 1 || line > len(lines) {
		return 1
	}
	l := lines[line-1]
	return len(l) - len(bytes.TrimLeft(l, " \t")) + 1
}

// yamlErrText drops yaml.v3's "yaml: line N:" prefix; the line is already in the position.
func yamlErrText(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.HasPrefix(msg, "line ") {
		if i := strings.Index(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
	}
	return msg
}

type converter struct {
	file         string
	allowSecrets bool
	count        int
	diags        []Diagnostic
}

func (c *converter) errorf(n *yaml.Node, rule, format string, args ...any) {
	c.diags = append(c.diags, Diagnostic{Pos: Pos{File: c.file, Line: n.Line, Col: n.Column}, Rule: rule, Msg: fmt.Sprintf(format, args...)})
}

func (c *converter) convert(y *yaml.Node, depth int) *node {
	c.count++
	pos := Pos{File: c.file, Line: y.Line, Col: y.Column}
	if c.count > maxNodes || depth > 200 {
		if c.count == maxNodes+1 || depth == 201 {
			c.errorf(y, RuleSyntax, "document too large or too deeply nested (aliases expand to more than %d values)", maxNodes)
		}
		return &node{kind: kindNull, pos: pos}
	}
	switch y.Kind {
	case yaml.AliasNode:
		if y.Alias == nil {
			return &node{kind: kindNull, pos: pos}
		}
		n := c.convert(y.Alias, depth+1)
		return n
	case yaml.ScalarNode:
		tag := y.ShortTag()
		if y.Tag == "!secret" || y.Tag == "!secret-plain" {
			if !c.allowSecrets {
				c.errorf(y, RuleSecret, "%s is not allowed in this file; secrets belong in stand.yml or a base manifest", y.Tag)
				return &node{kind: kindNull, pos: pos}
			}
			ref, err := ParseSecretRef(y.Value)
			if err != nil {
				c.errorf(y, RuleSecretPath, "%v", err)
				return &node{kind: kindNull, pos: pos}
			}
			ref.Plain = y.Tag == "!secret-plain"
			return &node{kind: kindSecret, pos: pos, secret: ref}
		}
		if strings.HasPrefix(y.Tag, "!") && !strings.HasPrefix(y.Tag, "!!") {
			c.errorf(y, RuleSyntax, "unknown tag %s (only !secret and !secret-plain are understood)", y.Tag)
			return &node{kind: kindNull, pos: pos}
		}
		if tag == "!!null" {
			return &node{kind: kindNull, pos: pos}
		}
		return &node{kind: kindScalar, pos: pos, tag: tag, value: y.Value}
	case yaml.MappingNode:
		if y.Tag == "!secret" {
			c.errorf(y, RuleSecret, "!secret applies to a single name, not to a mapping")
		}
		n := &node{kind: kindMap, pos: pos}
		seen := map[string]int{}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k, v := y.Content[i], y.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				c.errorf(k, RuleSyntax, "YAML merge keys (<<) are not supported; use from_dep_manifest")
				continue
			}
			if k.Kind != yaml.ScalarNode {
				c.errorf(k, RuleSyntax, "mapping keys must be plain strings")
				continue
			}
			if line, dup := seen[k.Value]; dup {
				c.errorf(k, RuleSyntax, "duplicate key %q (first at line %d)", k.Value, line)
				continue
			}
			seen[k.Value] = k.Line
			n.fields = append(n.fields, field{key: k.Value, keyPos: Pos{File: c.file, Line: k.Line, Col: k.Column}, value: c.convert(v, depth+1)})
		}
		return n
	case yaml.SequenceNode:
		if y.Tag == "!secret" {
			c.errorf(y, RuleSecret, "!secret applies to a single name, not to a list")
		}
		n := &node{kind: kindSeq, pos: pos}
		for _, it := range y.Content {
			n.items = append(n.items, c.convert(it, depth+1))
		}
		return n
	}
	return &node{kind: kindNull, pos: pos}
}

// mergeNodes applies the from_dep_manifest rule: mappings merge deeply with the dependent winning, keys
// new in the dependent are appended after the base's (so the order of apps is preserved), and anything
// else — lists included — is replaced whole.
func mergeNodes(base, dep *node) *node {
	if base == nil {
		return dep
	}
	if dep == nil {
		return base
	}
	if base.kind != kindMap || dep.kind != kindMap {
		return dep
	}
	out := &node{kind: kindMap, pos: dep.pos, fields: make([]field, 0, len(base.fields)+len(dep.fields))}
	out.fields = append(out.fields, base.fields...)
	for _, f := range dep.fields {
		replaced := false
		for i := range out.fields {
			if out.fields[i].key == f.key {
				out.fields[i] = field{key: f.key, keyPos: f.keyPos, value: mergeNodes(out.fields[i].value, f.value)}
				replaced = true
				break
			}
		}
		if !replaced {
			out.fields = append(out.fields, f)
		}
	}
	return out
}
