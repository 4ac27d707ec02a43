// Package mako translates the Mako templates of the Stands Engine into the Go text/templates the
// manifest package renders: the subset its templates use — ${expr} with the filters h, u, trim, n and
// str, % if/elif/else/endif, % for/endfor, ## comments, <%doc> blocks, <% NAME = expression %>
// blocks, %% and a trailing backslash — over Python expressions of names, attributes, subscripts,
// literals, comparisons, and/or/not and len(). What
// it cannot translate is reported with its line and left in the output as a Go template comment, so
// the template fails to validate until a human has looked at it: nothing is guessed.
package mako

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Problem is a construct Convert did not translate.
type Problem struct {
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("line %d: %s", p.Line, p.Msg) }

// converter holds the state of one translation.
type converter struct {
	out      strings.Builder
	problems []Problem
	blocks   []block  // open % if / % for, innermost last
	scope    []string // loop and assigned variables visible here
	gone     []string // variables assigned in a block that has ended: Go's end with it, Python's do not
	line     int

	// A <%doc> or <% %> block that spans lines: its start line, and the code read so far.
	inDoc, inCode bool
	openedAt      int
	code          strings.Builder
}

type block struct {
	kind string // "if" or "for"
	line int
	vars int // variables the block added to scope
}

// Convert translates a Mako template. The output parses as a Go template exactly when problems is
// empty.
func Convert(src string) (string, []Problem) {
	c := &converter{}
	lines := strings.SplitAfter(src, "\n")
	for i := 0; i < len(lines); i++ {
		c.line = i + 1
		line := lines[i]
		trimmed := strings.TrimLeft(line, " \t")
		switch {
		case c.inDoc:
			if _, after, ok := strings.Cut(line, "</%doc>"); ok {
				c.inDoc = false
				c.text(after)
			}
		case c.inCode:
			before, after, ok := strings.Cut(line, "%>")
			c.code.WriteString(before)
			if ok {
				c.inCode = false
				at := c.line
				c.block(c.code.String(), c.openedAt)
				c.line = at
				c.text(after)
			}
		case strings.HasPrefix(trimmed, "##"):
			// A Mako comment: the whole line, its newline included, is gone.
		case strings.HasPrefix(trimmed, "%%"):
			c.text(strings.Replace(line, "%%", "%", 1))
		case strings.HasPrefix(trimmed, "%"):
			c.control(strings.TrimSpace(strings.TrimPrefix(trimmed, "%")))
		default:
			c.text(line)
		}
	}
	for _, b := range c.blocks {
		c.problem(b.line, "%% %s is never closed (%% end%s)", b.kind, b.kind)
	}
	if c.inDoc || c.inCode {
		c.problem(c.openedAt, "a Mako block (<%%doc> or <%%) is never closed")
		c.out.WriteString("{{ mako_untranslated }}")
	}
	return c.out.String(), c.problems
}

// ConvertInline translates the ${...} expressions of one YAML scalar (an app.yml value): no control
// lines there, and a # is YAML's.
func ConvertInline(s string, line int) (string, []Problem) {
	c := &converter{line: line}
	c.text(s)
	return c.out.String(), c.problems
}

func (c *converter) problem(line int, format string, a ...any) {
	c.problems = append(c.problems, Problem{Line: line, Msg: fmt.Sprintf(format, a...)})
}

// unsupported reports what is left for a human and writes it as a comment that keeps the template
// from validating (a comment alone would pass): an undefined function call after it.
func (c *converter) unsupported(what, src string) {
	c.problem(c.line, "%s is not translated: %s", what, strings.TrimSpace(src))
	fmt.Fprintf(&c.out, "{{/* mako, line %d, for a human: %s */}}{{ mako_untranslated }}", c.line, strings.ReplaceAll(strings.TrimSpace(src), "*/", "* /"))
}

// control translates a % line. The line's own newline is consumed, as Mako does.
func (c *converter) control(stmt string) {
	if i := scan(stmt, '#'); i >= 0 {
		stmt = strings.TrimSpace(stmt[:i]) // a Python comment after the statement
	}
	word, rest, _ := strings.Cut(stmt, " ")
	word = strings.TrimSuffix(word, ":")
	rest = strings.TrimSpace(rest)
	switch word {
	case "if", "elif":
		cond, ok := strings.CutSuffix(rest, ":")
		if !ok {
			c.unsupported("a % "+word+" without its colon", stmt)
			c.failedOpen(word)
			return
		}
		if word == "elif" && !c.inside("if") {
			c.problem(c.line, "%% elif outside %% if")
			return
		}
		g, err := c.expr(cond)
		if err != nil {
			c.unsupported("the condition", cond+" ("+err.Error()+")")
			c.failedOpen(word)
			return
		}
		if word == "if" {
			c.blocks = append(c.blocks, block{kind: "if", line: c.line})
			fmt.Fprintf(&c.out, "{{ if %s }}", g)
		} else {
			fmt.Fprintf(&c.out, "{{ else if %s }}", g)
		}
	case "else":
		if !c.inside("if") {
			c.problem(c.line, "%% else outside %% if (Mako's for/else is not translated)")
			return
		}
		c.out.WriteString("{{ else }}")
	case "endif", "endfor":
		kind := strings.TrimPrefix(word, "end")
		if !c.inside(kind) {
			c.problem(c.line, "%% %s without its %% %s", word, kind)
			return
		}
		b := c.blocks[len(c.blocks)-1]
		c.blocks = c.blocks[:len(c.blocks)-1]
		ended := c.scope[len(c.scope)-b.vars:]
		c.scope = c.scope[:len(c.scope)-b.vars]
		for _, v := range ended {
			if !slices.Contains(c.scope, v) {
				c.gone = append(c.gone, v)
			}
		}
		c.out.WriteString("{{ end }}")
	case "for":
		c.forLoop(stmt, rest)
	default:
		c.unsupported("the statement % "+word, stmt)
	}
}

// failedOpen keeps the blocks balanced after an opening % if or % for that was not translated, so
// its % endif or % endfor is not reported too: the output already fails (unsupported).
func (c *converter) failedOpen(word string) {
	if word == "if" || word == "for" {
		c.blocks = append(c.blocks, block{kind: word, line: c.line})
		c.out.WriteString("{{ if true }}")
	}
}

func (c *converter) inside(kind string) bool {
	return len(c.blocks) > 0 && c.blocks[len(c.blocks)-1].kind == kind
}

// forLoop translates % for NAME in EXPR:, % for K, V in EXPR.items(): and
// % for I, X in enumerate(EXPR):.
func (c *converter) forLoop(stmt, rest string) {
	head, ok := strings.CutSuffix(rest, ":")
	vars, over, found := strings.Cut(head, " in ")
	if !ok || !found {
		c.unsupported("the loop", stmt)
		c.failedOpen("for")
		return
	}
	var names []string
	for _, v := range strings.Split(vars, ",") {
		v = strings.TrimSpace(v)
		if !isIdent(v) {
			c.unsupported("the loop variables", stmt)
			c.failedOpen("for")
			return
		}
		names = append(names, v)
	}
	over = strings.TrimSpace(over)
	// Through the renderer's iteration helpers (manifest/order.go): a mapping in the manifest's
	// order, as Python's dict had it, where Go's range would sort it (and give values, not keys).
	fn := "iter"
	switch {
	case len(names) == 2 && strings.HasSuffix(over, ".items()"):
		over, fn = strings.TrimSuffix(over, ".items()"), "items"
	case len(names) == 2 && strings.HasPrefix(over, "enumerate(") && strings.HasSuffix(over, ")"):
		over, fn = strings.TrimSuffix(strings.TrimPrefix(over, "enumerate("), ")"), "enumerate"
	case len(names) == 1:
	default:
		c.unsupported("the loop (one variable, K, V over .items() or I, X over enumerate())", stmt)
		c.failedOpen("for")
		return
	}
	g, err := c.expr(over)
	if err != nil {
		c.unsupported("the loop's sequence", over+" ("+err.Error()+")")
		c.failedOpen("for")
		return
	}
	dollar := make([]string, len(names))
	for i, n := range names {
		dollar[i] = "$" + n
	}
	c.blocks = append(c.blocks, block{kind: "for", line: c.line, vars: len(names)})
	c.scope = append(c.scope, names...)
	fmt.Fprintf(&c.out, "{{ range %s := %s %s }}", strings.Join(dollar, ", "), fn, arg(g))
}

// text translates a text line: its ${...} expressions, a literal {{, and a trailing backslash that
// joins it to the next line.
func (c *converter) text(line string) {
	line = strings.TrimSuffix(line, "\\\n")
	for line != "" {
		i := strings.Index(line, "${")
		j := minIndex(strings.Index(line, "<%"), strings.Index(line, "<&"))
		k := minIndex(strings.Index(line, "</%"), strings.Index(line, "</&"))
		l := strings.Index(line, "{{")
		next := minIndex(i, j, k, l)
		if next < 0 {
			c.out.WriteString(line)
			return
		}
		c.out.WriteString(line[:next])
		line = line[next:]
		switch {
		case strings.HasPrefix(line, "{{"):
			c.out.WriteString("{{ `{{` }}")
			line = line[2:]
		case strings.HasPrefix(line, "${"):
			end := scan(line[2:], '}')
			if end < 0 {
				c.unsupported("an unclosed ${", line)
				return
			}
			c.substitution(line[2 : 2+end])
			line = line[2+end+1:]
		case strings.HasPrefix(line, "<%doc>"):
			// Mako drops a <%doc> block whole; the text after it stays.
			_, after, ok := strings.Cut(line, "</%doc>")
			if !ok {
				c.inDoc, c.openedAt = true, c.line
				return
			}
			line = after
		case isCodeBlock(line):
			code, after, ok := strings.Cut(line[2:], "%>")
			if !ok {
				c.inCode, c.openedAt = true, c.line
				c.code.Reset()
				c.code.WriteString(code)
				return
			}
			c.block(code, c.line)
			line = after
		case strings.HasPrefix(line, "<&") || strings.HasPrefix(line, "</&"):
			// Mako's old call syntax: it drops the < of a <& it cannot parse (a shell's <&3), so
			// the Stands Engine wrote something else than the text says.
			c.unsupported("a <& (Mako's call syntax: Mako drops the <, so its output was not this text)", line)
			return
		default:
			c.unsupported("a Mako tag (<%…>)", line)
			return
		}
	}
}

// isCodeBlock: a <% %> block of Python statements, not a tag (<%def>, <%include>) or a module block
// (<%!).
func isCodeBlock(s string) bool {
	return strings.HasPrefix(s, "<%") && (len(s) == 2 || s[2] == ' ' || s[2] == '\t' || s[2] == '\n' || s[2] == '\r')
}

var assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([^=].*)$`)

// block translates the Python statements of a <% %> block: each NAME = expression becomes a Go
// template variable (visible to the end of the enclosing % if or % for, as Go's are); anything else
// is left for a human. The block writes nothing, as Mako's does.
func (c *converter) block(code string, first int) {
	for i, stmt := range strings.Split(code, "\n") {
		c.line = first + i
		if i := scan(stmt, '#'); i >= 0 {
			stmt = stmt[:i]
		}
		stmt = strings.TrimSpace(stmt)
		if stmt == "" {
			continue
		}
		m := assignment.FindStringSubmatch(stmt)
		if m == nil {
			c.unsupported("a Python statement in <% %> (only NAME = expression is translated)", stmt)
			continue
		}
		g, err := c.expr(m[2])
		if err != nil {
			c.unsupported("the expression assigned in <% %>", stmt+" ("+err.Error()+")")
			continue
		}
		op := ":="
		if slices.Contains(c.scope, m[1]) {
			op = "="
		} else {
			c.scope = append(c.scope, m[1])
			if len(c.blocks) > 0 {
				c.blocks[len(c.blocks)-1].vars++
			}
		}
		fmt.Fprintf(&c.out, "{{ $%s %s %s }}", m[1], op, g)
	}
}

func minIndex(xs ...int) int {
	m := -1
	for _, x := range xs {
		if x >= 0 && (m < 0 || x < m) {
			m = x
		}
	}
	return m
}

// scan returns the index of the first stop byte in s outside quotes and brackets, or -1: the } that
// ends a ${ expression, the | that starts its filters.
func scan(s string, stop byte) int {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case quote != 0:
			if ch == '\\' {
				i++
			} else if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == stop && depth == 0:
			return i
		case ch == '(' || ch == '[' || ch == '{':
			depth++
		case ch == ')' || ch == ']' || ch == '}':
			depth--
		}
	}
	return -1
}

// filters are Mako's expression filters and the Go functions that do the same.
var filters = map[string]string{"h": "html", "u": "urlquery", "trim": "trim", "str": "print", "n": ""}

// substitution translates the inside of ${...}: an expression, then | filters.
func (c *converter) substitution(src string) {
	expr, filt := splitFilters(src)
	g, err := c.expr(expr)
	if err != nil {
		c.unsupported("the expression", "${"+src+"} ("+err.Error()+")")
		return
	}
	pipe := []string{g}
	for _, f := range filt {
		fn, ok := filters[f]
		if !ok {
			c.unsupported("the filter |"+f, "${"+src+"}")
			return
		}
		if fn != "" {
			pipe = append(pipe, fn)
		}
	}
	fmt.Fprintf(&c.out, "{{ %s }}", strings.Join(pipe, " | "))
}

// splitFilters splits "expr | h, trim" at a | outside strings and brackets.
func splitFilters(src string) (string, []string) {
	i := scan(src, '|')
	if i < 0 {
		return src, nil
	}
	var fs []string
	for _, f := range strings.Split(src[i+1:], ",") {
		fs = append(fs, strings.TrimSpace(f))
	}
	return src[:i], fs
}

// arg makes a pipeline an argument of a function: parenthesised unless it is one operand.
func arg(g string) string {
	if strings.ContainsAny(g, " |") && !(strings.HasPrefix(g, "(") && strings.HasSuffix(g, ")")) {
		return "(" + g + ")"
	}
	return g
}
