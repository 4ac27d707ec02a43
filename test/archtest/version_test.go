package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestEveryBinaryIsStamped: every `go build` of a command in the Makefile stamps internal/version
// (through $(LDFLAGS) or naming it), and what it stamps is what the binary reports: hcloudsim, the
// smallest, is built by its make target and asked (the Debian package's end-to-end test asks
// stands-reconciler, `make demo-check` runs the demo's).
func TestEveryBinaryIsStamped(t *testing.T) {
	root := testenv.RepoRoot()
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	builds := regexp.MustCompile(`(?m)^\t.*\$\(GO\) build .*\./cmd/([\w-]+)$`).FindAllStringSubmatch(string(makefile), -1)
	for _, b := range builds {
		if !strings.Contains(b[0], "$(LDFLAGS)") && !strings.Contains(b[0], "/internal/version.Version=") {
			t.Errorf("the Makefile builds %s without stamping its version: %s", b[1], strings.TrimSpace(b[0]))
		}
	}
	if len(builds) < 4 {
		t.Fatalf("found %d builds of commands in the Makefile", len(builds))
	}
	testenv.NeedsServer(t, "make and the go command")
	bin := t.TempDir()
	const v = "v9.8.7-stamp-test"
	cmd := exec.Command("make", "-s", filepath.Join(bin, "hcloudsim"), "BIN="+bin, "VERSION="+v)
	cmd.Dir = root
	output(t, cmd)
	out, err := exec.Command(filepath.Join(bin, "hcloudsim"), "-version").CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != "hcloudsim "+v {
		t.Errorf("hcloudsim -version: %q (%v), want %q", got, err, "hcloudsim "+v)
	}
}
