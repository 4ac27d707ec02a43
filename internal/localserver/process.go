package localserver

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a server that can be stopped and started again: run in a process group of its own (so a stop
// reaches whatever it forks) with its output appended to a log file. It ends with the process that
// started it, however that one ends (EndWithThisProcess): a test or demo that is killed leaves no
// server behind.
type Process struct {
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan error // receives Wait's result once; Exited puts it back for the next reader
}

// StartProcess starts cmd with its output appended to logPath.
func StartProcess(cmd *exec.Cmd, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true // the caller's other attributes (a Credential) stay
	EndWithThisProcess(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, logFile: logFile, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// Exited reports, without waiting, whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case err := <-p.exited:
		p.exited <- err
		return true, err
	default:
		return false, nil
	}
}

// Pid is the process's id (and its process group's).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM to the process group, SIGKILL after 15 s, and waits for the end.
func (p *Process) Stop() { p.StopWithin(15 * time.Second) }

// StopWithin sends SIGTERM to the process group, SIGKILL after grace, and waits for the end.
func (p *Process) StopWithin(grace time.Duration) { p.StopWith(syscall.SIGTERM, grace) }

// StopWith sends sig to the process group, SIGKILL after grace, and waits for the end: for servers
// whose SIGTERM waits for their clients (PostgreSQL's fast shutdown is SIGINT).
func (p *Process) StopWith(sig syscall.Signal, grace time.Duration) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.exited <- <-p.exited
	}
	p.logFile.Close()
}

// EndWithThisProcess has the kernel send cmd SIGKILL when this process ends, a kill -9 or a test
// binary's timeout panic included, when no cleanup of ours runs (Pdeathsig). The kernel sends it
// when the thread that started cmd ends, and Go ends a thread only under a goroutine that locked it
// (runtime.LockOSThread), which no caller does.
func EndWithThisProcess(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
