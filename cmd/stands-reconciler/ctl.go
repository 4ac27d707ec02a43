package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/stands-engine/stands-reconciler/daemon"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// runCtl is the operator's side of the daemon's controls: one action through its Unix socket.
func runCtl(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("ctl", `ctl [flags] ACTION

Talks to the running daemon through its control socket (--control-socket, default
<state-dir>/control.sock; the daemon's user or root only). ACTION is one of:
  status                 the switches in force and the stands by phase
  pause [REASON...]      start no operation on any stand until resume (running ones finish)
  resume                 undo pause (a committed .stands/pause still pauses)
  plan-only on|off       decide and report in each stand's status, apply and destroy nothing
  retry STAND-ID         forget the stand's failures and backoff (a Stalled one too): attempt it now
  approve STAND-ID COMMIT [--all] REASON...
                         apply (or destroy) the stand's unreviewed change at COMMIT, as its status
                         names it, as if a review had approved it, once (--require-review), and
                         its unreviewed end there; REASON is kept in the stand's status (without
                         one: deprecated, refused later). It lists the commits the change holds
                         since what is applied, and refuses more than one unless --all says you
                         looked at each. STAND-ID .stands/lifetime.yml puts the lifetime policy of
                         COMMIT in force
Each action is logged by the daemon and shown in STATUS.md or the stand's status, naming the caller
(the kernel's account, and $SUDO_USER or $USER as the operator it claims).`, std)
	conf := newSettings(fs, getenv)
	var f daemonFlags // the daemon's settings, so its --config file is read alike
	f.register(conf)
	all := fs.Bool("all", false, "approve: release a change made of more than one commit, each of them looked at")
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return exitUsage
	}
	req := daemon.ControlRequest{Operator: cmp.Or(getenv("SUDO_USER"), getenv("USER"))}
	action := rest[0]
	switch {
	case action == "status" && len(rest) == 1:
		action = ""
	case action == "pause":
		req.Reason = strings.Join(rest[1:], " ")
	case action == "resume" && len(rest) == 1:
	case action == "plan-only" && len(rest) == 2 && (rest[1] == "on" || rest[1] == "off"):
		req.On = rest[1] == "on"
	case action == "retry" && len(rest) == 2:
		req.Stand = rest[1]
	case action == "approve" && len(rest) >= 3:
		req.Stand, req.Commit, req.Reason, req.All = rest[1], rest[2], strings.Join(rest[3:], " "), *all
		if req.Reason == "" {
			// The reason became part of the audit trail after scripts were written without it: they
			// keep working for a release.
			fmt.Fprintln(std.err, "ctl: warning: approve without a REASON is deprecated and will be refused in a later release; say why after the commit")
		}
	default:
		fmt.Fprintf(std.err, "ctl: %q: want status, pause [REASON], resume, plan-only on|off, retry STAND-ID or approve STAND-ID COMMIT REASON\n", strings.Join(rest, " "))
		return exitUsage
	}
	p := f.s.SocketPath()
	if p == "" {
		fmt.Fprintln(std.err, "ctl: --control-socket is none: the daemon has no controls")
		return exitUsage
	}
	a, err := daemon.NewControlClient(p).Do(ctx, action, req)
	if a != nil && a.Approval != nil {
		printApproval(std, *a.Approval, err == nil)
	}
	if err != nil {
		fmt.Fprintf(std.err, "ctl: %v\n", err)
		return exitError
	}
	rec := map[string]any{"operation": "ctl", "action": cmp.Or(action, "status"), "status": "success", "controls": a.Controls}
	if a.Approval != nil {
		rec["approval"] = a.Approval
	}
	return writeRecord(std, rec)
}

// printApproval says which commits an approval releases, or would have.
func printApproval(std stdio, ap reconcile.Approval, done bool) {
	verb := "would release"
	if done {
		verb = "releases"
	}
	fmt.Fprintf(std.err, "ctl: approve %s %s %d commit(s) since what is applied:\n", ap.Stand, verb, len(ap.Commits))
	for _, c := range ap.Commits {
		fmt.Fprintf(std.err, "  %s %s: %s\n", mdtext.Short(c.Commit), c.Author, mdtext.FirstLine(c.Subject))
	}
	if !ap.Complete {
		fmt.Fprintln(std.err, "  … and older ones not read")
	}
}
