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

	"github.com/stands-engine/stands-reconciler/engine/manifest"
	"github.com/stands-engine/stands-reconciler/vault/vaulttest"
)

func root(t *testing.T, addr, tok string) *vaultapi.Client {
	t.Helper()
	cfg := vaultapi.DefaultConfig()
	cfg.Address = addr
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(tok)
	return c
}

func TestSecretsAndConnection(t *testing.T) {
	srv, addr := vaulttest.Start(t)
	ctx := context.Background()
	admin := root(t, addr, srv.RootToken)
	kv := admin.KVv2("secret")
	for p, data := range map[string]map[string]any{
		"stands/registry-password": {"value": "reg-SENTINEL"},
		"stands/db/main":           {"user": "app", "value": "db-SENTINEL"},
		"stands/gone":              {"value": "x"},
	} {
		if _, err := kv.Put(ctx, p, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "stands/gone"); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(srv.RootToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, addr, TokenFile(tokFile), WithPrefix("stands"))
	if err != nil {
		t.Fatal(err)
	}
	ref := func(s string) manifest.SecretRef {
		r, err := manifest.ParseSecretRef(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for in, want := range map[string]string{"registry-password": "reg-SENTINEL", "db/main#user": "app", "db/main": "db-SENTINEL"} {
		if got, err := c.Secret(ctx, ref(in)); err != nil || got != want {
			t.Errorf("%s = %q, %v", in, got, err)
		}
	}
	for _, missing := range []string{"nope", "gone", "db/main#password"} {
		_, err := c.Secret(ctx, ref(missing))
		if !errors.Is(err, manifest.ErrSecretNotFound) || strings.Contains(err.Error(), "SENTINEL") {
			t.Errorf("%s: %v", missing, err)
		}
	}
	// Resolution through the manifest's SecretSource interface, as preflight does.
	var _ manifest.SecretSource = c

	rec := json.RawMessage(`{"id_stand":"o_p_e","kv":{"password":"pw"}}`)
	if err := c.WriteConnection(ctx, "o_p_e", rec); err != nil {
		t.Fatal(err)
	}
	got, err := kv.Get(ctx, "stands/stands/o_p_e/connection")
	if err != nil || got.Data["value"] != string(rec) {
		t.Fatalf("connection in vault: %+v %v", got, err)
	}
}

func TestUnavailable(t *testing.T) {
	srv, addr := vaulttest.Start(t)
	c, err := New(context.Background(), addr, Token(srv.RootToken))
	if err != nil {
		t.Fatal(err)
	}
	c.api.SetAddress("http://127.0.0.1:1") // nothing listens there
	_, err = c.Secret(context.Background(), manifest.SecretRef{Path: "x", Field: "value"})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, manifest.ErrSecretNotFound) {
		t.Fatalf("unreachable vault: %v", err)
	}
	if _, err := New(context.Background(), addr, Token("hvs.wrong")); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("bad token: %v", err)
	}
}

// TestAppRoleKeepAlive: an AppRole login whose token lives 2 s (max 4 s) stays usable for 8 s: renewed,
// then replaced by a new login when renewal reaches the max TTL.
func TestAppRoleKeepAlive(t *testing.T) {
	srv, addr := vaulttest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := root(t, addr, srv.RootToken)
	if err := admin.Sys().EnableAuthWithOptions("approle", &vaultapi.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Logical().Write("auth/approle/role/stands", map[string]any{"token_ttl": "2s", "token_max_ttl": "4s"}); err != nil {
		t.Fatal(err)
	}
	rid, _ := admin.Logical().Read("auth/approle/role/stands/role-id")
	sid, _ := admin.Logical().Write("auth/approle/role/stands/secret-id", nil)
	sidFile := filepath.Join(t.TempDir(), "secret-id")
	if err := os.WriteFile(sidFile, []byte(sid.Data["secret_id"].(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.KVv2("secret").Put(ctx, "k", map[string]any{"value": "v"}); err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, addr, AppRole{RoleID: rid.Data["role_id"].(string), SecretIDFile: sidFile})
	if err != nil {
		t.Fatal(err)
	}
	first := c.api.Token()
	go c.KeepAlive(ctx)
	for range 8 {
		time.Sleep(time.Second)
		if v, err := c.Secret(ctx, manifest.SecretRef{Path: "k", Field: "value"}); err != nil || v != "v" {
			t.Fatalf("secret while keeping alive: %q %v", v, err)
		}
	}
	if c.api.Token() == first {
		t.Error("no new login after the max TTL")
	}
}
