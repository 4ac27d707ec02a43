package vault

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// Session is the daemon's Vault: it logs in on first use and again after a failed login, so a Vault
// that is down when the daemon starts delays stands instead of stopping the daemon, and it owns the
// login's renewal, which Close stops and waits for.
type Session struct {
	addr string
	auth Auth
	opts []Option
	log  *slog.Logger

	ctx    context.Context // of the renewal; ended by Close
	cancel context.CancelFunc
	alive  sync.WaitGroup

	mu sync.Mutex
	c  *Client
}

// Open returns a session; nothing is contacted until the first Secret or WriteConnection.
func Open(addr string, auth Auth, log *slog.Logger, opts ...Option) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{addr: addr, auth: auth, opts: append(opts, WithLogger(log)), log: log, ctx: ctx, cancel: cancel}
}

func (s *Session) client(ctx context.Context) (*Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		return s.c, nil
	}
	if err := s.ctx.Err(); err != nil {
		return nil, err // closed
	}
	c, err := New(ctx, s.addr, s.auth, s.opts...)
	if err != nil {
		return nil, err
	}
	s.c = c
	s.alive.Add(1)
	go func() {
		defer s.alive.Done()
		c.KeepAlive(s.ctx)
	}()
	s.log.Info("logged in to vault", "addr", s.addr)
	return c, nil
}

// Secret resolves a reference (manifest.SecretSource).
func (s *Session) Secret(ctx context.Context, ref manifest.SecretRef) (string, error) {
	c, err := s.client(ctx)
	if err != nil {
		return "", err
	}
	return c.Secret(ctx, ref)
}

// SecretExists says whether a reference resolves, never handing out its value.
func (s *Session) SecretExists(ctx context.Context, ref manifest.SecretRef) error {
	c, err := s.client(ctx)
	if err != nil {
		return err
	}
	return c.SecretExists(ctx, ref)
}

// WriteConnection stores a stand's unmasked connection record.
func (s *Session) WriteConnection(ctx context.Context, id string, record json.RawMessage) error {
	c, err := s.client(ctx)
	if err != nil {
		return err
	}
	return c.WriteConnection(ctx, id, record)
}

// Close stops renewing the login and waits until renewal has stopped.
func (s *Session) Close() error {
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
	s.alive.Wait()
	return nil
}
