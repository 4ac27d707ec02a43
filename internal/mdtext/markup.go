package mdtext

import (
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Markup is Markdown the reconciler wrote. A string that came from a repository or a commit (names,
// paths, server types, error texts, subjects) becomes Markup only through Code, Block, F, Row or
// Link, which render it inert: shown as the text it is, never as markup on a reviewer's page. A string
// constant is Markup as it stands; converting a string variable to Markup outside this package is
// refused by TestOnlyMdtextMakesMarkup, so a new field cannot skip the rendering.
//
// Inert means, in Gitea's renderer (goldmark, then its own post-processing): inside a code span,
// where Markdown reads no emphasis, link, HTML or entity, and Gitea makes no mention, issue or commit
// link, URL or emoji (it skips code elements); with no line break, which would end a table row or a
// list item, and no control or format character (bidirectional overrides, zero-width characters),
// which could make the text read as something else: those are shown as escapes (\n, \u202e).
type Markup string

// maxCode caps one inert value: a name or a message, not a document.
const maxCode = 300

// inert is false only in a build made to show that the rendering tests see what the escaping
// prevents (tag stands_inert_off, inert_off.go); production builds cannot turn it off.
var inert = true

// Code is s as inert inline text: a code span, at most maxCode bytes.
func Code(s string) Markup {
	if !inert {
		return Markup("`" + s + "`")
	}
	c := Truncate(visible(Truncate(s, 4*maxCode), false), maxCode-len("…"))
	if c == "" {
		return ""
	}
	fence := strings.Repeat("`", longestRun(c, '`')+1)
	if c[0] == '`' || c[len(c)-1] == '`' || c[0] == ' ' || c[len(c)-1] == ' ' {
		c = " " + c + " " // CommonMark strips one space each side; the text keeps its own
	}
	return Markup(fence + c + fence)
}

// Block is s as an inert block of lines (a fenced code block), for texts whose lines matter, such as
// a template's errors. It starts and ends its own lines.
func Block(s string) Markup {
	if !inert {
		return Markup("```\n" + s + "\n```\n")
	}
	c := visible(s, true)
	fence := strings.Repeat("`", max(3, longestRun(c, '`')+1))
	return Markup("\n" + fence + "\n" + c + "\n" + fence + "\n")
}

// F formats like fmt.Sprintf on a Markup format. A Markup argument is kept as it is; a string (of any
// string type), an error or a fmt.Stringer is rendered with Code; numbers and booleans are formatted
// by their verb; anything else is printed, then rendered with Code.
func F(format Markup, args ...any) Markup {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = arg(a)
	}
	return Markup(fmt.Sprintf(string(format), out...))
}

func arg(a any) any {
	switch v := a.(type) {
	case Markup:
		return string(v)
	case error:
		return string(Code(v.Error()))
	case fmt.Stringer:
		return string(Code(v.String()))
	case nil:
		return ""
	}
	switch reflect.ValueOf(a).Kind() {
	case reflect.String:
		return string(Code(reflect.ValueOf(a).String()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Bool:
		return a
	}
	return string(Code(fmt.Sprint(a)))
}

// Row is one row of a Markdown table, each cell rendered as F renders an argument. A pipe inside a
// cell is escaped, so nothing in a cell can start another.
func Row(cells ...any) Markup {
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cells {
		s := arg(c)
		if s, ok := s.(string); ok && inert {
			b.WriteString(" " + strings.ReplaceAll(s, "|", `\|`) + " |")
			continue
		}
		fmt.Fprintf(&b, " %v |", s)
	}
	return Markup(b.String() + "\n")
}

// linkEscaper escapes what url.PathEscape keeps of RFC 3986's sub-delimiters and Markdown reads in a
// link: "(", ")" and "&". One for all links: building it was most of a link's cost.
var linkEscaper = strings.NewReplacer("(", "%28", ")", "%29", "&", "%26")

// Link is text linking to a path in the repository, the path percent-encoded.
func Link(text Markup, path string) Markup {
	if !inert {
		return Markup("[" + string(text) + "](" + path + ")")
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = linkEscaper.Replace(url.PathEscape(s))
	}
	return Markup("[" + string(text) + "](" + strings.Join(segs, "/") + ")")
}

// Join joins parts with sep.
func Join(parts []Markup, sep Markup) Markup {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(string(sep))
		}
		b.WriteString(string(p))
	}
	return Markup(b.String())
}

// Plain is s as one line of plain text of at most n bytes, for commit status descriptions, which Gitea
// shows as text: line breaks and other control and format characters are shown as escapes.
func Plain(s string, n int) string {
	if !inert {
		return s
	}
	return Truncate(visible(Truncate(s, 4*n), false), n-len("…"))
}

// Doc is a document the reconciler writes, built of Markup only.
type Doc struct{ b strings.Builder }

// Add appends parts.
func (d *Doc) Add(parts ...Markup) {
	for _, p := range parts {
		d.b.WriteString(string(p))
	}
}

// F appends F(format, args...).
func (d *Doc) F(format Markup, args ...any) { d.Add(F(format, args...)) }

// Markup is the document.
func (d *Doc) Markup() Markup { return Markup(d.b.String()) }

// Len is the document's length in bytes.
func (d *Doc) Len() int { return d.b.Len() }

// visible replaces every rune that is not printable (and, unless keepLines, every line break) by its
// Go escape, so what a value holds is what a reader sees.
func visible(s string, keepLines bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16))
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case !unicode.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func longestRun(s string, c byte) int {
	longest, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
			longest = max(longest, n)
		} else {
			n = 0
		}
	}
	return longest
}

// giteaUser is what Gitea accepts as a user name: letters, digits, dash, underscore and dot, not
// starting or ending with a dot or dash.
var giteaUser = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,38}[A-Za-z0-9_])?$`)

// Mention is @login, which Gitea links to the user and notifies, when login is a user name Gitea
// could have given; anything else is Code (shown, never linked or notified).
func Mention(login string) Markup {
	if inert && !giteaUser.MatchString(login) {
		return Code(login)
	}
	return Markup("@" + login)
}
