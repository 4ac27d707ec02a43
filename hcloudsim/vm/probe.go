package vm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ProbeKVM reports whether KVM really boots the image's kernel here: it boots it with no root
// filesystem under -accel kvm and watches the serial console for the kernel reaching init (and
// panicking, as it must without one). A software hypervisor posing as /dev/kvm (as on these
// machines) hangs or crashes instead. The answer is cached next to the image, per kernel.
func ProbeKVM(ctx context.Context, imageDir string) bool {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false
	}
	kernel := filepath.Join(imageDir, "vmlinuz")
	st, err := os.Stat(kernel)
	if err != nil {
		return false
	}
	cache := filepath.Join(imageDir, "kvm-probe")
	stamp := st.ModTime().UTC().Format(time.RFC3339Nano)
	if data, err := os.ReadFile(cache); err == nil {
		if v, ok := strings.CutPrefix(string(data), stamp+" "); ok {
			return strings.TrimSpace(v) == "kvm"
		}
	}
	ok := probe(ctx, kernel)
	verdict := "tcg"
	if ok {
		verdict = "kvm"
	}
	_ = os.WriteFile(cache, []byte(stamp+" "+verdict+"\n"), 0o644)
	return ok
}

func probe(ctx context.Context, kernel string) bool {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256", "-kernel", kernel,
		"-append", "console=ttyS0 panic=-1 rdinit=/stands-no-init", "-no-reboot", "-display", "none", "-serial", "stdio", "-nodefaults")
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run()
	return strings.Contains(out.String(), "Kernel panic") || strings.Contains(out.String(), "stands-no-init")
}
