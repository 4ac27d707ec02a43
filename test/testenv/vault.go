package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// Vault is a real Vault server (bin/vault, built by `make tools` from tools/vault) on 127.0.0.1: see
// localserver.Vault. It can be sealed, restarted with its data and unsealed.
type Vault struct {
	*localserver.Vault
}

// StartVault starts a Vault server, initialises and unseals it and mounts KV v2 at secret/, until the
// test ends.
func StartVault(t testing.TB) *Vault {
	t.Helper()
	v, err := localserver.NewVault(context.Background(), Binary(t, "vault", "STANDS_VAULT_BIN"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	return &Vault{v}
}

// Client is an API client with the root token.
func (v *Vault) Client(t testing.TB) *vaultapi.Client {
	t.Helper()
	return v.Vault.Client()
}

// Seal seals the server as an operator does, with `vault operator seal`.
func (v *Vault) Seal(t testing.TB) {
	t.Helper()
	if err := v.Vault.Seal(); err != nil {
		t.Fatal(err)
	}
}

// Unseal unseals the server and waits until it is active.
func (v *Vault) Unseal(t testing.TB) {
	t.Helper()
	if err := v.Vault.Unseal(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Stop ends the server: its address refuses connections until Start.
func (v *Vault) Stop(t testing.TB) {
	t.Helper()
	v.Vault.Stop()
}

// Start serves the same storage on the same address again after Stop; the server comes back sealed.
func (v *Vault) Start(t testing.TB) {
	t.Helper()
	if err := v.Vault.Start(); err != nil {
		t.Fatal(err)
	}
}

// ReconcilerPolicy is the Vault policy the docs give operators for the reconciler
// (deploy/vault-policy.hcl).
func ReconcilerPolicy(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy", "vault-policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// AppRole writes policy under name and an AppRole bound to it alone; it returns the role id and a
// new secret id.
func (v *Vault) AppRole(t testing.TB, name, policy string, params map[string]any) (roleID, secretID string) {
	t.Helper()
	roleID, secretID, err := v.Vault.AppRole(context.Background(), name, policy, params)
	if err != nil {
		t.Fatal(err)
	}
	return roleID, secretID
}

// Version is the server's version as it reports it, e.g. "1.21.0".
func (v *Vault) Version(t testing.TB) string {
	t.Helper()
	s, err := v.Vault.Version()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
