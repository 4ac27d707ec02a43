package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"code.gitea.io/sdk/gitea"
	"golang.org/x/net/html"
)

// HostileText is what an author can put in any free-form field of a repository (names, paths,
// types, messages) to turn it into markup on a reviewer's page: HTML, comments and <details>,
// backticks and fences, pipes and line breaks, links, images, mentions, issue references, emoji,
// bidirectional overrides and very long strings (testdata/hostile.txt, one per line, escapes
// such as \n written as Go writes them).
func HostileText(t testing.TB) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(RepoRoot(), "test", "testenv", "testdata", "hostile.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "# ") {
			continue
		}
		out = append(out, unescape(line))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return append(out, strings.Repeat("<b>long|`", 2000))
}

func unescape(s string) string {
	return strings.NewReplacer(`\n`, "\n", `\r`, "\r", `\t`, "\t", `\u202e`, "\u202e", `\u202c`, "\u202c",
		`\u200b`, "\u200b", `\u2028`, "\u2028", `\x00`, "\x00").Replace(s)
}

// MakePublic makes the repository public, so its pages read as an anonymous reader sees them.
func (r *Repo) MakePublic(api *gitea.Client) {
	r.t.Helper()
	public := false
	if _, _, err := api.EditRepo(r.Info.Owner.UserName, r.Info.Name, gitea.EditRepoOption{Private: &public}); err != nil {
		r.t.Fatalf("make %s public: %v", r.Info.FullName, err)
	}
}

// RenderedMarkup fetches a page of Gitea's web UI (a path under the repository, such as
// "pulls/1" or "src/branch/main/STATUS.md") and returns the first part of it Gitea rendered from
// Markdown (a "markup" element) whose text contains want: what a reviewer's browser shows there.
// A page Gitea cannot serve is an error: the reviewer sees none of it.
func (r *Repo) RenderedMarkup(page, want string) (*html.Node, error) {
	r.t.Helper()
	resp, err := http.Get(r.Info.HTMLURL + "/" + page)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("Gitea answers GET %s with %s", page, resp.Status)
	}
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	var found *html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if found != nil {
			return
		}
		if n.Type == html.ElementNode && hasClass(n, "markup") && strings.Contains(textOf(n), want) {
			found = n
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if found == nil {
		return nil, fmt.Errorf("%s has no rendered markup containing %q", page, want)
	}
	return found, nil
}

// Elements lists the elements under n in document order by tag: the skeleton of what a page shows.
// Two renderings of one document, one with hostile values and one with plain ones, have the same
// skeleton exactly when no value became markup.
func Elements(n *html.Node) []string {
	var out []string
	if n == nil {
		return nil
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode {
			out = append(out, c.Data)
			out = append(out, Elements(c)...)
		}
	}
	return out
}

func hasClass(n *html.Node, class string) bool {
	for _, a := range n.Attr {
		if a.Key == "class" && strings.Contains(" "+a.Val+" ", " "+class+" ") {
			return true
		}
	}
	return false
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// ControlRun is set in a test's control run (ShowFailsWithTags), so the test does not start another.
const ControlRun = "STANDS_CONTROL_RUN"

// ShowFailsWithTags runs test (a name in the package in dir) once more, built with tags that turn
// off what it checks, and fails unless that run fails with each of wants in its output: the test
// can see each failure it names. The run is skipped inside a control run.
func ShowFailsWithTags(t *testing.T, dir, test, tags string, wants ...string) {
	t.Helper()
	if os.Getenv(ControlRun) != "" {
		return
	}
	cmd := exec.Command("go", "test", "-count=1", "-tags", tags, "-run", "^"+test+"$", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), ControlRun+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("control: %s passed with -tags %s; it cannot see what it checks:\n%s", test, tags, lastBytes(out))
	}
	for _, want := range wants {
		if !bytes.Contains(out, []byte(want)) {
			t.Fatalf("control: %s failed with -tags %s, but not with %q:\n%s", test, tags, want, lastBytes(out))
		}
	}
	t.Logf("control: with -tags %s, %s fails as it should (%q)", tags, test, wants)
}

func lastBytes(out []byte) []byte {
	if len(out) > 4096 {
		return out[len(out)-4096:]
	}
	return out
}

// ElementsDiffer says where two skeletons (Elements) part, with a few elements either side; "" when
// they are the same.
func ElementsDiffer(want, got []string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	if i == len(want) && i == len(got) {
		return ""
	}
	window := func(s []string) []string { return s[max(0, i-5):min(len(s), i+6)] }
	return fmt.Sprintf("element %d of %d/%d: want %v, got %v", i, len(want), len(got), window(want), window(got))
}

// EveryHostileValue checks a document with every hostile value: once per value and once with all
// of them (an author fills many fields: one can open what another closes), each beside the same
// document with plain values. publish is given every document to make (by name, the values for its
// free-form fields), then render each one's elements by name as Gitea shows them; a document whose
// elements differ from its plain twin's, whose text holds a character a reader cannot see (a
// control or format character such as a bidirectional override), or that does not render, fails
// the test. rows is how many table rows (its header included) the document shows for plain values:
// the document with all of them must show that many, or the test reads the wrong part of the page.
func EveryHostileValue(t *testing.T, publish func(docs map[string][]string), render func(name string) (*html.Node, error), rows func(plain []string) int) {
	t.Helper()
	hostile := HostileText(t)
	plainOf := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("value%d", i)
		}
		return out
	}
	docs := map[string][]string{"all": hostile, "plain-all": plainOf(len(hostile)), "plain-one": plainOf(1)}
	for i, v := range hostile {
		docs[fmt.Sprintf("one-%d", i)] = []string{v}
	}
	publish(docs)
	plain := func(name string) []string {
		page, err := render(name)
		if err != nil {
			t.Fatalf("the document with plain values: %v", err)
		}
		return Elements(page)
	}
	plainAll, plainOne := plain("plain-all"), plain("plain-one")
	if got, want := count(plainAll, "tr"), rows(docs["plain-all"]); got != want {
		t.Fatalf("the plain document shows %d table rows, want %d: the test reads the wrong element", got, want)
	}
	compare := func(what, name string, want []string) {
		t.Helper()
		page, err := render(name)
		if err != nil {
			t.Errorf("with hostile value %s: the page does not render: %v", what, err)
			return
		}
		if d := ElementsDiffer(want, Elements(page)); d != "" {
			t.Errorf("elements differ with hostile value %s: markup the reconciler did not write (%s)", what, d)
		}
		text := textOf(page)
		if i := strings.IndexFunc(text, func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) || r == '\u2028' }); i >= 0 {
			t.Errorf("with hostile value %s, the page shows a character a reader cannot see: %q", what, []rune(text[i:])[0])
		}
	}
	compare("all of them", "all", plainAll)
	for i, v := range hostile {
		compare(fmt.Sprintf("%d %.60q", i, v), fmt.Sprintf("one-%d", i), plainOne)
	}
}

func count(s []string, e string) int {
	n := 0
	for _, x := range s {
		if x == e {
			n++
		}
	}
	return n
}
