package mdtext

import (
	"strings"
	"testing"
	"unicode"
)

// hostile are values of the classes that could become markup (test/testenv/testdata/hostile.txt is
// the full list, rendered by a real Gitea in the prplan and reconcile tests).
var hostile = []string{
	"<details><summary>x</summary>", "a|b", "`", "``x``", "```\n# h\n```", "x `", " x ", "line\nline\r\n\nnext",
	"[a](https://e.example)", "@admin #1 :smile:", "\u202eevil\u200b", "\x00\x1b[31m", "\xff\xfe", strings.Repeat("<b>|`", 500),
}

func TestCodeIsOneInertSpan(t *testing.T) {
	for _, s := range hostile {
		c := string(Code(s))
		if strings.ContainsAny(c, "\n\r") {
			t.Errorf("Code(%q) = %q: a line break ends a table row", s, c)
		}
		for _, r := range c {
			if !unicode.IsPrint(r) {
				t.Errorf("Code(%q) = %q holds %U", s, c, r)
			}
		}
		fence := c[:strings.IndexFunc(c, func(r rune) bool { return r != '`' })]
		inner := strings.TrimSuffix(strings.TrimPrefix(c, fence), fence)
		if fence == "" || !strings.HasSuffix(c, fence) || longestRun(inner, '`') >= len(fence) {
			t.Errorf("Code(%q) = %q: not one code span", s, c)
		}
		if len(c) > maxCode+2*len(fence)+2 {
			t.Errorf("Code(%.40q) is %d bytes", s, len(c))
		}
	}
	if Code("") != "" {
		t.Errorf("Code of nothing: %q", Code(""))
	}
}

func TestBlockKeepsItsFence(t *testing.T) {
	for _, s := range hostile {
		lines := strings.Split(strings.Trim(string(Block(s)), "\n"), "\n")
		fence := lines[0]
		if len(fence) < 3 || strings.Trim(fence, "`") != "" || lines[len(lines)-1] != fence {
			t.Fatalf("Block(%q): %q", s, lines)
		}
		for _, l := range lines[1 : len(lines)-1] {
			if strings.HasPrefix(strings.TrimSpace(l), fence) {
				t.Errorf("Block(%q): line %q closes the fence", s, l)
			}
		}
	}
}

func TestRowHasItsCells(t *testing.T) {
	for _, s := range hostile {
		row := string(Row(s, F("%s and %s", s, s), 3, Markup("ok")))
		if strings.Count(row, "\n") != 1 || !strings.HasSuffix(row, "\n") {
			t.Errorf("Row(%q) is not one line: %q", s, row)
		}
		if n := unescapedPipes(row); n != 5 {
			t.Errorf("Row(%q) has %d cell borders, want 5: %q", s, n, row)
		}
	}
}

// unescapedPipes counts what GitHub's table syntax splits cells on: a pipe not after a backslash.
func unescapedPipes(s string) int {
	n := 0
	for i := range len(s) {
		if s[i] == '|' && (i == 0 || s[i-1] != '\\') {
			n++
		}
	}
	return n
}

func TestF(t *testing.T) {
	type phase string
	got := F("%s %s %d %.1f %v %s", "a`b", Markup("**kept**"), 3, 1.25, true, phase("Ready"))
	if want := Markup("``a`b`` **kept** 3 1.2 true `Ready`"); got != want {
		t.Errorf("F: %q, want %q", got, want)
	}
}

func TestLinkEscapesThePath(t *testing.T) {
	if got, want := Link(Code("x"), "status/a b)(<c>&d.json"), Markup("[`x`](status/a%20b%29%28%3Cc%3E%26d.json)"); got != want {
		t.Errorf("Link: %q, want %q", got, want)
	}
}

func TestPlain(t *testing.T) {
	if got := Plain("one\ntwo\u202e\x00", 200); got != `one\ntwo\u202e\x00` {
		t.Errorf("Plain: %q", got)
	}
	if got := Plain(strings.Repeat("é", 200), 200); len(got) > 200 {
		t.Errorf("Plain is %d bytes", len(got))
	}
}

func TestMention(t *testing.T) {
	for login, want := range map[string]Markup{
		"alice":                 "@alice",
		"bob.smith-2":           "@bob.smith-2",
		"x":                     "@x",
		"":                      "",
		"alice bob":             "`alice bob`",
		"<img src=x>":           "`<img src=x>`",
		"-dash":                 "`-dash`",
		"alice\n| injected |":   "`alice\\n| injected |`",
		"[a](http://evil.test)": "`[a](http://evil.test)`",
	} {
		if got := Mention(login); got != want {
			t.Errorf("Mention(%q) = %q, want %q", login, got, want)
		}
	}
}
