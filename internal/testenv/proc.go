package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
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
