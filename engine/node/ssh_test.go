package node

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestSSH runs against OpenSSH's sshd on loopback: commands with stdout, stdin and stderr, exit
// statuses and timeouts; the host key is pinned on first contact and a changed one is refused; a
// server that comes up late is waited for.
func TestSSH(t *testing.T) {
	d := testenv.StartSSHD(t)
	ctx := context.Background()
	c, key, err := Dial(ctx, d.Addr, DialOptions{User: d.User, Signer: d.Signer, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if key == nil || string(key.Marshal()) != string(d.HostKey.Marshal()) {
		t.Fatalf("first contact returned key %v, want the server's", key)
	}

	for _, tc := range []struct {
		name, cmd, stdin, out string
		status                int
		stderr                string
		timeout               time.Duration
	}{
		{name: "stdout", cmd: "echo hello", out: "hello\n", status: -2, timeout: 10 * time.Second},
		{name: "stdin", cmd: "cat", stdin: "piped\n", out: "piped\n", status: -2, timeout: 10 * time.Second},
		{name: "failure keeps stderr", cmd: "echo partial; echo 'no such unit' >&2; exit 3", out: "partial\n", status: 3, stderr: "no such unit", timeout: 10 * time.Second},
		{name: "timeout", cmd: "sleep 30", status: -1, timeout: 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in io.Reader
			if tc.stdin != "" {
				in = strings.NewReader(tc.stdin)
			}
			start := time.Now()
			out, err := c.Run(ctx, tc.cmd, in, tc.timeout)
			if out != tc.out {
				t.Errorf("stdout %q, want %q", out, tc.out)
			}
			var ce *CommandError
			switch {
			case tc.status == -2 && err != nil:
				t.Errorf("error %v", err)
			case tc.status != -2 && (!errors.As(err, &ce) || ce.Status != tc.status || !strings.Contains(err.Error(), tc.stderr)):
				t.Errorf("error %v, want status %d with %q", err, tc.status, tc.stderr)
			}
			if time.Since(start) > tc.timeout+5*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
		})
	}

	t.Run("changed host key refused", func(t *testing.T) {
		_, other, _ := ed25519.GenerateKey(rand.Reader)
		signer, _ := ssh.NewSignerFromKey(other)
		_, _, err := Dial(ctx, d.Addr, DialOptions{User: d.User, Signer: d.Signer, HostKey: signer.PublicKey(), Wait: 5 * time.Second})
		if !errors.Is(err, ErrHostKeyChanged) {
			t.Fatalf("dial with a different pinned key: %v", err)
		}
		if c, _, err := Dial(ctx, d.Addr, DialOptions{User: d.User, Signer: d.Signer, HostKey: key, Wait: 5 * time.Second}); err != nil {
			t.Errorf("dial with the pinned key: %v", err)
		} else {
			c.Close()
		}
	})

	t.Run("a server that boots late is waited for", func(t *testing.T) {
		d.Stop()
		type dialed struct {
			c   *Conn
			err error
		}
		result := make(chan dialed, 1)
		start := time.Now()
		go func() {
			c, _, err := Dial(ctx, d.Addr, DialOptions{User: d.User, Signer: d.Signer, HostKey: key, Wait: 30 * time.Second})
			result <- dialed{c, err}
		}()
		time.Sleep(2 * time.Second)
		d.Start()
		r := <-result
		if r.err != nil {
			t.Fatalf("dial while the server boots: %v", r.err)
		}
		r.c.Close()
		if time.Since(start) < 2*time.Second {
			t.Error("connected before the server was up")
		}
	})

	t.Run("a server that never comes up", func(t *testing.T) {
		_, _, err := Dial(ctx, "127.0.0.1:1", DialOptions{User: d.User, Signer: d.Signer, Wait: 2 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "no connection after 2s") {
			t.Errorf("dial: %v", err)
		}
	})
}

// TestFirstContactWithAGeneratedKey: at a first contact with the key the engine
// generated pinned, a server offering any other key is refused in the key exchange, before
// authentication, so no command can run; the server's own key passes (the control).
func TestFirstContactWithAGeneratedKey(t *testing.T) {
	d := testenv.StartSSHD(t)
	ctx := context.Background()
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	generated, _ := ssh.NewSignerFromKey(other)
	c, _, err := Dial(ctx, d.Addr, DialOptions{User: d.User, Signer: d.Signer, HostKey: generated.PublicKey(), Wait: 5 * time.Second})
	if !errors.Is(err, ErrHostKeyChanged) || c != nil {
		t.Fatalf("first contact with another generated key: %v", err)
	}
	c, _, err = Dial(ctx, d.Addr, DialOptions{User: d.User, Signer: d.Signer, HostKey: d.HostKey, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("first contact with the server's key pinned: %v", err)
	}
	c.Close()
}
