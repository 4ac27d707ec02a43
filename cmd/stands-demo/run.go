package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// up starts the demo, tells the story and keeps everything running until ctx ends (Ctrl-C).
func up(ctx context.Context, p *paths, stdout, stderr io.Writer) int {
	d, unlock, code := begin(ctx, p, stdout, stderr)
	if d == nil {
		return code
	}
	defer unlock()
	defer d.stop()
	s := &story{d: d, out: stdout}
	if err := s.tell(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "stands-demo: %v\n", err)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stdout, "\nstopping…")
		return 0
	}
	if len(s.failed) > 0 {
		fmt.Fprintf(stdout, "\n%d step(s) did not turn out as expected; everything stays up for a look (logs below).\n", len(s.failed))
	}
	if err := d.where(stdout, s.pr); err != nil {
		fmt.Fprintf(stderr, "stands-demo: %v\n", err)
	}
	fmt.Fprintln(stdout, "\nThe demo runs until Ctrl-C. Try another pull request in Gitea: the reconciler plans it within seconds.")
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nstopping (the reconciler drains first)…")
	return 0
}

// check tells the story headless, every expectation asserted, and stops everything at the end.
func check(ctx context.Context, p *paths, shotsTo string, stdout, stderr io.Writer) int {
	t0 := time.Now()
	d, unlock, code := begin(ctx, p, stdout, stderr)
	if d == nil {
		return code
	}
	defer unlock()
	defer d.stop()
	s := &story{d: d, out: stdout, strict: true}
	err := s.tell(ctx)
	if err == nil {
		err = d.where(stdout, s.pr)
	}
	if err == nil && shotsTo != "" {
		err = copyScreenshots(d.p.join("screenshots"), shotsTo, stdout)
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (the story's time bound ran out after %v)", err, time.Since(t0).Round(time.Second))
		}
		fmt.Fprintf(stderr, "\nstands-demo check: %v\n%s", err, d.logs())
		return 1
	}
	fmt.Fprintf(stdout, "\ndemo-check: the whole story held in %v\n", time.Since(t0).Round(time.Second))
	return 0
}

// begin takes the folder and starts the servers; on failure it returns a nil demo and the exit code.
func begin(ctx context.Context, p *paths, stdout, stderr io.Writer) (*demo, func(), int) {
	f, err := lock(p)
	if err != nil {
		fmt.Fprintf(stderr, "stands-demo: %v\n", err)
		if errors.Is(err, errRunning) {
			return nil, nil, 2
		}
		return nil, nil, 1
	}
	unlock := func() { f.Close() }
	fmt.Fprintf(stdout, "stands demo in %s: every server on 127.0.0.1, its data and log under this folder\n", p.root)
	d := &demo{p: p, out: stdout}
	if err := d.start(ctx); err != nil {
		fmt.Fprintf(stderr, "stands-demo: %v\n%s", err, d.logs())
		d.stop()
		unlock()
		return nil, nil, 1
	}
	return d, unlock, 0
}

// logs are the last lines of the reconciler's log, for a failure's message, and where the others are.
func (d *demo) logs() string {
	return localserver.Tail(d.p.join("stands-reconciler", "stands-reconciler.log")) +
		fmt.Sprintf("(every log: %s, %s, %s, %s)\n", d.p.join("stands-reconciler", "stands-reconciler.log"), d.p.join("hcloudsim", "hcloudsim.log"),
			d.p.join("gitea", "log", "gitea.log"), d.p.join("vault", "vault.log"))
}

// copyScreenshots copies the browser's screenshots (the README's pictures) into dir.
func copyScreenshots(from, dir string, out io.Writer) error {
	shots, err := filepath.Glob(filepath.Join(from, "*.png"))
	if err != nil || len(shots) == 0 {
		return fmt.Errorf("no screenshot in %s: %v", from, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, shot := range shots {
		data, err := os.ReadFile(shot)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.Base(shot))
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "screenshot %s\n", dst)
	}
	return nil
}
