// Command stands-demo runs the reconciler's whole loop on this machine, on the example stands
// repository: a local Gitea (an admin, two reviewers and the reconciler's bot), a real Vault holding the
// example's secrets, hcloudsim standing in for Hetzner, and the reconciler with Gitea's webhook
// pointed at it. It then tells the story a team lives: the example stands come up, a pull request
// adding a stand is planned, reviewed, merged and applied, and every step is reported back in Git.
//
//	stands-demo up      start everything, tell the story, keep running until Ctrl-C (make demo)
//	stands-demo check   the same story headless, each step asserted, within --timeout (make demo-check)
//	stands-demo down    stop a running demo (or what a killed one left) and remove its folder (make demo-down)
//
// Everything lives under --dir (default _demo/); nothing else is written.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes: 0 the story held (or the demo was stopped by Ctrl-C), 1 a step failed, 2 usage or a
// demo already running.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stands-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "_demo", "the demo's folder: every server's data and log, removed by `down`")
	bin := fs.String("bin", "bin", "where `make build` and `make tools` left the binaries")
	examples := fs.String("examples", "examples/stands-repo", "the stands repository pushed to the demo's Gitea")
	browser := fs.String("browser", "tools/browser", "the browser check (make browser-tools installs its packages)")
	shots := fs.String("screenshots", "", "check: after the story held, copy the browser's screenshots into this folder (make screenshots: docs/img)")
	timeout := fs.Duration("timeout", 15*time.Minute, "check: the whole story's time bound (DEMO_NODES=full: 60m unless given)")
	nodes := fs.String("nodes", envOr("DEMO_NODES", "servers"), "servers: simulated servers only; full: QEMU VMs with node setup ($DEMO_NODES)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: stands-demo [flags] up|check|down")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "stands-demo %s\n", version.String())
		return 0
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if *nodes != "servers" && *nodes != "full" {
		fmt.Fprintf(stderr, "stands-demo: DEMO_NODES=%s: want servers (simulated servers only) or full (QEMU VMs)\n", *nodes)
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if *nodes == "full" && !given["timeout"] {
		*timeout = 60 * time.Minute // VMs boot in minutes under TCG
	}
	p := &paths{root: *dir, bin: *bin, examples: *examples, browser: *browser, full: *nodes == "full"}
	if err := p.absolute(); err != nil {
		fmt.Fprintf(stderr, "stands-demo: %v\n", err)
		return 2
	}
	if p.full && fs.Arg(0) != "down" {
		if err := vmHost(p); err != nil {
			fmt.Fprintf(stderr, "stands-demo: %v\n", err)
			return 2
		}
	}
	switch fs.Arg(0) {
	case "up":
		return up(ctx, p, stdout, stderr)
	case "check":
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return check(ctx, p, *shots, stdout, stderr)
	case "down":
		if err := down(p, stdout); err != nil {
			fmt.Fprintf(stderr, "stands-demo: %v\n", err)
			return 1
		}
		return 0
	default:
		fs.Usage()
		return 2
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
