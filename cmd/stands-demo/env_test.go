package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOneDemoAtATime(t *testing.T) {
	p := &paths{root: filepath.Join(t.TempDir(), "_demo")}
	f, err := lock(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lock(p)
	if !errors.Is(err, errRunning) || !strings.Contains(err.Error(), "make demo-down") {
		t.Fatalf("a second demo: %v, want errRunning naming make demo-down", err)
	}
	f.Close()
	g, err := lock(p)
	if err != nil {
		t.Fatalf("after the first demo ended: %v", err)
	}
	g.Close()
}

// A demo killed with -9 leaves its servers running: the next demo (or `down`) ends them, and only
// them: a recorded pid now running elsewhere is another program's.
func TestLeftoversAreEnded(t *testing.T) {
	p := &paths{root: filepath.Join(t.TempDir(), "_demo")}
	f, err := lock(p)
	if err != nil {
		t.Fatal(err)
	}
	ours := sleeper(t, p.join("gitea"))
	other := sleeper(t, t.TempDir())
	for name, cmd := range map[string]*exec.Cmd{"gitea": ours, "vault": other} {
		if err := record(p, name, cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	f.Close() // the demo is gone; its lock with it

	f, err = lock(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !exited(ours) {
		t.Error("the killed demo's server still runs after the next demo started")
	}
	if exited(other) {
		t.Error("a process outside the demo's folder was killed")
	}
	if entries, _ := os.ReadDir(p.root); len(entries) != 2 { // demo.lock, demo.pid
		t.Errorf("the folder was not cleaned: %v", entries)
	}
	if err := down(p, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("down left %s: %v", p.root, err)
	}
}

func sleeper(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return spawn(t, dir, "sleep")
}

// spawn starts `sleep 300` in dir with argv0 as its argv[0], killed when the test ends.
func spawn(t *testing.T, dir, argv0 string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.Dir, cmd.Args[0] = dir, argv0
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd
}

// exited reports whether cmd has ended within a few seconds (a killed child is a zombie until
// Wait, so the signal 0 probe alone cannot tell).
func exited(cmd *exec.Cmd) bool {
	for range 20 {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil || strings.Contains(string(data), ") Z ") {
			return true
		}
		if syscall.Kill(cmd.Process.Pid, 0) != nil {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
