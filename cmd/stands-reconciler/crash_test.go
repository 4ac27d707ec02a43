package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// runMainEnv makes the test binary behave as the real command (see TestMain), so a test can run the
// reconciler in a process of its own and kill it.
const runMainEnv = "STANDS_TEST_RUN_MAIN"

// TestCrashDuringApply kills every process of the apply — our binary, the Pulumi CLI and the provider —
// with SIGKILL after the first server create reached Hetzner, checks that a lock and a pending
// operation were left behind, and that the next apply converges: no duplicate server, no orphan, no
// lock.
func TestCrashDuringApply(t *testing.T) {
	pl := testenv.NewPulumi(t)
	// Actions run for a long time, so the provider is still waiting when the kill comes.
	h := testenv.StartHetzner(t, "crash-token", hcloudsim.WithActionDelay(4*time.Second))
	stateDir := t.TempDir()
	vars := map[string]string{
		"HCLOUD_TOKEN": h.Token, "STANDS_CLOUD_ENDPOINT": h.Endpoint, "STANDS_PASSPHRASE": pl.Passphrase, "STANDS_NODES": "skip",
		"STANDS_PULUMI_BIN": pl.Bin, "STANDS_STATE_DIR": stateDir, "STANDS_OWNER": "demo", "PULUMI_HOME": pl.Home,
		"STANDS_BACKEND_URL": "file://" + filepath.Join(stateDir, "pulumi", "demo"),
	}
	for k, v := range exampleEnv {
		vars[k] = v
	}
	stand := "../../examples/stands-repo/stands/two-node"
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "apply", stand)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	testenv.EndsWithTest(cmd)
	logf, err := os.Create(filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err = wait.Until(context.Background(), 90*time.Second, func() error {
		for _, c := range h.Sim.Calls() {
			if c.Method == http.MethodPost && c.Path == "/servers" {
				return nil
			}
		}
		return errors.New("no server create")
	}, wait.Every(20*time.Millisecond))
	if err != nil {
		testenv.KillTree(cmd.Process.Pid)
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("waiting for a server create: %v\n%s", err, log)
	}
	time.Sleep(300 * time.Millisecond) // let the second node's create go out too, if it will
	testenv.KillTree(cmd.Process.Pid)  // our binary, the Pulumi CLI (a process group of its own) and the provider
	_ = cmd.Wait()

	backend := filepath.Join(stateDir, "pulumi", "demo")
	locks, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "locks", "organization", "demo", "two-node", "*.json"))
	if len(locks) == 0 {
		t.Fatal("no lock file left by the killed run")
	}
	if n := pendingOperations(t, filepath.Join(backend, ".pulumi", "stacks", "demo", "two-node.json")); n == 0 {
		t.Fatal("no pending operation in the checkpoint")
	}
	before := len(h.Servers(t))

	r := runCLI(t, context.Background(), newRecorder(vars), "apply", stand)
	if r.code != 0 {
		t.Fatalf("apply after the crash: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "removed a stale stack lock") || !strings.Contains(r.stderr, "pending operation left by an interrupted run") {
		t.Errorf("recovery not logged:\n%s", r.stderr)
	}
	srvs := h.Servers(t)
	if len(srvs) != 2 || srvs["demo-demo-two-node-db"] == nil || srvs["demo-demo-two-node-web"] == nil {
		t.Fatalf("servers after recovery: %v (the killed run had created %d)", srvs, before)
	}
	if locks, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "locks", "organization", "demo", "two-node", "*")); len(locks) != 0 {
		t.Errorf("locks left: %v", locks)
	}
	r = runCLI(t, context.Background(), newRecorder(vars), "orphans")
	if r.code != 0 || !strings.Contains(r.stdout, `"orphans":[]`) {
		t.Errorf("orphans after recovery: %s %s", r.stdout, r.stderr)
	}
	r = runCLI(t, context.Background(), newRecorder(vars), "destroy", "demo_demo_two-node")
	if r.code != 0 || len(h.Servers(t)) != 0 {
		t.Errorf("destroy after recovery: exit %d, %d servers\n%s", r.code, len(h.Servers(t)), r.stderr)
	}
}

// pendingOperations counts the pending operations of a diy backend's stack file.
func pendingOperations(t *testing.T, stackFile string) int {
	t.Helper()
	checkpoint, err := os.ReadFile(stackFile)
	if err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	var cp struct {
		Checkpoint struct {
			Latest struct {
				Pending []json.RawMessage `json:"pending_operations"`
			} `json:"latest"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(checkpoint, &cp); err != nil {
		t.Fatalf("%s: %v", stackFile, err)
	}
	return len(cp.Checkpoint.Latest.Pending)
}
