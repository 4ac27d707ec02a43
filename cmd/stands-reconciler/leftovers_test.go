package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// credentialsOnDisk lists the files under dirs that hold any of the secrets.
func credentialsOnDisk(t *testing.T, secrets []string, dirs ...string) []string {
	t.Helper()
	var found []string
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !e.Type().IsRegular() {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, s := range secrets {
				if bytes.Contains(data, []byte(s)) {
					found = append(found, p)
					break
				}
			}
			return nil
		})
	}
	return found
}

// TestKillLeavesNoCredential: while an apply runs, its workspace holds the Hetzner token and the
// passphrase in files (the scan's positive control: it finds them). kill -9 of the daemon takes
// its Pulumi CLI with it and leaves those files behind; the next start removes them before its
// first operation, the stand is finished, and after every operation and after the stop no file of
// the state folder or the temporary folder holds a credential, no process and no lock is left.
func TestKillLeavesNoCredential(t *testing.T) {
	h := testenv.StartHetzner(t, "leftover-token-8c1f", hcloudsim.WithActionDelay(6*time.Second))
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{standPath("p"): plainStand("p")})
	d := newLocalDaemon(t, lr, h, "--poll-interval", "2s")
	secrets := []string{h.Token, d.pl.Passphrase}
	scan := func() []string { return credentialsOnDisk(t, secrets, d.state, d.tmp) }
	d.start()
	d.waitCreate()
	if during := scan(); len(during) == 0 {
		t.Fatal("no credential found on disk during the apply: the scan cannot see one")
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d.cmd = nil
	testenv.WaitGone(t, testenv.ProcessesWithEnv(d.state), 30*time.Second) // its CLI dies with it (Pdeathsig)
	left := scan()
	if len(left) == 0 {
		t.Fatal("kill -9 left no credential behind: the case shows nothing")
	}
	t.Logf("kill -9 during the apply left %d credential files", len(left))

	d.start()
	st := d.waitStatus("local_p_dev", 3*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Ready })
	if n := len(h.Servers(t)); n != 1 {
		t.Errorf("%d servers after the restart, want 1 (%+v)", n, st)
	}
	if !strings.Contains(d.log(), "removed workspace folders a stopped process left") {
		t.Errorf("the start does not say it removed the killed run's workspaces")
	}
	// Between operations (the daemon polls every 2 s, each cycle may read the state): no credential.
	for range 5 {
		if found := scan(); len(found) > 0 {
			// A cycle's inventory may be under way: look again once it ended.
			time.Sleep(300 * time.Millisecond)
			if again := scan(); len(again) > 0 && again[0] == found[0] {
				t.Errorf("a credential on disk between operations: %v", again)
				break
			}
		}
		time.Sleep(time.Second)
	}
	if code, _ := d.stop(syscall.SIGTERM, 2*time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	if found := scan(); len(found) > 0 {
		t.Errorf("credentials on disk after the stop: %v", found)
	}
	if procs := testenv.ProcessesWithEnv(d.state); len(procs) > 0 {
		t.Errorf("processes left after the stop: %v", procs)
	}
	if locks := d.locks(); len(locks) != 0 {
		t.Errorf("locks left: %v", locks)
	}
}
