package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// The contract suite: what this package relies on in Vault's HTTP API, driven through the real
// hashicorp/vault/api client against a real Vault (bin/vault, `make tools`). Expected payloads follow
// Vault's API documentation: KV v2 (/secret/data, /secret/metadata), token auth (lookup-self,
// renew-self, create) and AppRole. It pins that behaviour when tools/vault moves to a new version.
// It also judged the stand-in tests used before Vault could be built here (vault/vaulttest): it found
// the stand-in wrong about oldest_version, then unable to enforce policies or be sealed, and the
// stand-in was retired.

// TestVaultContract runs the suite on a real Vault, initialised and unsealed as in production (not
// a dev server).
func TestVaultContract(t *testing.T) {
	v := testenv.StartVault(t)
	t.Run("real Vault "+v.Version(t), func(t *testing.T) { runContract(t, v.Addr, v.RootToken, v.UnsealKey) })
}

func newClient(t *testing.T, addr, tok string) *vaultapi.Client {
	t.Helper()
	cfg := vaultapi.DefaultConfig()
	cfg.Address = addr
	cfg.MaxRetries = 0
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(tok)
	return c
}

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	var re *vaultapi.ResponseError
	if !errors.As(err, &re) || re.StatusCode != status {
		t.Fatalf("want HTTP %d, got %v", status, err)
	}
}

// runContract runs the suite on the server at addr; unsealKey is the key that unseals it after the
// suite seals it, last.
func runContract(t *testing.T, addr, rootToken, unsealKey string) {
	ctx := context.Background()
	root := newClient(t, addr, rootToken)
	mount := "contract-" + testenv.RandomHex(4)
	if err := root.Sys().MountWithContext(ctx, mount, &vaultapi.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}); err != nil {
		t.Fatalf("mount KV v2: %v", err)
	}
	t.Cleanup(func() { _ = root.Sys().Unmount(mount) })
	kv := root.KVv2(mount)

	t.Run("health", func(t *testing.T) {
		h, err := root.Sys().HealthWithContext(ctx)
		if err != nil || !h.Initialized || h.Sealed {
			t.Fatalf("health %+v: %v", h, err)
		}
	})

	t.Run("KV v2 round trip and versions", func(t *testing.T) {
		s1, err := kv.Put(ctx, "stands/a/connection", map[string]any{"value": "one", "n": 1})
		if err != nil || s1.VersionMetadata == nil || s1.VersionMetadata.Version != 1 {
			t.Fatalf("first put: %+v %v", s1, err)
		}
		s2, err := kv.Put(ctx, "stands/a/connection", map[string]any{"value": "two"})
		if err != nil || s2.VersionMetadata.Version != 2 {
			t.Fatalf("second put: %+v %v", s2, err)
		}
		got, err := kv.Get(ctx, "stands/a/connection")
		if err != nil || got.Data["value"] != "two" || got.VersionMetadata.Version != 2 || got.Data["n"] != nil {
			t.Fatalf("get latest: %+v %v", got, err)
		}
		old, err := kv.GetVersion(ctx, "stands/a/connection", 1)
		if err != nil || old.Data["value"] != "one" || old.Data["n"] != json.Number("1") {
			t.Fatalf("get version 1: %+v %v", old, err)
		}
		meta, err := kv.GetMetadata(ctx, "stands/a/connection")
		if err != nil || meta.CurrentVersion != 2 || len(meta.Versions) != 2 || meta.OldestVersion != 0 {
			t.Fatalf("metadata: %+v %v", meta, err)
		}
		list, err := root.Logical().ListWithContext(ctx, mount+"/metadata/stands")
		if err != nil || list == nil || len(list.Data["keys"].([]any)) != 1 || list.Data["keys"].([]any)[0] != "a/" {
			t.Fatalf("list: %+v %v", list, err)
		}
	})

	t.Run("check-and-set", func(t *testing.T) {
		_, err := kv.Put(ctx, "cas", map[string]any{"value": "x"}, vaultapi.WithCheckAndSet(0))
		if err != nil {
			t.Fatalf("create with cas=0: %v", err)
		}
		_, err = kv.Put(ctx, "cas", map[string]any{"value": "y"}, vaultapi.WithCheckAndSet(0))
		wantStatus(t, err, http.StatusBadRequest)
	})

	t.Run("missing and deleted secrets", func(t *testing.T) {
		if _, err := kv.Get(ctx, "does/not/exist"); !errors.Is(err, vaultapi.ErrSecretNotFound) {
			t.Fatalf("missing secret: want ErrSecretNotFound, got %v", err)
		}
		raw, err := root.Logical().ReadWithContext(ctx, mount+"/data/does/not/exist")
		if err != nil || raw != nil {
			t.Fatalf("raw read of a missing secret: want nil, nil; got %+v %v", raw, err)
		}
		if _, err := kv.Put(ctx, "gone", map[string]any{"value": "v1"}); err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		// Vault answers 404 with the version's metadata; the client returns it without data and
		// without an error, so callers must treat nil Data as "not found".
		del, err := kv.Get(ctx, "gone")
		if err != nil || del == nil || del.Data != nil || del.VersionMetadata == nil || del.VersionMetadata.DeletionTime.IsZero() {
			t.Fatalf("deleted secret: want no data and a deletion time, got %+v %v", del, err)
		}
		meta, err := kv.GetMetadata(ctx, "gone")
		if err != nil || meta.Versions["1"].DeletionTime.IsZero() {
			t.Fatalf("deleted version keeps metadata with a deletion time: %+v %v", meta, err)
		}
	})

	t.Run("bad token", func(t *testing.T) {
		bad := newClient(t, addr, "hvs.not-a-token")
		_, err := bad.KVv2(mount).Get(ctx, "stands/a/connection")
		wantStatus(t, err, http.StatusForbidden)
	})

	t.Run("token lookup and expiry", func(t *testing.T) {
		sec, err := root.Auth().Token().CreateWithContext(ctx, &vaultapi.TokenCreateRequest{TTL: "2s", Policies: []string{"default"}})
		if err != nil || sec.Auth == nil || sec.Auth.ClientToken == "" || sec.Auth.LeaseDuration != 2 || !sec.Auth.Renewable {
			t.Fatalf("create token: %+v %v", sec, err)
		}
		c := newClient(t, addr, sec.Auth.ClientToken)
		self, err := c.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := self.TokenTTL()
		if err != nil || ttl <= 0 || ttl > 2*time.Second {
			t.Fatalf("lookup-self ttl %v: %v", ttl, err)
		}
		if pol, _ := self.TokenPolicies(); len(pol) == 0 || pol[0] != "default" {
			t.Errorf("policies %v", pol)
		}
		if acc, _ := self.TokenAccessor(); acc == "" || acc != sec.Auth.Accessor {
			t.Errorf("accessor %q, want %q", acc, sec.Auth.Accessor)
		}
		time.Sleep(2500 * time.Millisecond)
		_, err = c.Auth().Token().LookupSelfWithContext(ctx)
		wantStatus(t, err, http.StatusForbidden)
		_, err = c.KVv2(mount).Get(ctx, "stands/a/connection")
		wantStatus(t, err, http.StatusForbidden)
	})

	t.Run("renewal up to the max TTL", func(t *testing.T) {
		// Margins of seconds, not of a fraction of one: CI runs this beside QEMU and the linters.
		created := time.Now()
		sec, err := root.Auth().Token().CreateWithContext(ctx, &vaultapi.TokenCreateRequest{TTL: "3s", ExplicitMaxTTL: "12s"})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, addr, sec.Auth.ClientToken)
		renewed, err := c.Auth().Token().RenewSelfWithContext(ctx, 8)
		if err != nil || renewed.Auth == nil || renewed.Auth.LeaseDuration <= 3 || renewed.Auth.LeaseDuration > 8 {
			t.Fatalf("renew-self for 8 s of a token of 3 s: %+v %v", renewed, err)
		}
		// The token now outlives its first TTL.
		time.Sleep(time.Until(created.Add(4 * time.Second)))
		if _, err := c.Auth().Token().LookupSelfWithContext(ctx); err != nil {
			t.Fatalf("renewed token expired at its first TTL: %v", err)
		}
		capped, err := c.Auth().Token().RenewSelfWithContext(ctx, 3600)
		left := int(12-time.Since(created).Seconds()) + 1
		if err != nil || capped.Auth.LeaseDuration > left {
			t.Fatalf("renew beyond the max TTL: lease %v, want capped at what is left of 12 s (%d s): %v", capped.Auth, left, err)
		}
	})

	t.Run("LifetimeWatcher renews until the max TTL", func(t *testing.T) {
		sec, err := root.Auth().Token().CreateWithContext(ctx, &vaultapi.TokenCreateRequest{TTL: "4s", ExplicitMaxTTL: "10s"})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, addr, sec.Auth.ClientToken)
		w, err := c.NewLifetimeWatcher(&vaultapi.LifetimeWatcherInput{Secret: sec, Increment: 4})
		if err != nil {
			t.Fatal(err)
		}
		go w.Start()
		defer w.Stop()
		renewals := 0
		timeout := time.After(25 * time.Second)
		for done := false; !done; {
			select {
			case <-w.RenewCh():
				renewals++
			case err := <-w.DoneCh():
				if err != nil {
					t.Fatalf("watcher: %v", err)
				}
				done = true
			case <-timeout:
				t.Fatal("watcher did not finish within 25s")
			}
		}
		if renewals == 0 {
			t.Error("watcher never renewed")
		}
	})

	t.Run("AppRole login", func(t *testing.T) {
		err := root.Sys().EnableAuthWithOptionsWithContext(ctx, "approle", &vaultapi.EnableAuthOptions{Type: "approle"})
		var re *vaultapi.ResponseError
		if err != nil && !(errors.As(err, &re) && re.StatusCode == http.StatusBadRequest) {
			t.Fatalf("enable approle: %v", err)
		}
		role := "stands-" + testenv.RandomHex(3)
		if _, err := root.Logical().WriteWithContext(ctx, "auth/approle/role/"+role, map[string]any{"token_ttl": "60s", "token_max_ttl": "120s", "token_policies": []string{"stands"}}); err != nil {
			t.Fatalf("create role: %v", err)
		}
		t.Cleanup(func() { _, _ = root.Logical().Delete("auth/approle/role/" + role) })
		rid, err := root.Logical().ReadWithContext(ctx, "auth/approle/role/"+role+"/role-id")
		if err != nil || rid == nil || rid.Data["role_id"] == "" {
			t.Fatalf("role-id: %+v %v", rid, err)
		}
		sid, err := root.Logical().WriteWithContext(ctx, "auth/approle/role/"+role+"/secret-id", nil)
		if err != nil || sid == nil || sid.Data["secret_id"] == "" || sid.Data["secret_id_accessor"] == "" {
			t.Fatalf("secret-id: %+v %v", sid, err)
		}
		anon := newClient(t, addr, "")
		login, err := anon.Logical().WriteWithContext(ctx, "auth/approle/login", map[string]any{"role_id": rid.Data["role_id"], "secret_id": sid.Data["secret_id"]})
		if err != nil || login == nil || login.Auth == nil || login.Auth.ClientToken == "" {
			t.Fatalf("login: %+v %v", login, err)
		}
		if login.Auth.LeaseDuration != 60 || !login.Auth.Renewable || login.Auth.Metadata["role_name"] != role {
			t.Errorf("login auth %+v", login.Auth)
		}
		hasPolicy := false
		for _, p := range login.Auth.TokenPolicies {
			hasPolicy = hasPolicy || p == "stands"
		}
		if !hasPolicy {
			t.Errorf("token policies %v lack the role's", login.Auth.TokenPolicies)
		}
		logged := newClient(t, addr, login.Auth.ClientToken)
		if _, err := logged.Auth().Token().LookupSelfWithContext(ctx); err != nil {
			t.Errorf("logged-in token: %v", err)
		}
		_, err = anon.Logical().WriteWithContext(ctx, "auth/approle/login", map[string]any{"role_id": rid.Data["role_id"], "secret_id": "wrong"})
		wantStatus(t, err, http.StatusBadRequest)
	})

	t.Run("policies are enforced", func(t *testing.T) {
		policy := "contract-" + testenv.RandomHex(3)
		if err := root.Sys().PutPolicyWithContext(ctx, policy, `path "`+mount+`/data/allowed/*" { capabilities = ["read"] }`); err != nil {
			t.Fatalf("write policy: %v", err)
		}
		for _, p := range []string{"allowed/x", "denied/x"} {
			if _, err := kv.Put(ctx, p, map[string]any{"value": p}); err != nil {
				t.Fatal(err)
			}
		}
		sec, err := root.Auth().Token().CreateWithContext(ctx, &vaultapi.TokenCreateRequest{Policies: []string{policy}, NoDefaultPolicy: true})
		if err != nil {
			t.Fatal(err)
		}
		limited := newClient(t, addr, sec.Auth.ClientToken).KVv2(mount)
		if got, err := limited.Get(ctx, "allowed/x"); err != nil || got.Data["value"] != "allowed/x" {
			t.Errorf("read allowed by the policy: %+v %v", got, err)
		}
		_, err = limited.Get(ctx, "denied/x")
		wantStatus(t, err, http.StatusForbidden)
		_, err = limited.Put(ctx, "allowed/x", map[string]any{"value": "overwritten"})
		wantStatus(t, err, http.StatusForbidden)
	})

	// Last: it seals the server.
	t.Run("sealed, then unsealed", func(t *testing.T) {
		if err := root.Sys().SealWithContext(ctx); err != nil {
			t.Fatalf("seal: %v", err)
		}
		if s, err := root.Sys().SealStatusWithContext(ctx); err != nil || !s.Sealed {
			t.Fatalf("seal status after sealing: %+v %v", s, err)
		}
		_, err := kv.Get(ctx, "stands/a/connection")
		wantStatus(t, err, http.StatusServiceUnavailable)
		if s, err := root.Sys().UnsealWithContext(ctx, unsealKey); err != nil || s.Sealed {
			t.Fatalf("unseal: %+v %v", s, err)
		}
		wait.NoError(t, "a read after the unseal", 30*time.Second, func() error {
			got, err := kv.Get(ctx, "stands/a/connection") // the root token outlives the seal
			if err == nil && got.Data["value"] != "two" {
				err = fmt.Errorf("read %+v", got.Data)
			}
			return err
		})
	})
}
