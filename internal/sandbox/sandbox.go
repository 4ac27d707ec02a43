// Package sandbox runs work on untrusted input (a pull request's templates) in a child process of this
// same binary, under CPU-time and address-space limits and a deadline: text/template cannot be
// cancelled, and a loop that writes nothing never trips an output limit, so the only way to stop such
// a render is to kill the process doing it. This is the one place the project re-executes itself for
// isolation (docs/architecture.md).
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Command is the first argument that makes the binary a sandbox child (main dispatches on it).
const Command = "__sandbox"

// Limits bound one child.
type Limits struct {
	CPU    time.Duration // CPU time (RLIMIT_CPU); the kernel kills the child past it
	Memory uint64        // address space in bytes (RLIMIT_AS); allocations past it fail
	Wall   time.Duration // the child is killed past it, whatever it is doing
}

// DefaultLimits fit a render of a 1,000-stand repository many times over.
var DefaultLimits = Limits{CPU: 10 * time.Second, Memory: 1 << 30, Wall: 60 * time.Second}

// ErrLimit marks a child stopped by one of its limits; the message says which.
var ErrLimit = errors.New("sandbox limit reached")

// Child is the child's side, called by main with the arguments after Command: it applies the limits
// the parent named and returns the job to run. It must run before any work on the input.
func Child(args []string) (job string, err error) {
	if len(args) != 3 {
		return "", fmt.Errorf("sandbox: want JOB CPU-SECONDS MEMORY-BYTES, got %q", args)
	}
	cpu, err1 := strconv.ParseUint(args[1], 10, 64)
	mem, err2 := strconv.ParseUint(args[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("sandbox: limits: %w", err)
	}
	// The Go runtime ignores SIGXCPU, which the kernel sends at the soft limit; the SIGKILL at the
	// hard one, a second later, ends the child.
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu + 1}); err != nil {
		return "", fmt.Errorf("sandbox: limit CPU time: %w", err)
	}
	// Go reserves address space it has not touched (arena hints, the page summary) at start: the
	// limit is on growth past what the runtime holds before any work.
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: vmSize() + mem, Max: vmSize() + mem}); err != nil {
		return "", fmt.Errorf("sandbox: limit memory: %w", err)
	}
	return args[0], nil
}

// vmSize is this process's address space in bytes, 0 when unknown.
func vmSize() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Run starts exe as a sandbox child for job, gives it its input through write and reads its answer
// through read, and returns the CPU time the child used. The child gets an empty environment:
// nothing of the parent's credentials. An error wrapping ErrLimit says which limit stopped it; any
// other is the child failing or the parent's ctx.
func Run(ctx context.Context, exe, job string, lim Limits, write func(io.Writer) error, read func(io.Reader) error) (time.Duration, error) {
	var used time.Duration
	err := run(ctx, exe, job, lim, write, read, &used)
	return used, err
}

func run(ctx context.Context, exe, job string, lim Limits, write func(io.Writer) error, read func(io.Reader) error, used *time.Duration) error {
	ctx, cancel := context.WithTimeoutCause(ctx, lim.Wall, fmt.Errorf("%w: it ran longer than %s", ErrLimit, lim.Wall))
	defer cancel()
	cpu := max(1, int64(lim.CPU.Round(time.Second)/time.Second))
	cmd := exec.CommandContext(ctx, exe, Command, job, strconv.FormatInt(cpu, 10), strconv.FormatUint(lim.Memory, 10))
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	stderr := &tail{max: 16384}
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start sandbox: %w", err)
	}
	werr := make(chan error, 1)
	go func() {
		err := write(in)
		werr <- errors.Join(err, in.Close())
	}()
	rerr := read(out)
	_, _ = io.Copy(io.Discard, out) // let the child finish writing before Wait closes the pipe
	err = cmd.Wait()
	wrote := <-werr
	if cmd.ProcessState != nil {
		*used = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	switch {
	case context.Cause(ctx) != nil && ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrLimit):
		return context.Cause(ctx)
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return explain(err, stderr.String(), stderr.oom, lim)
	}
	return errors.Join(rerr, wrote)
}

// explain names the limit a child's death points to.
func explain(err error, stderr string, oom bool, lim Limits) error {
	if os.Getenv("SANDBOX_DEBUG") != "" {
		fmt.Fprintln(os.Stderr, stderr)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && (ws.Signal() == syscall.SIGXCPU || ws.Signal() == syscall.SIGKILL) {
			return fmt.Errorf("%w: it used more than %s of CPU time", ErrLimit, lim.CPU)
		}
	}
	if oom {
		return fmt.Errorf("%w: it needed more than %d MiB of memory", ErrLimit, lim.Memory>>20)
	}
	last := strings.TrimSpace(stderr)
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	return fmt.Errorf("sandbox child failed: %w (%s)", err, last)
}

// tail keeps the last max bytes written to it, and whether any of it said memory ran out (a runtime's
// report comes first, before stacks that can be long).
type tail struct {
	buf  bytes.Buffer
	max  int
	oom  bool
	last []byte // the end of the previous write: a marker may span two
}

// (the race detector's runtime says "address space collisions" when its address space is used up)
var oomMarkers = [][]byte{[]byte("out of memory"), []byte("cannot allocate memory"), []byte("failed to reserve"), []byte("address space collisions"), []byte("failed to allocate")}

func (t *tail) Write(p []byte) (int, error) {
	seam := append(t.last, p[:min(len(p), 32)]...)
	for _, m := range oomMarkers {
		t.oom = t.oom || bytes.Contains(p, m) || bytes.Contains(seam, m)
	}
	t.last = append(t.last[:0], p[max(0, len(p)-32):]...)
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tail) String() string { return t.buf.String() }

// Executable is this binary, to start children of.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own binary for the render sandbox: %w", err)
	}
	return exe, nil
}
