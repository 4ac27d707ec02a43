package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/test/wait"
	"os/exec"
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
