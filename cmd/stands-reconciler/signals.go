package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/internal/stopsignal"
)

// drains are the daemon's commands: a signal starts their drain, and a second one aborts their
// operations (run.go); they are never stopped from outside.
var drains = map[string]bool{"run": true, "reconcile": true}

// runMain runs the command line of this process until it ends or a signal stops it: 130 after
// SIGINT, 143 after SIGTERM, within stopsignal.Grace of the signal whatever the command is doing, but
// while a Pulumi CLI runs: that one is interrupted and given engine.CancelGrace to write its
// checkpoint and let its lock go, unless a second signal says to stop now.
func runMain() int {
	args := os.Args[1:]
	sigs := make(chan os.Signal, 4)
	if commandName(args) == "run" {
		// The daemon reloads at SIGHUP (reload.go); every other command stops at it as at SIGTERM.
		signal.Notify(reloadSignals, syscall.SIGHUP)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	} else {
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	}
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, os.Stdout, os.Stderr, compat.ProcessEnv(os.Environ(), os.Getenv)) }()
	c := stopsignal.Command{Stoppable: !drains[commandName(args)], Stderr: os.Stderr, CLIs: engine.CLIsRunning, Cancel: engine.CancelGrace}
	return c.Wait(done, sigs, cancel)
}

// commandName is the command args run, past the global flags; "" when none.
func commandName(args []string) string {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--env-file" || a == "-env-file" || a == "--resource" || a == "-resource":
			i++
		case len(a) > 0 && a[0] == '-':
		default:
			return a
		}
	}
	return ""
}
