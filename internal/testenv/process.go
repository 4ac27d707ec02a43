package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a server a test can stop and start again: run in a process group of its own (so a stop
// reaches whatever it forks) with its output appended to a log file.
type process struct {
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan error // receives Wait's result once; exitedNow puts it back for the next reader
}

// startProcess starts cmd with its output appended to logPath.
func startProcess(cmd *exec.Cmd, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, logFile: logFile, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// exitedNow reports, without waiting, whether the process has ended, and how.
func (p *process) exitedNow() (bool, error) {
	select {
	case err := <-p.exited:
		p.exited <- err
		return true, err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, SIGKILL after 15 s, and waits for the end.
func (p *process) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.exited <- <-p.exited
	}
	p.logFile.Close()
}
