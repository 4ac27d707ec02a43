// Package vm is hcloudsim's VM machine backend: each simulated server is a real QEMU virtual machine
// booted from the image scripts/vm-image.sh builds, with the server's user data handed to cloud-init
// through a NoCloud seed. A server's public IPv4 is a loopback address of its own (127.0.10.N), where
// QEMU user networking forwards SSH (22) and, on request, any other port; guests cannot open
// connections out (restrict=on) except to the test registry through a guestfwd. The private networks
// are vde_switch hubs, so any number of servers share one.
package vm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
)

// Config says where images and servers live and how VMs run.
type Config struct {
	// Dir holds one folder per server (overlay disk, seed, console log, QMP socket, pid) and the
	// private networks' switches.
	Dir string
	// ImageDir holds base.qcow2, vmlinuz and initrd.img (scripts/vm-image.sh; default
	// $STANDS_VM_DIR/img or /var/tmp/stands-vm/img).
	ImageDir string
	// Accel is "auto" (default: kvm when ProbeKVM shows it boots the image, else tcg), "tcg" or
	// "kvm". Here /dev/kvm is a software hypervisor that hangs stock kernels, so auto means tcg.
	Accel    string
	MemoryMB int // per VM (1024)
	// FirstAddr is the first loopback address handed out as a public IPv4 (127.0.10.1).
	FirstAddr netip.Addr
	// Registry is a host:port on the host's loopback that guests reach as RegistryGuestAddr.
	Registry string
	// Share, when set, is a folder every VM gets read-only as a disk labelled ShareLabel (an ISO 9660
	// image of it, made when the first VM starts): a guest under TCG reads a disk many times faster
	// than it takes a file over SSH.
	Share string
	// Detach lets the VMs and switches outlive the process that started them: a simulator started
	// again on the same Dir reattaches them (cmd/hcloudsim). Unset, each ends with this process,
	// however it ends, a kill included: a test stopped or timed out leaves no QEMU behind.
	Detach bool
	Log    *slog.Logger
}

// ShareLabel is the label of Config.Share's disk in the guests (/dev/disk/by-label/STANDS_SHARE).
const ShareLabel = "STANDS_SHARE"

// The user network's range: not QEMU's default 10.0.2.0/24, which overlaps the stands' private
// ranges (10.0.0.0/16 in the examples) and would put the host's traffic into the firewall zone the
// stand trusts for its private network.
const userNet = "192.168.76.0/24"

// RegistryGuestAddr is where guests reach Config.Registry.
const RegistryGuestAddr = "192.168.76.100:5000"

// Machines runs VMs. It implements hcloudsim.Machine.
type Machines struct {
	cfg Config

	shareOnce sync.Once
	shareISO  string
	shareErr  error

	mu      sync.Mutex
	servers map[int64]*server
	used    map[netip.Addr]bool
	// holds are the write ends of the switches' consoles (Detach unset): a switch ends when its
	// console does, so with this process at the latest.
	holds []*os.File
}

var _ hcloudsim.Machine = (*Machines)(nil)

type server struct {
	spec hcloudsim.MachineSpec
	addr netip.Addr
	dir  string
}

// New checks the image and the tools and returns the backend.
func New(cfg Config) (*Machines, error) {
	if cfg.Dir == "" {
		return nil, errors.New("vm: Dir is required")
	}
	if cfg.ImageDir == "" {
		cfg.ImageDir = filepath.Join(DefaultDir(), "img")
	}
	if cfg.Accel == "" {
		cfg.Accel = "auto"
	}
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 1024
	}
	if !cfg.FirstAddr.IsValid() {
		cfg.FirstAddr = netip.MustParseAddr("127.0.10.1")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	for _, f := range []string{"base.qcow2", "vmlinuz", "initrd.img"} {
		if _, err := os.Stat(filepath.Join(cfg.ImageDir, f)); err != nil {
			return nil, fmt.Errorf("vm: no %s in %s: build it with scripts/vm-image.sh (make vm-image)", f, cfg.ImageDir)
		}
	}
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "cloud-localds", "vde_switch", "nc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("vm: %s is missing: run scripts/install-deps.sh", tool)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if cfg.Accel == "auto" {
		cfg.Accel = "tcg"
		if ProbeKVM(context.Background(), cfg.ImageDir) {
			cfg.Accel = "kvm"
		}
		cfg.Log.Info("vm acceleration", "accel", cfg.Accel)
	}
	return &Machines{cfg: cfg, servers: map[int64]*server{}, used: map[netip.Addr]bool{}}, nil
}

// DefaultDir is $STANDS_VM_DIR or /var/tmp/stands-vm: the image cache, outside the repository.
func DefaultDir() string {
	if d := os.Getenv("STANDS_VM_DIR"); d != "" {
		return d
	}
	return "/var/tmp/stands-vm"
}

// Create starts the server's VM and returns at once; the guest boots in the background.
func (m *Machines) Create(ctx context.Context, spec hcloudsim.MachineSpec) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &server{spec: spec, dir: filepath.Join(m.cfg.Dir, strconv.FormatInt(spec.ID, 10))}
	addr, err := m.freeAddr()
	if err != nil {
		return "", err
	}
	s.addr = addr
	// A host sshd listening on *:22 holds port 22 of every loopback address: say so instead of
	// letting QEMU fail with "could not set up host forwarding rule".
	ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), "22"))
	if err != nil {
		return "", fmt.Errorf("vm: port 22 of %s is taken (a host sshd listening on *:22?): run the VM tests in a network namespace of their own: %w", addr, err)
	}
	ln.Close()
	if err := os.RemoveAll(s.dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return "", err
	}
	if err := run(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", filepath.Join(m.cfg.ImageDir, "base.qcow2"),
		filepath.Join(s.dir, "disk.qcow2")); err != nil {
		return "", err
	}
	if err := m.seed(ctx, s); err != nil {
		return "", err
	}
	if err := m.start(ctx, s); err != nil {
		return "", err
	}
	m.used[addr] = true
	m.servers[spec.ID] = s
	m.cfg.Log.Info("vm started", "server", spec.Name, "server_id", spec.ID, "ssh", net.JoinHostPort(addr.String(), "22"))
	if !spec.WantIPv4 {
		return "", nil
	}
	return addr.String(), nil
}

func (m *Machines) freeAddr() (netip.Addr, error) {
	for a := m.cfg.FirstAddr; a.Is4() && a.As4()[0] == 127; a = a.Next() {
		if a.As4()[3] == 0 || a.As4()[3] == 255 || m.used[a] {
			continue
		}
		return a, nil
	}
	return netip.Addr{}, errors.New("vm: no loopback address left")
}

// seed writes the NoCloud seed: the server's user data, and a network config giving the first NIC
// DHCP from QEMU and each private NIC the address the simulator allocated.
func (m *Machines) seed(ctx context.Context, s *server) error {
	var nc strings.Builder
	nc.WriteString("version: 1\nconfig:\n  - type: physical\n    name: ens3\n    mac_address: \"" + publicMAC(s.spec.ID) + "\"\n    subnets: [{type: dhcp}]\n")
	for i, n := range s.spec.PrivateNets {
		bits := 24
		if p, err := netip.ParsePrefix(n.IPRange); err == nil {
			bits = p.Bits()
		}
		fmt.Fprintf(&nc, "  - type: physical\n    name: ens%d\n    mac_address: %q\n    subnets: [{type: static, address: %s/%d}]\n", 4+i, n.MAC, n.IP, bits)
	}
	files := map[string]string{
		"user-data":      s.spec.UserData,
		"meta-data":      fmt.Sprintf("instance-id: hcloudsim-%d\nlocal-hostname: %s\n", s.spec.ID, s.spec.Name),
		"network-config": nc.String(),
	}
	if files["user-data"] == "" {
		files["user-data"] = "#cloud-config\n{}\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(s.dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return run(ctx, "cloud-localds", "-N", filepath.Join(s.dir, "network-config"), filepath.Join(s.dir, "seed.img"),
		filepath.Join(s.dir, "user-data"), filepath.Join(s.dir, "meta-data"))
}

// share makes Config.Share's image once ("" without a share).
func (m *Machines) share(ctx context.Context) (string, error) {
	if m.cfg.Share == "" {
		return "", nil
	}
	m.shareOnce.Do(func() {
		m.shareISO = filepath.Join(m.cfg.Dir, "share.iso")
		m.shareErr = run(ctx, "genisoimage", "-quiet", "-R", "-iso-level", "3", "-V", ShareLabel, "-o", m.shareISO, m.cfg.Share)
	})
	return m.shareISO, m.shareErr
}

// publicMAC is the first NIC's address; private NICs use the simulator's MACs.
func publicMAC(id int64) string {
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", byte(id>>16), byte(id>>8), byte(id))
}

// start runs QEMU for a server whose disk and seed exist.
func (m *Machines) start(ctx context.Context, s *server) error {
	accel := "tcg,tb-size=256"
	cpu := "max"
	// mitigations=off under TCG: the emulated CPU gains nothing from the kernel's Spectre work
	// (retpolines, the return stack filled at every context switch), every instruction of which is
	// emulated; these guests run only the test's own processes.
	cmdline := "root=/dev/vda rw console=ttyS0 mitigations=off"
	if m.cfg.Accel == "kvm" {
		accel, cpu, cmdline = "kvm", "host", "root=/dev/vda rw console=ttyS0"
	}
	user := fmt.Sprintf("user,id=n0,net=%s,restrict=on,hostfwd=tcp:%s:22-:22", userNet, s.addr)
	if m.cfg.Registry != "" {
		// A tcp: target is one connection made when QEMU starts; cmd: runs nc for every connection.
		host, port, err := net.SplitHostPort(m.cfg.Registry)
		if err != nil {
			return fmt.Errorf("vm: registry %q: %w", m.cfg.Registry, err)
		}
		user += ",guestfwd=tcp:" + RegistryGuestAddr + "-cmd:nc " + host + " " + port
	}
	iso, err := m.share(ctx)
	if err != nil {
		return err
	}
	args := []string{"-name", "hcloudsim-" + strconv.FormatInt(s.spec.ID, 10), "-machine", "pc", "-accel", accel, "-cpu", cpu,
		"-m", strconv.Itoa(m.cfg.MemoryMB), "-smp", "1",
		"-kernel", filepath.Join(m.cfg.ImageDir, "vmlinuz"), "-initrd", filepath.Join(m.cfg.ImageDir, "initrd.img"),
		"-append", cmdline,
		"-drive", "file=" + filepath.Join(s.dir, "disk.qcow2") + ",if=virtio,format=qcow2",
		"-drive", "file=" + filepath.Join(s.dir, "seed.img") + ",if=virtio,format=raw,readonly=on",
		"-netdev", user, "-device", "virtio-net-pci,netdev=n0,mac=" + publicMAC(s.spec.ID)}
	for i, n := range s.spec.PrivateNets {
		sock, err := m.hub(ctx, n.NetworkID)
		if err != nil {
			return err
		}
		id := fmt.Sprintf("p%d", i)
		args = append(args, "-netdev", "vde,id="+id+",sock="+sock, "-device", "virtio-net-pci,netdev="+id+",mac="+n.MAC)
	}
	if iso != "" {
		args = append(args, "-drive", "file="+iso+",if=virtio,format=raw,readonly=on")
	}
	args = append(args, "-display", "none", "-serial", "file:"+filepath.Join(s.dir, "console.log"),
		"-qmp", "unix:"+filepath.Join(s.dir, "qmp.sock")+",server=on,wait=off", "-pidfile", filepath.Join(s.dir, "qemu.pid"))
	if m.cfg.Detach {
		return run(ctx, "qemu-system-x86_64", append(args, "-daemonize")...)
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	logPath := filepath.Join(s.dir, "qemu.log")
	exited, err := spawn(cmd, logPath)
	if err != nil {
		return err
	}
	// Up once its monitor answers, as -daemonize returns once QEMU has set the machine up.
	for range 600 {
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("vm: qemu-system-x86_64 exited at its start: %s", strings.TrimSpace(string(out)))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return ctx.Err()
		default:
		}
		if _, err := qmp(filepath.Join(s.dir, "qmp.sock"), "query-status", nil); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("vm: qemu %d: its monitor did not answer within a minute", cmd.Process.Pid)
}

// spawn starts a program of the VMs bound to this process (Config.Detach unset): in its process
// group, so a kill of the group reaches it, and sent SIGKILL by the kernel when this process ends
// (Pdeathsig; the kernel sends it when the thread that started it ends, and Go ends a thread only
// under a goroutine that locked it, which nothing here does). Its output goes to logPath; it is
// reaped when it exits, which closes the channel returned.
func spawn(cmd *exec.Cmd, logPath string) (<-chan struct{}, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vm: start %s: %w", filepath.Base(cmd.Path), err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return exited, nil
}

// hub is the vde_switch of a private network, started on first use as a daemon of its own, so a
// simulator restart finds it running.
func (m *Machines) hub(ctx context.Context, network int64) (string, error) {
	sock := filepath.Join(m.cfg.Dir, fmt.Sprintf("net-%d", network))
	pidFile := sock + ".pid"
	if pid, ok := readPID(pidFile); ok && processIs(pid, "vde_switch") {
		return sock, nil
	}
	_ = os.RemoveAll(sock)
	if m.cfg.Detach {
		if err := run(ctx, "vde_switch", "-s", sock, "-x", "-d", "-p", pidFile); err != nil {
			return "", err
		}
	} else if err := m.spawnHub(sock, pidFile); err != nil {
		return "", err
	}
	for range 100 {
		if _, err := os.Stat(filepath.Join(sock, "ctl")); err == nil {
			return sock, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("vm: vde_switch for network %d did not come up", network)
}

// spawnHub starts a switch bound to this process: its console is a pipe whose write end only this
// process holds, and it ends at the console's end.
func (m *Machines) spawnHub(sock, pidFile string) error {
	console, hold, err := os.Pipe()
	if err != nil {
		return err
	}
	defer console.Close()
	cmd := exec.Command("vde_switch", "-s", sock, "-x")
	cmd.Stdin = console
	if _, err := spawn(cmd, sock+".log"); err != nil {
		hold.Close()
		return err
	}
	m.holds = append(m.holds, hold)
	return os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600)
}

// Delete kills the server's VM by pid and removes its disk.
func (m *Machines) Delete(_ context.Context, id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.servers[id]
	if !ok {
		return nil
	}
	if err := kill(s.dir); err != nil {
		return err
	}
	delete(m.servers, id)
	delete(m.used, s.addr)
	m.cfg.Log.Info("vm deleted", "server", s.spec.Name, "server_id", id)
	return os.RemoveAll(s.dir)
}

// Power: off stops the VM and keeps its disk; on starts it again; reboot resets it.
func (m *Machines) Power(ctx context.Context, id int64, op hcloudsim.PowerOp) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.servers[id]
	if !ok {
		return fmt.Errorf("vm: no server %d", id)
	}
	switch op {
	case hcloudsim.PowerOff:
		return kill(s.dir)
	case hcloudsim.PowerOn:
		if alive(s.dir) {
			return nil
		}
		return m.start(ctx, s)
	case hcloudsim.Reboot:
		_, err := qmp(filepath.Join(s.dir, "qmp.sock"), "system_reset", nil)
		return err
	}
	return fmt.Errorf("vm: unknown power operation %q", op)
}

// Reattach takes over a server after a simulator restart: a VM that still runs is kept, one that
// does not is booted again from its disk.
func (m *Machines) Reattach(ctx context.Context, spec hcloudsim.MachineSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &server{spec: spec, dir: filepath.Join(m.cfg.Dir, strconv.FormatInt(spec.ID, 10))}
	addr, err := netip.ParseAddr(spec.PublicIPv4)
	if err != nil || !addr.IsLoopback() {
		return fmt.Errorf("vm: server %d has no loopback address (%q)", spec.ID, spec.PublicIPv4)
	}
	s.addr = addr
	m.servers[spec.ID], m.used[addr] = s, true
	if alive(s.dir) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(s.dir, "disk.qcow2")); err != nil {
		return fmt.Errorf("vm: server %d lost its disk: %w", spec.ID, err)
	}
	return m.start(ctx, s)
}

// ExposePort forwards the server's port to the same port on its loopback address, at run time
// through the QEMU monitor.
func (m *Machines) ExposePort(_ context.Context, id int64, port int) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.servers[id]
	if !ok {
		return "", fmt.Errorf("vm: no server %d", id)
	}
	out, err := qmp(filepath.Join(s.dir, "qmp.sock"), "human-monitor-command",
		map[string]any{"command-line": fmt.Sprintf("hostfwd_add n0 tcp:%s:%d-:%d", s.addr, port, port)})
	if err != nil {
		return "", err
	}
	if msg := strings.TrimSpace(fmt.Sprint(out)); msg != "" && msg != "<nil>" {
		return "", fmt.Errorf("vm: hostfwd_add: %s", msg)
	}
	return net.JoinHostPort(s.addr.String(), strconv.Itoa(port)), nil
}

// Close stops every VM and switch. The disks stay (a new Machines may Reattach them).
func (m *Machines) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, s := range m.servers {
		errs = append(errs, kill(s.dir))
	}
	switches, _ := filepath.Glob(filepath.Join(m.cfg.Dir, "net-*.pid"))
	for _, f := range switches {
		if pid, ok := readPID(f); ok && processIs(pid, "vde_switch") {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		_ = os.Remove(f)
	}
	for _, h := range m.holds {
		h.Close()
	}
	m.holds = nil
	return errors.Join(errs...)
}

// Console is the server's serial console output so far, for diagnostics.
func (m *Machines) Console(id int64) string {
	data, _ := os.ReadFile(filepath.Join(m.cfg.Dir, strconv.FormatInt(id, 10), "console.log"))
	return string(data)
}

// PIDs lists the QEMU processes of the servers, for tests that check none is left.
func (m *Machines) PIDs() map[int64]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int64]int{}
	for id, s := range m.servers {
		if pid, ok := pidOf(s.dir); ok {
			out[id] = pid
		}
	}
	return out
}

func pidOf(dir string) (int, bool) { return readPID(filepath.Join(dir, "qemu.pid")) }

func readPID(file string) (int, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid, err == nil
}

// processIs reports whether pid runs a program whose command line contains name.
func processIs(pid int, name string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), name)
}

// alive reports whether the pid file names a running QEMU of this folder (not a reused pid).
func alive(dir string) bool {
	pid, ok := pidOf(dir)
	return ok && processIs(pid, filepath.Join(dir, "disk.qcow2"))
}

// kill stops a VM: SIGTERM, then SIGKILL after 10 s; it returns once the process is gone.
func kill(dir string) error {
	if !alive(dir) {
		return nil
	}
	pid, _ := pidOf(dir)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 200; i++ {
		if !alive(dir) {
			return nil
		}
		if i == 100 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("vm: qemu %d did not stop", pid)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
