package vault

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

func ref(t *testing.T, s string) manifest.SecretRef {
	t.Helper()
	r, err := manifest.ParseSecretRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// replaceFile swaps a credential file's content as a rotation does: a new file renamed over it.
func replaceFile(t *testing.T, p, content string) {
	t.Helper()
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

func put(t *testing.T, c *vaultapi.Client, path string, data map[string]any) {
	t.Helper()
	if _, err := c.KVv2("secret").Put(context.Background(), path, data); err != nil {
		t.Fatalf("put %s: %v", path, err)
	}
}

// keptAlive logs in to addr and keeps the login alive with KeepAlive until the test ends, waiting
// for KeepAlive to return so nothing logs after the test.
func keptAlive(t *testing.T, addr string, auth Auth, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := New(ctx, addr, auth, append([]Option{WithLogger(testenv.Logger(t))}, opts...)...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.KeepAlive(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// newToken is a token made by admin with the given TTL and explicit max TTL ("" for none).
func newToken(t *testing.T, admin *vaultapi.Client, ttl, maxTTL string) string {
	t.Helper()
	s, err := admin.Auth().Token().Create(&vaultapi.TokenCreateRequest{TTL: ttl, ExplicitMaxTTL: maxTTL})
	if err != nil {
		t.Fatal(err)
	}
	return s.Auth.ClientToken
}

// readsAgain waits until c reads the secret k again.
func readsAgain(t *testing.T, c *Client, what string, timeout time.Duration) {
	t.Helper()
	eventually(t, what, timeout, func() error {
		_, err := c.Secret(context.Background(), ref(t, "k"))
		return err
	})
}

// eventually retries cond every 200 ms until it holds or timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	wait.NoError(t, what, timeout, cond, wait.Every(200*time.Millisecond))
}

func TestSecretsAndConnection(t *testing.T) {
	v := testenv.StartVault(t)
	ctx := context.Background()
	admin := v.Client(t)
	put(t, admin, "stands/registry-password", map[string]any{"value": "reg-SENTINEL"})
	put(t, admin, "stands/db/main", map[string]any{"user": "app", "value": "db-SENTINEL"})
	put(t, admin, "stands/gone", map[string]any{"value": "x"})
	if err := admin.KVv2("secret").Delete(ctx, "stands/gone"); err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, v.Addr, TokenFile(writeFile(t, "token", v.RootToken)), WithPrefix("stands"))
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"registry-password": "reg-SENTINEL", "db/main#user": "app", "db/main": "db-SENTINEL"} {
		if got, err := c.Secret(ctx, ref(t, in)); err != nil || got != want {
			t.Errorf("%s = %q, %v", in, got, err)
		}
		if err := c.SecretExists(ctx, ref(t, in)); err != nil {
			t.Errorf("%s exists: %v", in, err)
		}
	}
	for _, missing := range []string{"nope", "gone", "db/main#password"} {
		_, err := c.Secret(ctx, ref(t, missing))
		if !errors.Is(err, manifest.ErrSecretNotFound) || errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "SENTINEL") {
			t.Errorf("%s: %v", missing, err)
		}
		// Pull request plans check names only, with the same answer.
		if err := c.SecretExists(ctx, ref(t, missing)); !errors.Is(err, manifest.ErrSecretNotFound) {
			t.Errorf("%s exists: %v", missing, err)
		}
	}
	// Resolution through the manifest's SecretSource interface, as preflight does.
	var _ manifest.SecretSource = c

	rec := json.RawMessage(`{"id_stand":"o_p_e","kv":{"password":"pw"}}`)
	if err := c.WriteConnection(ctx, "o_p_e", rec); err != nil {
		t.Fatal(err)
	}
	got, err := admin.KVv2("secret").Get(ctx, "stands/stands/o_p_e/connection")
	if err != nil || got.Data["value"] != string(rec) {
		t.Fatalf("connection in vault: %+v %v", got, err)
	}
}

// TestUnavailable: an address nobody listens on and a token Vault refuses are both waited out
// (ErrUnavailable), never taken for a missing secret; the refusal says so.
func TestUnavailable(t *testing.T) {
	v := testenv.StartVault(t)
	c, err := New(context.Background(), v.Addr, Token(v.RootToken))
	if err != nil {
		t.Fatal(err)
	}
	c.api.SetAddress("http://127.0.0.1:1") // nothing listens there
	_, err = c.Secret(context.Background(), manifest.SecretRef{Path: "x", Field: "value"})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, manifest.ErrSecretNotFound) {
		t.Fatalf("unreachable vault: %v", err)
	}
	_, err = New(context.Background(), v.Addr, Token("hvs.wrong"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refuses the reconciler's token") {
		t.Fatalf("bad token: %v", err)
	}
}

// TestSealed: `vault operator seal` makes every call ErrUnavailable — reads, connection writes and
// logins — and after unseal the same client reads again without a new login.
func TestSealed(t *testing.T) {
	v := testenv.StartVault(t)
	ctx := context.Background()
	put(t, v.Client(t), "k", map[string]any{"value": "v"})
	c, err := New(ctx, v.Addr, Token(v.RootToken))
	if err != nil {
		t.Fatal(err)
	}
	v.Seal(t)
	if _, err := c.Secret(ctx, ref(t, "k")); !errors.Is(err, ErrUnavailable) || errors.Is(err, manifest.ErrSecretNotFound) {
		t.Errorf("read while sealed: %v", err)
	}
	if err := c.WriteConnection(ctx, "o_p_e", json.RawMessage(`{}`)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("connection write while sealed: %v", err)
	}
	if _, err := New(ctx, v.Addr, Token(v.RootToken)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("login while sealed: %v", err)
	}
	v.Unseal(t)
	if got, err := c.Secret(ctx, ref(t, "k")); err != nil || got != "v" {
		t.Errorf("read after unseal: %q %v", got, err)
	}
}

// TestTokenPastMaxTTL: a token file whose token reaches its max TTL leaves the client ErrUnavailable
// (renewal cannot outlive it, and logging in again reads the same token); once the file holds a new
// token, KeepAlive logs in with it and reads work again, without a restart.
func TestTokenPastMaxTTL(t *testing.T) {
	v := testenv.StartVault(t)
	ctx := context.Background()
	admin := v.Client(t)
	put(t, admin, "k", map[string]any{"value": "v"})
	file := writeFile(t, "token", newToken(t, admin, "2s", "4s"))
	c := keptAlive(t, v.Addr, TokenFile(file))
	// Renewed past its first TTL of 2 s…
	time.Sleep(3 * time.Second)
	if _, err := c.Secret(ctx, ref(t, "k")); err != nil {
		t.Fatalf("read within the max TTL: %v", err)
	}
	// …and refused past its max TTL of 4 s.
	time.Sleep(2 * time.Second)
	_, err := c.Secret(ctx, ref(t, "k"))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, manifest.ErrSecretNotFound) {
		t.Fatalf("read past the max TTL: %v", err)
	}
	replaceFile(t, file, newToken(t, admin, "1h", ""))
	readsAgain(t, c, "a read with the rotated token", 15*time.Second)
}

// TestRevokedTokenReplaced: a token revoked long before its renewal is due is noticed at the first
// refused read, not at the next renewal (40 minutes away here): the client logs in again at once and
// takes the token file's new content.
func TestRevokedTokenReplaced(t *testing.T) {
	v := testenv.StartVault(t)
	ctx := context.Background()
	admin := v.Client(t)
	put(t, admin, "k", map[string]any{"value": "v"})
	old := newToken(t, admin, "1h", "")
	file := writeFile(t, "token", old)
	c := keptAlive(t, v.Addr, TokenFile(file))
	// The watcher renews once at its start; a revocation before that would be noticed by renewal
	// alone, without the refused read this test is about.
	eventually(t, "the first renewal", 10*time.Second, func() error {
		s, err := admin.Auth().Token().LookupWithContext(ctx, old)
		if err != nil {
			return err
		}
		if s.Data["last_renewal_time"] == nil {
			return errors.New("not renewed yet")
		}
		return nil
	})
	replaceFile(t, file, newToken(t, admin, "1h", ""))
	if err := admin.Auth().Token().RevokeTree(old); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Secret(ctx, ref(t, "k")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read with the revoked token: %v", err)
	}
	readsAgain(t, c, "a read with the new token", 5*time.Second)
}

// TestPolicyRefusalKeepsLogin: a 403 on a path the policy does not cover, with a token that is
// alive, is waited out like any refusal but logs in no new token: a new AppRole login would get the
// same policy and leave one more live token behind at every cycle.
func TestPolicyRefusalKeepsLogin(t *testing.T) {
	v := testenv.StartVault(t)
	ctx := context.Background()
	put(t, v.Client(t), "stands/k", map[string]any{"value": "v"})
	put(t, v.Client(t), "stands/other", map[string]any{"value": "v"})
	roleID, secretID := v.AppRole(t, "narrow", `
path "secret/data/stands/k" { capabilities = ["read"] }
path "auth/token/lookup-self" { capabilities = ["read"] }
path "auth/token/renew-self" { capabilities = ["update"] }
`, map[string]any{"token_ttl": "1h"})
	c := keptAlive(t, v.Addr, AppRole{RoleID: roleID, SecretIDFile: writeFile(t, "secret-id", secretID)}, WithPrefix("stands"))
	first := c.api.Token()
	for range 5 {
		if _, err := c.Secret(ctx, ref(t, "other")); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("read outside the policy: %v", err)
		}
		time.Sleep(time.Second)
	}
	if c.api.Token() != first {
		t.Error("refusals of a valid token made the client log in again")
	}
	if got, err := c.Secret(ctx, ref(t, "k")); err != nil || got != "v" {
		t.Errorf("read within the policy: %q %v", got, err)
	}
}

// TestAppRoleKeepAlive: an AppRole login under the operators' policy alone (no default policy) whose
// token lives 2 s (max 4 s) stays usable for 8 s: renewed, then replaced by a new login when renewal
// reaches the max TTL.
func TestAppRoleKeepAlive(t *testing.T) {
	v := testenv.StartVault(t)
	ctx := context.Background()
	put(t, v.Client(t), "stands/k", map[string]any{"value": "v"})
	c := keptAlive(t, v.Addr, policyRole(t, v, map[string]any{"token_ttl": "2s", "token_max_ttl": "4s"}), WithPrefix("stands"))
	first := c.api.Token()
	for range 8 {
		time.Sleep(time.Second)
		if got, err := c.Secret(ctx, ref(t, "k")); err != nil || got != "v" {
			t.Fatalf("secret while keeping alive: %q %v", got, err)
		}
	}
	if c.api.Token() == first {
		t.Error("no new login after the max TTL")
	}
}
