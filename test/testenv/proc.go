package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// ProcStatus is a size field of /proc/<pid>/status (VmHWM, VmRSS, …) in bytes.
func ProcStatus(t testing.TB, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// ResetPeakRSS starts a new peak (VmHWM) for the process.
func ResetPeakRSS(t testing.TB, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS of %d: %v", pid, err)
	}
}

// KillTree SIGKILLs pid and every process descending from it, as a crash of the machine would
// (localserver.KillTree).
func KillTree(pid int) { localserver.KillTree(pid) }

// ProcessesWithEnv lists the processes (this one aside) whose environment holds s, such as a
// daemon's state folder: the daemon, its Pulumi CLIs and their providers.
func ProcessesWithEnv(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ")); strings.Contains(string(env), s) {
			out = append(out, pid)
		}
	}
	return out
}

// Running says whether pid runs: a zombie, waiting for whoever inherited it to reap it, does not.
func Running(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// WaitGone fails the test unless every pid has ended within the time given.
func WaitGone(t testing.TB, pids []int, within time.Duration) {
	t.Helper()
	wait.NoError(t, fmt.Sprintf("%d processes to end", len(pids)), within, func() error {
		for _, pid := range pids {
			if Running(pid) {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
				return fmt.Errorf("pid %d (%s) still runs", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
		return nil
	}, wait.Every(20*time.Millisecond))
}

// EndsWithTest has cmd killed when the test binary ends, however it ends: a daemon a test started
// must not outlive a timed-out or killed run (localserver.EndWithThisProcess).
func EndsWithTest(cmd *exec.Cmd) { localserver.EndWithThisProcess(cmd) }

// Child runs this test binary again as the test named test, with env naming a file the child writes
// its processes to (ChildReady), in a temporary folder of its own; it returns them by name, and kill,
// which SIGKILLs the child — no cleanup of its runs — and waits for it. The check that what a test
// started ends with it, however it ends.
func Child(t *testing.T, test, env string, within time.Duration) (pids map[string]int, kill func()) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "pids")
	// Its folders under one of this test's, removed with it (a killed test removes none of its own).
	tmp, err := os.MkdirTemp("", "child")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o711); err != nil { // PostgreSQL runs as a user of its own under root
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), env+"="+file, "TMPDIR="+tmp)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	data := wait.Value(t, "the child's processes to start", within, func() ([]byte, bool) {
		data, err := os.ReadFile(file)
		return data, err == nil
	}, wait.Every(100*time.Millisecond), wait.Unless(func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the child exited (%v):\n%s", err, out.String())
		default:
			return nil
		}
	}))
	pids = map[string]int{}
	for _, f := range strings.Fields(string(data)) {
		name, pid, _ := strings.Cut(f, "=")
		if pids[name], err = strconv.Atoi(pid); err != nil {
			t.Fatalf("the child's processes: %q", data)
		}
	}
	return pids, func() {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-exited
	}
}

// ChildReady is the child's side of Child: it writes its processes by name, then waits to be
// killed; file is the value of Child's env.
func ChildReady(t *testing.T, file string, pids map[string]int) {
	var b strings.Builder
	for name, pid := range pids {
		fmt.Fprintf(&b, "%s=%d ", name, pid)
	}
	if err := os.WriteFile(file+".tmp", []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Minute)
	t.Error("not killed")
}
