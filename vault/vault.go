// Package vault resolves `!secret` references from a KV version 2 engine and writes each stand's
// unmasked connection record back, authenticating with a token, a token file or AppRole and keeping
// the login alive with the client library's LifetimeWatcher (logging in again when renewal ends).
package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// ErrUnavailable marks Vault being unreachable or failing: the caller waits and retries; it never
// applies or destroys on it.
var ErrUnavailable = errors.New("vault is unavailable")

// Auth logs a client in.
type Auth interface {
	login(ctx context.Context, c *vaultapi.Client) (*vaultapi.Secret, error)
}

// Token authenticates with a fixed token.
type Token string

func (t Token) login(ctx context.Context, c *vaultapi.Client) (*vaultapi.Secret, error) {
	// Checked on a copy: a token file caught mid-rotation must not replace a token that works.
	check, err := c.Clone()
	if err != nil {
		return nil, err
	}
	check.SetToken(string(t))
	s, err := check.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		return nil, err
	}
	c.SetToken(string(t))
	return s, nil
}

// TokenFile authenticates with a token read from a file at each login (systemd credentials, a
// rotated token).
type TokenFile string

func (f TokenFile) login(ctx context.Context, c *vaultapi.Client) (*vaultapi.Secret, error) {
	data, err := os.ReadFile(string(f))
	if err != nil {
		return nil, fmt.Errorf("read token file: %w", err)
	}
	return Token(strings.TrimSpace(string(data))).login(ctx, c)
}

// AppRole authenticates with a role id and a secret id read from a file at each login.
type AppRole struct {
	RoleID       string
	SecretIDFile string
	MountPath    string // default "approle"
}

func (a AppRole) login(ctx context.Context, c *vaultapi.Client) (*vaultapi.Secret, error) {
	secretID, err := os.ReadFile(a.SecretIDFile)
	if err != nil {
		return nil, fmt.Errorf("read AppRole secret id file: %w", err)
	}
	mount := a.MountPath
	if mount == "" {
		mount = "approle"
	}
	s, err := c.Logical().WriteWithContext(ctx, "auth/"+mount+"/login", map[string]any{"role_id": a.RoleID, "secret_id": strings.TrimSpace(string(secretID))})
	if err != nil {
		return nil, err
	}
	if s == nil || s.Auth == nil || s.Auth.ClientToken == "" {
		return nil, errors.New("AppRole login returned no token")
	}
	c.SetToken(s.Auth.ClientToken)
	return s, nil
}

// Client is a logged-in Vault client scoped to a KV v2 mount and a path prefix.
type Client struct {
	api    *vaultapi.Client
	auth   Auth
	mount  string
	prefix string
	log    *slog.Logger

	kick chan struct{} // Vault refused the current token: KeepAlive checks it without waiting for renewal

	mu    sync.Mutex
	login *vaultapi.Secret
}

// Option configures a Client.
type Option func(*Client)

// WithMount sets the KV v2 mount (default "secret").
func WithMount(m string) Option { return func(c *Client) { c.mount = strings.Trim(m, "/") } }

// WithPrefix sets the path prefix secrets live under, e.g. "stands" (default none).
func WithPrefix(p string) Option { return func(c *Client) { c.prefix = strings.Trim(p, "/") } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// New connects to addr and logs in.
func New(ctx context.Context, addr string, auth Auth, opts ...Option) (*Client, error) {
	cfg := vaultapi.DefaultConfig()
	cfg.Address = addr
	// The reconcile loop is the retry layer: a cycle that finds Vault down waits for the next one
	// instead of stalling every stand's lookup in client-side retries.
	cfg.MaxRetries = 0
	cfg.Timeout = 15 * time.Second
	api, err := vaultapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	api.ClearToken()
	c := &Client{api: api, auth: auth, mount: "secret", log: slog.New(slog.DiscardHandler), kick: make(chan struct{}, 1)}
	for _, o := range opts {
		o(c)
	}
	if err := c.relogin(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Client) relogin(ctx context.Context) error {
	s, err := c.auth.login(ctx, c.api)
	if err != nil {
		return fmt.Errorf("vault login: %w", classify(err))
	}
	c.mu.Lock()
	c.login = s
	c.mu.Unlock()
	return nil
}

// classify marks transport failures, server errors (a sealed Vault answers 503) and refusals of the
// token (403) as ErrUnavailable: none of them is the stand's fault, and each ends with no change to
// the stand (Vault back, unsealed, a new login or token). Paths are confined to the prefix before
// they get here, so a 403 means the token expired, was revoked or has a policy that does not cover
// the prefix.
func classify(err error) error {
	var re *vaultapi.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%w: vault refuses the reconciler's token (expired, revoked, or its policy does not allow this path): %w", ErrUnavailable, err)
		case re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, manifest.ErrSecretNotFound) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// classify is the package's classify for a call made with token: when Vault refuses the token that
// is still the current one, KeepAlive checks it at once (and logs in again if it is dead) instead of
// waiting for its renewal to notice. A refusal of a token a new login already replaced says nothing.
func (c *Client) classify(token string, err error) error {
	var re *vaultapi.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusForbidden && c.api.Token() == token {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return classify(err)
}

func (c *Client) key(p string) string {
	if c.prefix == "" {
		return p
	}
	return path.Join(c.prefix, p)
}

// Secret resolves a reference: <mount>/data/<prefix>/<path>, field "value" unless the reference names
// one. Implements manifest.SecretSource. Errors name the reference, never a value.
func (c *Client) Secret(ctx context.Context, ref manifest.SecretRef) (string, error) {
	v, err := c.field(ctx, ref)
	if err != nil {
		return "", err
	}
	str, ok := v.(string)
	if !ok {
		b, _ := json.Marshal(v)
		str = string(b)
	}
	return str, nil
}

// SecretExists says whether the reference resolves, as Secret would, without handing its value to
// anyone: pull request plans check names with it (KV v2 has no read of a field's presence alone, so
// the version is read and dropped here).
func (c *Client) SecretExists(ctx context.Context, ref manifest.SecretRef) error {
	_, err := c.field(ctx, ref)
	return err
}

func (c *Client) field(ctx context.Context, ref manifest.SecretRef) (any, error) {
	token := c.api.Token()
	s, err := c.api.KVv2(c.mount).Get(ctx, c.key(ref.Path))
	if errors.Is(err, vaultapi.ErrSecretNotFound) {
		return nil, fmt.Errorf("%w: %s/%s", manifest.ErrSecretNotFound, c.mount, c.key(ref.Path))
	}
	if err != nil {
		return nil, fmt.Errorf("read secret %s: %w", ref, c.classify(token, err))
	}
	if s == nil || s.Data == nil { // a deleted version comes back without data
		return nil, fmt.Errorf("%w: %s/%s is deleted", manifest.ErrSecretNotFound, c.mount, c.key(ref.Path))
	}
	v, ok := s.Data[ref.Field]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s has no field %q", manifest.ErrSecretNotFound, c.mount, c.key(ref.Path), ref.Field)
	}
	return v, nil
}

// WriteConnection stores a stand's unmasked connection record at
// <mount>/<prefix>/stands/<stand-id>/connection, field "value".
func (c *Client) WriteConnection(ctx context.Context, standID string, record json.RawMessage) error {
	token := c.api.Token()
	if _, err := c.api.KVv2(c.mount).Put(ctx, c.key(path.Join(manifest.ReservedSecretDir, standID, "connection")), map[string]any{"value": string(record)}); err != nil {
		return fmt.Errorf("write connection of %s: %w", standID, c.classify(token, err))
	}
	return nil
}

// KeepAlive renews the login until ctx ends, and logs in again whenever renewal stops (max TTL
// reached, token revoked) or Vault refuses a token that is dead; a failed login is tried again every
// 5 s until one succeeds. Run it in its own goroutine.
func (c *Client) KeepAlive(ctx context.Context) {
	last := time.Now() // of the last login attempt
	for ctx.Err() == nil {
		c.mu.Lock()
		login := c.login
		c.mu.Unlock()
		kicked := false
		switch {
		case login != nil && (login.Auth != nil && login.Auth.Renewable || login.Data["renewable"] == true):
			kicked = c.watch(ctx, login)
		default:
			// Not renewable: keep it until shortly before it expires (a token without a TTL, such as a
			// root token, until Vault refuses it), then log in again.
			var expiry <-chan time.Time
			if ttl, _ := login.TokenTTL(); ttl > 0 {
				expiry = time.After(max(ttl*9/10, time.Second))
			}
			select {
			case <-ctx.Done():
			case <-expiry:
			case <-c.kick:
				kicked = true
			}
		}
		if ctx.Err() != nil {
			return
		}
		if kicked {
			if _, err := c.api.Auth().Token().LookupSelfWithContext(ctx); err == nil {
				// The token is alive, so its policy refused the path: a new login would get the same
				// policy, and with AppRole mint a token each time.
				c.log.Warn("vault refused a request with a valid token: its policy does not cover the stands' paths")
				if !sleep(ctx, minLoginInterval) {
					return
				}
				continue
			}
		}
		// A token that renewal gives up on at once (its max TTL is near) would otherwise be looked up
		// again and again until it expires.
		if !sleep(ctx, time.Until(last.Add(minLoginInterval))) {
			return
		}
		for {
			last = time.Now()
			err := c.relogin(ctx)
			if err == nil {
				break
			}
			c.log.Warn("vault login failed", "err", err)
			if !sleep(ctx, 5*time.Second) {
				return
			}
		}
		select { // refusals of the token just replaced
		case <-c.kick:
		default:
		}
		c.log.Info("logged in to vault again")
	}
}

// minLoginInterval spaces logins out.
const minLoginInterval = time.Second

// sleep waits d, or less when ctx ends first; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

// watch renews login until renewal ends or ctx does; it reports whether a refusal cut it short.
func (c *Client) watch(ctx context.Context, login *vaultapi.Secret) (kicked bool) {
	secret := login
	if secret.Auth == nil { // a token lookup: renew the token itself
		ttl, _ := login.TokenTTL()
		secret = &vaultapi.Secret{Auth: &vaultapi.SecretAuth{ClientToken: c.api.Token(), Renewable: true, LeaseDuration: int(ttl.Seconds())}}
	}
	w, err := c.api.NewLifetimeWatcher(&vaultapi.LifetimeWatcherInput{Secret: secret})
	if err != nil {
		c.log.Warn("vault renewal", "err", err)
		return
	}
	go w.Start()
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-w.DoneCh():
			if err != nil {
				c.log.Warn("vault token renewal ended", "err", err)
			}
			return
		case <-w.RenewCh():
			c.log.Debug("vault token renewed")
		case <-c.kick:
			return true
		}
	}
}
