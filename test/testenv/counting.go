package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CountingPulumi puts a wrapper, laid out as <root>/bin/pulumi as the Automation API wants it, in
// front of the Pulumi CLI: it records each process's arguments, a line each, in counts, and its
// environment as it was given at exec in counts+".env", for the scans that look for credentials.
func CountingPulumi(t testing.TB, bin string) (wrapper, counts string) {
	t.Helper()
	dir := t.TempDir()
	wrapper, counts = filepath.Join(dir, "bin", "pulumi"), filepath.Join(dir, "pulumi-processes.txt")
	if err := os.MkdirAll(filepath.Dir(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %q\ntr '\\0' '\\n' < /proc/$$/environ >> %q\nexec %q \"$@\"\n", counts, counts+".env", bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, counts
}

// CountProcesses is how many Pulumi processes a CountingPulumi wrapper recorded.
func CountProcesses(counts string) int {
	data, _ := os.ReadFile(counts)
	return strings.Count(string(data), "\n")
}

// CountUps is how many of them were `pulumi up`.
func CountUps(counts string) int {
	data, _ := os.ReadFile(counts)
	n := 0
	for line := range strings.Lines(string(data)) {
		// The Automation API puts --non-interactive first.
		if args := strings.Fields(line); len(args) > 1 && args[0] == "--non-interactive" && args[1] == "up" || len(args) > 0 && args[0] == "up" {
			n++
		}
	}
	return n
}
