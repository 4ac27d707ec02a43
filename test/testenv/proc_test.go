package testenv

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestServersEndWithTheirTest: the servers a test starts (Gitea, Vault, PostgreSQL, sshd, a daemon
// of its own) end when the test binary is killed, where no cleanup of the test runs: a CI run
// stopped or timed out leaves nothing running. The test runs itself again as that binary (Child),
// kills it with SIGKILL and waits for every one of its servers to end.
func TestServersEndWithTheirTest(t *testing.T) {
	if file := os.Getenv("STANDS_HELPER_SERVERS_PIDS"); file != "" {
		daemon := exec.Command("sleep", "600")
		EndsWithTest(daemon)
		if err := daemon.Start(); err != nil {
			t.Fatal(err)
		}
		ChildReady(t, file, map[string]int{"gitea": StartGitea(t).Pid(), "vault": StartVault(t).Pid(), "postgres": StartPostgres(t).Pid(),
			"sshd": StartSSHD(t).cmd.Process.Pid, "daemon": daemon.Process.Pid})
		return
	}
	NeedsServer(t, "Gitea, Vault, PostgreSQL and sshd")
	pids, kill := Child(t, "TestServersEndWithTheirTest", "STANDS_HELPER_SERVERS_PIDS", 5*time.Minute)
	var all []int
	for name, pid := range pids {
		if !Running(pid) {
			t.Fatalf("%s (pid %d) does not run", name, pid)
		}
		all = append(all, pid)
	}
	if len(all) != 5 {
		t.Fatalf("the child's processes: %v", pids)
	}
	kill()
	WaitGone(t, all, 30*time.Second)
}
