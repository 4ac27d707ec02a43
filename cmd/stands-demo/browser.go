package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// A page as the browser rendered it (tools/browser/check.mjs).
type renderedPage struct {
	Name        string          `json:"name"`
	URL         string          `json:"url"`
	Found       bool            `json:"found"`  // the Markdown block with the page's marker
	Styled      bool            `json:"styled"` // Gitea's stylesheet applied
	Tables      []renderedTable `json:"tables"`
	RawMarkdown bool            `json:"rawMarkdown"` // Markdown syntax left as text
	Links       []struct {
		Href   string `json:"href"`
		Status int    `json:"status"`
	} `json:"links"`
	Screenshot string   `json:"screenshot"`
	Text       string   `json:"text"`     // the block's text as the browser lays it out
	Elements   []string `json:"elements"` // the block's elements, by tag, in document order
}

type renderedTable struct {
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// errNoBrowser: node, the browser check's packages or chromium are missing.
var errNoBrowser = errors.New("no browser")

// render logs in to Gitea as the reviewer in headless chromium and renders the pages reviewers read,
// their screenshots into the demo's folder.
func (d *demo) render(ctx context.Context, pages []map[string]string) ([]renderedPage, error) {
	script := filepath.Join(d.p.browser, "check.mjs")
	for _, need := range []string{filepath.Join(d.p.browser, "node_modules", "playwright-core"), chromium()} {
		if _, err := os.Stat(need); err != nil {
			return nil, fmt.Errorf("%w: %s is missing (make browser-tools installs it; chromium comes from scripts/install-deps.sh)", errNoBrowser, need)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("%w: node: %v", errNoBrowser, err)
	}
	shots := d.p.join("screenshots")
	if err := os.MkdirAll(shots, 0o700); err != nil {
		return nil, err
	}
	// The password goes on stdin: never in argv, where any user's ps shows it.
	in, err := json.Marshal(map[string]any{"base": d.gitea.URL, "user": reviewerName, "password": d.reviewer.Password,
		"outDir": shots, "pages": pages})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	// Chromium's profile and caches stay in the demo's folder.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + d.p.join("browser-home"), "CHROMIUM=" + chromium()}
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("browser: %w\n%s", err, tailOf(errb.String(), 20))
	}
	var report struct {
		Pages []renderedPage `json:"pages"`
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		return nil, fmt.Errorf("browser report: %w", err)
	}
	return report.Pages, nil
}

func chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

func tailOf(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// column is the index of the header cell naming name (case-insensitive), -1 when none does.
func (t renderedTable) column(name string) int {
	for i, h := range t.Header {
		if strings.EqualFold(h, name) {
			return i
		}
	}
	return -1
}

// row is the row whose first cell is first, nil when none is.
func (t renderedTable) row(first string) []string {
	for _, r := range t.Rows {
		if len(r) > 0 && r[0] == first {
			return r
		}
	}
	return nil
}
