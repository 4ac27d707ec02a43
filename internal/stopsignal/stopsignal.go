// Package stopsignal is how a command of this project ends at a signal (docs/operations.md#stopping-a-command):
// the first SIGINT, SIGTERM or SIGHUP cancels it; a command that does not end Grace later, or at a
// second signal, is stopped with the shell's code for the signal, unless a Pulumi CLI it started
// is still cancelling its operation (writing its checkpoint, letting its lock go).
package stopsignal

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Grace is how long a command has, after a signal cancelled its context, to end by itself before
// it is stopped: work that cannot be cancelled (a template that never ends) must not keep a CI job
// from stopping it.
const Grace = 1500 * time.Millisecond

// Interrupted is the exit code of a command that ended because it was cancelled.
const Interrupted = 130

// Command is the command a process runs, as its stop sees it.
type Command struct {
	// Stoppable: Grace after the first signal, or at a second one, the wait ends; the daemon's
	// commands are not (a signal starts their drain, a second one aborts their operations).
	Stoppable bool
	Stderr    io.Writer     // gets why the wait ended when the command did not end by itself
	CLIs      func() int    // the Pulumi CLIs the command runs now
	Cancel    time.Duration // how long a Pulumi CLI is given to cancel its operation
}

// Wait waits for the command's exit code on done. The first signal on sigs calls cancel; when
// the command is stoppable, a command that has not ended Grace later (and runs no Pulumi CLI) or
// a second signal ends the wait, with the signal's exit code (Exit).
func (c Command) Wait(done <-chan int, sigs <-chan os.Signal, cancel func()) int {
	stoppable, stderr, clis := c.Stoppable, c.Stderr, c.CLIs
	var got os.Signal
	var grace <-chan time.Time
	var waiting *time.Ticker
	waited := false
	for {
		select {
		case code := <-done:
			if got != nil && code == Interrupted {
				return Exit(got)
			}
			return code
		case s := <-sigs:
			if got == nil {
				got = s
				cancel()
				if stoppable {
					grace = time.After(Grace)
				}
				continue
			}
			if stoppable {
				fmt.Fprintf(stderr, "stands-reconciler: stopped at a second %s%s\n", Name(s), pulumiLeft(clis()))
				return Exit(got)
			}
		case <-grace:
			grace = nil
			if clis() == 0 {
				fmt.Fprintf(stderr, "stands-reconciler: stopped: the command did not end within %s of %s\n", Grace, Name(got))
				return Exit(got)
			}
			waiting = time.NewTicker(250 * time.Millisecond)
		case <-tick(waiting):
			if !waited {
				waited = true
				fmt.Fprintf(stderr, "stands-reconciler: waiting for Pulumi to cancel its operation, write its checkpoint and let its lock go (up to %s); signal again to stop now\n", c.Cancel)
			}
			if clis() == 0 {
				waiting.Stop()
				waiting = nil
				grace = time.After(Grace)
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

// Name is the signal's name as the messages give it.
func Name(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return "SIGINT"
}

// Exit is the shell's code for a process ended by s: 128 and the signal's number.
func Exit(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok && s != os.Interrupt {
		return 128 + int(n)
	}
	return Interrupted
}
