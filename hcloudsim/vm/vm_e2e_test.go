//go:build e2e

package vm

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestVMsEndWithTheirProcessE2E: without Config.Detach a VM and its private network's switch end
// with the process that started them, however it ends: the test runs itself again as a process
// that starts one, kills that process with SIGKILL (no cleanup of its runs) and waits for QEMU and
// vde_switch to end. The VM is killed while it boots: nothing here waits for a guest.
func TestVMsEndWithTheirProcessE2E(t *testing.T) {
	if out := os.Getenv("STANDS_HELPER_VM_PIDS"); out != "" {
		bootUntilKilled(t, out)
		return
	}
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command(os.Args[0], "-test.run=^TestVMsEndWithTheirProcessE2E$", "-test.timeout=10m")
	// Its folders under one of this test's, removed with it (a killed test removes none of its own).
	tmp, err := os.MkdirTemp("", "vm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	cmd.Env = append(os.Environ(), "STANDS_HELPER_VM_PIDS="+pidFile, "TMPDIR="+tmp)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	data := wait.Value(t, "the VM to start", 2*time.Minute, func() ([]byte, bool) {
		data, err := os.ReadFile(pidFile)
		return data, err == nil
	}, wait.Every(100*time.Millisecond), wait.Unless(func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the test binary exited (%v):\n%s", err, out.String())
		default:
			return nil
		}
	}))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		name, pid, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(pid)
		if err != nil || !processIs(n, name) {
			t.Fatalf("%s: pid %q is not running it", name, pid)
		}
		pids = append(pids, n)
	}
	if len(pids) != 2 {
		t.Fatalf("pids: %q", data)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	testenv.WaitGone(t, pids, 30*time.Second)
}

// bootUntilKilled starts a VM on a private network, writes the pids of its QEMU and switch to file
// and waits to be killed.
func bootUntilKilled(t *testing.T, file string) {
	m, err := New(Config{Dir: t.TempDir(), FirstAddr: netip.MustParseAddr("127.0.11.1"), Log: testenv.Logger(t)})
	if err != nil {
		testenv.Missing(t, "%v", err)
	}
	_, err = m.Create(context.Background(), hcloudsim.MachineSpec{ID: 1, Name: "bound", WantIPv4: true,
		PrivateNets: []hcloudsim.MachineNet{{NetworkID: 1, IPRange: "10.9.0.0/24", IP: "10.9.0.2", MAC: "86:00:00:00:00:02"}}})
	if err != nil {
		t.Fatal(err)
	}
	hub, _ := readPID(filepath.Join(m.cfg.Dir, "net-1.pid"))
	pids := fmt.Sprintf("qemu-system-x86_64=%d vde_switch=%d", m.PIDs()[1], hub)
	if err := os.WriteFile(file+".tmp", []byte(pids), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Minute)
	t.Error("not killed")
}
