package localserver

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// KillTree SIGKILLs pid and every process descending from it, as a crash of the machine would: each
// is stopped first, so none can start another or react to the others' end. A process group is not
// enough: the engine starts each Pulumi CLI in a group of its own.
func KillTree(pid int) {
	stopped := map[int]bool{}
	for fresh := true; fresh; {
		fresh = false
		for _, p := range append(descendants(pid), pid) {
			if !stopped[p] {
				_ = syscall.Kill(p, syscall.SIGSTOP)
				stopped[p], fresh = true, true
			}
		}
	}
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// descendants lists the processes below root, from every /proc/<pid>/stat's parent.
func descendants(root int) []int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid …": comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(data), ')'); i > 0 {
			if f := strings.Fields(string(data[i+1:])); len(f) > 1 {
				if ppid, err := strconv.Atoi(f[1]); err == nil {
					parent[pid] = ppid
				}
			}
		}
	}
	var out []int
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
