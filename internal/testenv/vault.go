package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// Vault is a real Vault server (bin/vault, built by `make tools` from tools/vault) on 127.0.0.1.
//
// It runs with file storage in a temporary folder, initialised with one unseal key that the helper
// keeps, and a KV version 2 engine at "secret/" as a dev server has: so, unlike `vault server -dev`,
// it can be sealed (Seal), restarted with its data (Stop, Start: it comes back sealed, as a real one
// does) and unsealed again (Unseal).
type Vault struct {
	Addr      string // http://127.0.0.1:PORT, the value of VAULT_ADDR
	RootToken string
	UnsealKey string // the only key share (base64)
	Dir       string // config, storage, log

	bin    string
	conf   string
	server *process // nil while stopped
}

// StartVault starts a Vault server, initialises and unseals it and mounts KV v2 at secret/, until the
// test ends.
func StartVault(t testing.TB) *Vault {
	t.Helper()
	v := &Vault{bin: Binary(t, "vault", "STANDS_VAULT_BIN"), Dir: t.TempDir()}
	t.Cleanup(v.stop)
	// The port is only free until Vault binds it: another process may take it in between, so a
	// start that fails to listen is tried again on a new one.
	var err error
	for range 3 {
		port := FreePort(t)
		v.Addr = fmt.Sprintf("http://127.0.0.1:%d", port)
		v.conf = filepath.Join(v.Dir, "vault.hcl")
		// disable_mlock: tests do not run with CAP_IPC_LOCK everywhere, and nothing here is worth
		// keeping out of swap.
		conf := fmt.Sprintf(`storage "file" { path = %q }
listener "tcp" {
  address     = "127.0.0.1:%d"
  tls_disable = true
}
api_addr      = %q
disable_mlock = true
ui            = false
log_level     = "info"
`, filepath.Join(v.Dir, "data"), port, v.Addr)
		if err := os.WriteFile(v.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		if err = v.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("vault did not start: %v\n%s", err, tail(v.logPath()))
	}
	v.initialise(t)
	return v
}

func (v *Vault) logPath() string { return filepath.Join(v.Dir, "vault.log") }

// start runs `vault server` and waits until it says it has started and its API answers (sealed or
// not). Its own log decides, not the port: a port taken by another server between FreePort and the
// start must fail this start, not hand the test someone else's Vault.
func (v *Vault) start() error {
	var from int64
	if st, err := os.Stat(v.logPath()); err == nil {
		from = st.Size()
	}
	cmd := exec.Command(v.bin, "server", "-config", v.conf)
	// Only what Vault needs: none of the test's own credentials, and no ~/.vault-token of the user's.
	cmd.Env, cmd.Dir = []string{"HOME=" + v.Dir, "PATH=/usr/bin:/bin"}, v.Dir
	server, err := startProcess(cmd, v.logPath())
	if err != nil {
		return err
	}
	v.server = server
	c := v.client("")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if v.startedSince(from) {
			// sys/seal-status answers whether sealed or not, initialised or not.
			if _, err := c.Sys().SealStatus(); err == nil {
				return nil
			}
		}
		if done, err := server.exitedNow(); done {
			v.stop()
			return fmt.Errorf("vault server exited: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		if time.Now().After(deadline) {
			v.stop()
			return errors.New("vault server did not start within 60s")
		}
	}
}

// startedSince reports whether the log, from offset from on, has Vault's line for a server that
// bound its listeners.
func (v *Vault) startedSince(from int64) bool {
	f, err := os.Open(v.logPath())
	if err != nil {
		return false
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, from, 1<<20))
	return err == nil && bytes.Contains(data, []byte("Vault server started!"))
}

// initialise makes the new server usable: one unseal key, unsealed, KV v2 at secret/.
func (v *Vault) initialise(t testing.TB) {
	t.Helper()
	init, err := v.client("").Sys().Init(&vaultapi.InitRequest{SecretShares: 1, SecretThreshold: 1})
	if err != nil {
		t.Fatalf("vault operator init: %v", err)
	}
	v.UnsealKey, v.RootToken = init.KeysB64[0], init.RootToken
	v.Unseal(t)
	if err := v.Client(t).Sys().Mount("secret", &vaultapi.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}); err != nil {
		t.Fatalf("mount KV v2 at secret/: %v", err)
	}
}

func (v *Vault) client(token string) *vaultapi.Client {
	cfg := vaultapi.DefaultConfig()
	cfg.Address = v.Addr
	cfg.MaxRetries = 0
	cfg.Timeout = 10 * time.Second
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		panic(fmt.Sprintf("testenv: vault client: %v", err)) // only a malformed address fails here
	}
	c.SetToken(token)
	return c
}

// Client is an API client with the root token.
func (v *Vault) Client(t testing.TB) *vaultapi.Client {
	t.Helper()
	return v.client(v.RootToken)
}

// Seal seals the server as an operator does, with `vault operator seal`.
func (v *Vault) Seal(t testing.TB) {
	t.Helper()
	cmd := exec.Command(v.bin, "operator", "seal")
	// The token goes in the environment, never in argv.
	cmd.Env = []string{"HOME=" + v.Dir, "VAULT_ADDR=" + v.Addr, "VAULT_TOKEN=" + v.RootToken}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("vault operator seal: %v\n%s", err, out)
	}
	if s, err := v.client("").Sys().SealStatus(); err != nil || !s.Sealed {
		t.Fatalf("vault is not sealed after `vault operator seal`: %+v %v", s, err)
	}
}

// Unseal unseals the server with the key the helper kept at initialisation and waits until it is
// active.
func (v *Vault) Unseal(t testing.TB) {
	t.Helper()
	c := v.client("")
	if s, err := c.Sys().Unseal(v.UnsealKey); err != nil || s.Sealed {
		t.Fatalf("vault operator unseal: %+v %v", s, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// Unsealed is not yet serving: health says 200 once the server is active.
		h, err := c.Sys().HealthWithContext(ctx)
		if err == nil && h.Initialized && !h.Sealed && !h.Standby {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("vault not active after unseal: %+v %v\n%s", h, err, tail(v.logPath()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the server: its address refuses connections until Start.
func (v *Vault) Stop(t testing.TB) {
	t.Helper()
	v.stop()
}

// Start serves the same storage on the same address again after Stop. Like a real restart, the server
// comes back sealed: Unseal it.
func (v *Vault) Start(t testing.TB) {
	t.Helper()
	if v.server != nil {
		t.Fatal("vault is already running")
	}
	var err error
	for range 50 { // the port may linger for a moment after the process ends
		if err = v.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("vault did not start again: %v\n%s", err, tail(v.logPath()))
}

func (v *Vault) stop() {
	if v.server == nil {
		return
	}
	v.server.stop()
	v.server = nil
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

// AppRole writes policy under name, and an AppRole of that name bound to it alone (no default
// policy) with params added, enabling AppRole auth where needed. It returns the role id and a new
// secret id.
func (v *Vault) AppRole(t testing.TB, name, policy string, params map[string]any) (roleID, secretID string) {
	t.Helper()
	ctx := context.Background()
	admin := v.Client(t)
	if err := admin.Sys().PutPolicyWithContext(ctx, name, policy); err != nil {
		t.Fatalf("vault policy write %s: %v", name, err)
	}
	mounts, err := admin.Sys().ListAuthWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mounts["approle/"]; !ok {
		if err := admin.Sys().EnableAuthWithOptionsWithContext(ctx, "approle", &vaultapi.EnableAuthOptions{Type: "approle"}); err != nil {
			t.Fatalf("enable AppRole: %v", err)
		}
	}
	role := map[string]any{"token_policies": []string{name}, "token_no_default_policy": true}
	for k, val := range params {
		role[k] = val
	}
	if _, err := admin.Logical().WriteWithContext(ctx, "auth/approle/role/"+name, role); err != nil {
		t.Fatalf("write AppRole %s: %v", name, err)
	}
	rid, err := admin.Logical().ReadWithContext(ctx, "auth/approle/role/"+name+"/role-id")
	if err != nil {
		t.Fatalf("read role id: %v", err)
	}
	sid, err := admin.Logical().WriteWithContext(ctx, "auth/approle/role/"+name+"/secret-id", nil)
	if err != nil {
		t.Fatalf("new secret id: %v", err)
	}
	return rid.Data["role_id"].(string), sid.Data["secret_id"].(string)
}

// Version is the server's version as it reports it, e.g. "1.21.0".
func (v *Vault) Version(t testing.TB) string {
	t.Helper()
	s, err := v.client("").Sys().SealStatus()
	if err != nil {
		t.Fatalf("vault seal status: %v", err)
	}
	return s.Version
}

// Healthy reports whether the server is up, unsealed and active (sys/health answers 200).
func (v *Vault) Healthy() bool {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(v.Addr + "/v1/sys/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
