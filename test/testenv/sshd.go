package testenv

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHD is OpenSSH's sshd serving 127.0.0.1 with its own host key and one authorized client key.
type SSHD struct {
	Addr    string // 127.0.0.1:PORT
	User    string // the user to log in as (the one running the tests)
	Signer  ssh.Signer
	HostKey ssh.PublicKey

	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
	done chan error
}

// StartSSHD runs a real sshd until the test ends (Start/Stop to simulate an outage or a late boot).
func StartSSHD(t testing.TB) *SSHD {
	t.Helper()
	bin := Binary(t, "sshd", "STANDS_SSHD_BIN")
	if _, err := os.Stat(bin); err != nil {
		Missing(t, "sshd: %v", err)
	}
	s := &SSHD{t: t, dir: t.TempDir(), port: FreePort(t)}
	s.Addr = fmt.Sprintf("127.0.0.1:%d", s.port)
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	s.User = u.Username
	writeKey := func(name string) ssh.Signer {
		signer, _ := NewSSHKey(t, s.dir, name)
		return signer
	}
	host := writeKey("host_ed25519")
	s.HostKey = host.PublicKey()
	s.Signer = writeKey("client_ed25519")
	if err := os.WriteFile(filepath.Join(s.dir, "authorized_keys"), ssh.MarshalAuthorizedKey(s.Signer.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %[2]s/host_ed25519
AuthorizedKeysFile %[2]s/authorized_keys
PidFile %[2]s/sshd.pid
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
LogLevel ERROR
`, s.port, s.dir)
	if err := os.WriteFile(filepath.Join(s.dir, "sshd_config"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// sshd wants its privilege separation folder.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		Missing(t, "sshd needs /run/sshd: %v", err)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start runs sshd and waits until it accepts connections.
func (s *SSHD) Start() {
	s.t.Helper()
	// A file, not a pipe: sshd's per-connection children (their own sessions) would hold a pipe open
	// and keep Wait from returning after Stop.
	logPath := filepath.Join(s.dir, "sshd.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	out := func() string { data, _ := os.ReadFile(logPath); return string(data) }
	s.cmd = exec.Command(Binary(s.t, "sshd", "STANDS_SSHD_BIN"), "-D", "-e", "-f", filepath.Join(s.dir, "sshd_config"))
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	EndsWithTest(s.cmd)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start sshd: %v", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	for range 200 {
		if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case err := <-s.done:
			s.t.Fatalf("sshd exited: %v\n%s", err, out())
		default:
		}
		time.Sleep(25 * time.Millisecond)
	}
	s.t.Fatalf("sshd does not listen on %s:\n%s", s.Addr, out())
}

// Stop ends sshd.
func (s *SSHD) Stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	<-s.done
	s.cmd = nil
}

// NewSSHKey makes an ed25519 key, writes it in OpenSSH's format (no passphrase, mode 0600) to
// dir/name, and returns its signer and the file.
func NewSSHKey(t testing.TB, dir, name string) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, file
}
