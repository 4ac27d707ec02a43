package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/engine"
)

// stopGrace is how long a command has, after SIGINT or SIGTERM cancelled its context, to end by
// itself before it is stopped: work that cannot be cancelled (a template that never ends) must not
// keep a CI job from stopping it (docs/operations.md#stopping-a-command).
const stopGrace = 1500 * time.Millisecond

// drains are the daemon's commands: a signal starts their drain, and a second one aborts their
// operations (run.go); they are never stopped from outside.
var drains = map[string]bool{"run": true, "reconcile": true}

// runMain runs the command line of this process until it ends or a signal stops it: 130 after
// SIGINT, 143 after SIGTERM, within stopGrace of the signal whatever the command is doing, but
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
	return stopOnSignal(done, sigs, cancel, !drains[commandName(args)], os.Stderr, engine.CLIsRunning)
}

// stopOnSignal waits for the command's exit code on done. The first signal cancels it; when
// stoppable, a command that has not ended stopGrace later (and runs no Pulumi CLI) or a second
// signal ends the wait, with the signal's exit code.
func stopOnSignal(done <-chan int, sigs <-chan os.Signal, cancel func(), stoppable bool, stderr io.Writer, clis func() int) int {
	var got os.Signal
	var grace <-chan time.Time
	var waiting *time.Ticker
	waited := false
	for {
		select {
		case code := <-done:
			if got != nil && code == exitInterrupted {
				return signalExit(got)
			}
			return code
		case s := <-sigs:
			if got == nil {
				got = s
				cancel()
				if stoppable {
					grace = time.After(stopGrace)
				}
				continue
			}
			if stoppable {
				fmt.Fprintf(stderr, "stands-reconciler: stopped at a second %s%s\n", signalName(s), pulumiLeft(clis()))
				return signalExit(got)
			}
		case <-grace:
			grace = nil
			if clis() == 0 {
				fmt.Fprintf(stderr, "stands-reconciler: stopped: the command did not end within %s of %s\n", stopGrace, signalName(got))
				return signalExit(got)
			}
			waiting = time.NewTicker(250 * time.Millisecond)
		case <-tick(waiting):
			if !waited {
				waited = true
				fmt.Fprintf(stderr, "stands-reconciler: waiting for Pulumi to cancel its operation, write its checkpoint and let its lock go (up to %s); signal again to stop now\n", engine.CancelGrace)
			}
			if clis() == 0 {
				waiting.Stop()
				waiting = nil
				grace = time.After(stopGrace)
			}
		}
	}
}

func tick(t *time.Ticker) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// pulumiLeft says what stopping now leaves behind.
func pulumiLeft(clis int) string {
	if clis == 0 {
		return ""
	}
	return fmt.Sprintf(": %d Pulumi CLI killed mid-operation; its stack may keep a lock and a pending operation (see `stands-reconciler inventory`)", clis)
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return "SIGINT"
}

// signalExit is the shell's code for a process ended by s: 128 and the signal's number.
func signalExit(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok && s != os.Interrupt {
		return 128 + int(n)
	}
	return exitInterrupted
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
