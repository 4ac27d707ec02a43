package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// ErrHostKeyChanged marks a server whose SSH host key is not the one pinned at first contact: a
// replaced server or a man in the middle. The engine refuses to talk to it.
var ErrHostKeyChanged = errors.New("the server's SSH host key changed since first contact")

// DialOptions say how to reach a node.
type DialOptions struct {
	User   string
	Signer ssh.Signer
	// HostKey is the key pinned at first contact (kept in the stack's state); nil on first contact,
	// when the server's key is accepted and returned by Dial.
	HostKey ssh.PublicKey
	// Wait bounds the retries while a server boots (default 10 minutes); each attempt has its own
	// 15-second timeout.
	Wait time.Duration
	Log  *slog.Logger
	// Progress, when set, hears about the wait (first attempt, then every tenth).
	Progress func(msg string)
}

// Conn is an SSH connection to a node.
type Conn struct {
	client *ssh.Client
	addr   string
}

// hostKeyAlgorithms are the signature algorithms a host key of this type signs with.
func hostKeyAlgorithms(keyType string) []string {
	if keyType == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{keyType}
}

// Dial connects, retrying while the server boots (refused, timed out, sshd not ready, our key not yet
// installed by cloud-init). It returns the connection and the server's host key, to be pinned.
func Dial(ctx context.Context, addr string, o DialOptions) (*Conn, ssh.PublicKey, error) {
	if o.Wait <= 0 {
		o.Wait = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	var seen ssh.PublicKey
	cfg := &ssh.ClientConfig{User: o.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(o.Signer)}, Timeout: 15 * time.Second,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if o.HostKey != nil && !bytes.Equal(o.HostKey.Marshal(), key.Marshal()) {
				return fmt.Errorf("%w: pinned %s, offered %s", ErrHostKeyChanged, ssh.FingerprintSHA256(o.HostKey), ssh.FingerprintSHA256(key))
			}
			seen = key
			return nil
		}}
	if o.HostKey != nil {
		// Asked for the pinned key's type only: a server with several host keys offers that one.
		cfg.HostKeyAlgorithms = hostKeyAlgorithms(o.HostKey.Type())
	}
	deadline := time.Now().Add(o.Wait)
	for attempt := 1; ; attempt++ {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		raw, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			sc, chans, reqs, herr := ssh.NewClientConn(raw, addr, cfg)
			if herr == nil {
				return &Conn{client: ssh.NewClient(sc, chans, reqs), addr: addr}, seen, nil
			}
			raw.Close()
			err = herr
		}
		if errors.Is(err, ErrHostKeyChanged) {
			return nil, nil, fmt.Errorf("ssh %s: %w", addr, err)
		}
		if ctx.Err() != nil {
			// Cancelled while waiting: say what the waiting was for, not only that it ended.
			return nil, nil, fmt.Errorf("ssh %s: %w after %d attempts, the last: %v", addr, ctx.Err(), attempt, err)
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("ssh %s: no connection after %v (%d attempts): %w", addr, o.Wait, attempt, err)
		}
		if attempt == 1 || attempt%10 == 0 {
			o.Log.Info("waiting for SSH", "addr", addr, "attempt", attempt, "err", err)
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("waiting for SSH on %s (attempt %d): %v", addr, attempt, err))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(attempt)*time.Second, 5*time.Second)):
		}
	}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.client.Close() }

// CommandError is a remote command that failed: its exit status and the end of its stderr.
type CommandError struct {
	Command string
	Status  int // -1: no exit status (signal, timeout, lost connection)
	Stderr  string
	Err     error
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%q on the node", e.Command)
	if e.Status >= 0 {
		msg += fmt.Sprintf(" exited %d", e.Status)
	} else {
		msg += ": " + e.Err.Error()
	}
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// maxStderr is how much of a failed command's stderr an error keeps (its end: where errors are).
const maxStderr = 2000

// Run runs a command with a timeout and returns its stdout. A failure is a *CommandError with the
// command's stderr.
func (c *Conn) Run(ctx context.Context, cmd string, stdin io.Reader, timeout time.Duration) (string, error) {
	s, err := c.client.NewSession()
	if err != nil {
		return "", &CommandError{Command: firstLine(cmd), Status: -1, Err: fmt.Errorf("open session on %s: %w", c.addr, err)}
	}
	defer s.Close()
	// The session copies stdout and stderr from goroutines of its own, which may still run when a
	// timeout gives up on the command: the buffers are locked.
	var stdout, stderr syncBuffer
	s.Stdout, s.Stderr = &stdout, &stderr
	if stdin != nil {
		s.Stdin = stdin
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	abort := func(cause error) (string, error) {
		_ = s.Signal(ssh.SIGKILL)
		s.Close()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		return stdout.String(), &CommandError{Command: firstLine(cmd), Status: -1, Stderr: tail(stderr.String()), Err: cause}
	}
	select {
	case err = <-done:
	case <-timer.C:
		return abort(fmt.Errorf("timed out after %v", timeout))
	case <-ctx.Done():
		return abort(ctx.Err())
	}
	if err == nil {
		return stdout.String(), nil
	}
	ce := &CommandError{Command: firstLine(cmd), Status: -1, Stderr: tail(stderr.String()), Err: err}
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		ce.Status = exit.ExitStatus()
	}
	return stdout.String(), ce
}

// tail keeps whole lines only, so a secret is never cut in two (half a secret escapes scrubbing).
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxStderr {
		s = s[len(s)-maxStderr:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		} else {
			s = "" // one line longer than the limit: none of it rather than part of it
		}
		s = "…\n" + s
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// syncBuffer is a bytes.Buffer safe for one writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
