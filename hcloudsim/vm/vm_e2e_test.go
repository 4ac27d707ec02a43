//go:build e2e

package vm

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestVMsEndWithTheirProcessE2E: without Config.Detach a VM and its private network's switch end
// with the process that started them, however it ends: the test runs itself again as a process
// that starts one, kills that process with SIGKILL (no cleanup of its runs) and waits for QEMU and
// vde_switch to end. The VM is killed while it boots: nothing here waits for a guest.
func TestVMsEndWithTheirProcessE2E(t *testing.T) {
	if file := os.Getenv("STANDS_HELPER_VM_PIDS"); file != "" {
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
		testenv.ChildReady(t, file, map[string]int{"qemu-system-x86_64": m.PIDs()[1], "vde_switch": hub})
		return
	}
	pids, kill := testenv.Child(t, "TestVMsEndWithTheirProcessE2E", "STANDS_HELPER_VM_PIDS", 2*time.Minute)
	var all []int
	for name, pid := range pids {
		if !processIs(pid, name) {
			t.Fatalf("%s: pid %d is not running it", name, pid)
		}
		all = append(all, pid)
	}
	if len(all) != 2 {
		t.Fatalf("the child's processes: %v", pids)
	}
	kill()
	testenv.WaitGone(t, all, 30*time.Second)
}
