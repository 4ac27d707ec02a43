package mdtext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	if got := Short("0123456789abcdef"); got != "0123456789ab" {
		t.Errorf("Short: %q", got)
	}
	if got := FirstLine("one\ntwo"); got != "one" {
		t.Errorf("FirstLine: %q", got)
	}
	long := strings.Repeat("é", 200)
	if got := FirstLine(long); len(got) > 160 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("FirstLine of a long line: %d bytes, valid %v: %q", len(got), utf8.ValidString(got), got)
	}
	if got := Truncate("héllo", 2); got != "h…" {
		t.Errorf("Truncate inside a rune: %q", got)
	}
}
