package testenv

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BrowserPage is what the headless browser shows of a page's rendered Markdown: the block that
// holds the marker text, its elements in document order and its text (tools/browser/check.mjs).
type BrowserPage struct {
	Found    bool     `json:"found"`
	Styled   bool     `json:"styled"` // Gitea's own stylesheet applied
	Elements []string `json:"elements"`
	Text     string   `json:"text"`
	Tables   []struct {
		Header []string   `json:"header"`
		Rows   [][]string `json:"rows"`
	} `json:"tables"`
	Links []struct {
		Href   string `json:"href"`
		Status int    `json:"status"`
	} `json:"links"`
	Screenshot string `json:"screenshot"` // of the first screen, in the test's temporary folder
}

// Browse opens path under base in the headless chromium `make demo-check` uses, as an anonymous
// reader, and returns the part of it Gitea rendered from Markdown whose text holds marker. The
// browser runs Gitea's own scripts on the page, so this is the page a reviewer is shown, not only
// the HTML Gitea served. The check's packages are installed on first need (make browser-check);
// without chromium or npm the test fails under CI and is skipped elsewhere.
func Browse(t testing.TB, base, path, marker string) BrowserPage {
	t.Helper()
	NeedsServer(t, "a headless browser")
	dir := filepath.Join(RepoRoot(), "tools", "browser")
	if err := browserCheck(dir); err != nil {
		Missing(t, "the browser check's packages: %v", err)
	}
	chromium := cmp.Or(os.Getenv("CHROMIUM"), "/usr/bin/chromium")
	for _, need := range []string{filepath.Join(dir, "node_modules", "playwright-core"), chromium} {
		if _, err := os.Stat(need); err != nil {
			Missing(t, "%s is missing: make browser-check installs it, chromium comes from scripts/install-deps.sh", need)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		Missing(t, "node: %v", err)
	}
	in, err := json.Marshal(map[string]any{"base": base, "outDir": t.TempDir(),
		"pages": []map[string]string{{"name": "page", "path": path, "marker": marker}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "check.mjs"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "CHROMIUM=" + chromium}
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("browse %s: %v\n%s", path, err, lastBytes(errb.Bytes()))
	}
	var report struct {
		Pages []BrowserPage `json:"pages"`
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil || len(report.Pages) != 1 {
		t.Fatalf("browse %s: report %q: %v", path, out.String(), err)
	}
	return report.Pages[0]
}

// BrowserShowsEveryValue opens, in the headless browser, the document whose every field holds a
// hostile value and its twin with plain values (the "all" and "plain-all" documents of
// EveryHostileValue): the two must show the same elements, rows table rows each, and the hostile
// one no element the bot does not write. show publishes a document where needed and returns the
// page's path under base; a page that does not render at all with the hostile values differs too.
func BrowserShowsEveryValue(t *testing.T, base, marker string, show func(name string) string, rows int) {
	t.Helper()
	plain := Browse(t, base, show("plain-all"), marker)
	if !plain.Found {
		t.Fatalf("the browser finds no rendered %q in the plain document: the test reads the wrong page", marker)
	}
	hostile := Browse(t, base, show("all"), marker)
	if !hostile.Found {
		t.Errorf("the browser shows other elements with the hostile values: no rendered %q at all", marker)
		return
	}
	if got := count(plain.Elements, "tr"); got != rows {
		t.Fatalf("the browser shows %d table rows of the plain document, want %d: the test reads the wrong element", got, rows)
	}
	if d := ElementsDiffer(plain.Elements, hostile.Elements); d != "" {
		t.Errorf("the browser shows other elements with the hostile values: markup the reconciler did not write (%s)", d)
	}
	var foreign []string
	for _, e := range hostile.Elements {
		switch e {
		case "details", "summary", "img", "script", "style", "iframe", "form", "input", "video", "audio", "object", "embed":
			foreign = append(foreign, e)
		}
	}
	if len(foreign) > 0 {
		t.Errorf("the browser shows elements the reconciler never writes, with the hostile values: %s", strings.Join(foreign, ", "))
	}
	if !t.Failed() {
		t.Logf("browser: %d elements, %d table rows, the same with hostile values and plain ones", len(plain.Elements), rows)
	}
}

// browserCheck installs the browser check's locked packages on first need (make browser-check, a
// no-op once installed), one installer at a time across the test binaries running side by side.
func browserCheck(dir string) error {
	lock, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	cmd := exec.Command("make", "-s", "browser-check")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make browser-check: %w\n%s", err, lastBytes(out))
	}
	return nil
}
