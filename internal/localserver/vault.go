package localserver

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
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// Vault is a real Vault server (bin/vault, built by `make tools` from tools/vault) on 127.0.0.1.
//
// It runs with file storage, initialised with one unseal key that it keeps, and a KV version 2 engine
// at "secret/" as a dev server has: so, unlike `vault server -dev`, it can be sealed (Seal), restarted
// with its data (Stop, Start: it comes back sealed, as a real one does) and unsealed again (Unseal).
type Vault struct {
	Addr      string // http://127.0.0.1:PORT, the value of VAULT_ADDR
	RootToken string
	UnsealKey string // the only key share (base64)
	Dir       string // config, storage, log

	bin    string
	conf   string
	server *Process // nil while stopped
}

// NewVault starts a Vault server from bin with its files in dir, initialises and unseals it and
// mounts KV v2 at secret/, until Stop.
func NewVault(ctx context.Context, bin, dir string) (*Vault, error) {
	v := &Vault{bin: bin, Dir: dir, conf: filepath.Join(dir, "vault.hcl")}
	// The port is only free until Vault binds it: another process may take it in between, so a start
	// that fails to listen is tried again on a new one.
	var err error
	for range 3 {
		var port int
		if port, err = FreePort(); err != nil {
			return nil, err
		}
		v.Addr = fmt.Sprintf("http://127.0.0.1:%d", port)
		// disable_mlock: not every machine grants CAP_IPC_LOCK, and nothing here is worth keeping
		// out of swap.
		conf := fmt.Sprintf(`storage "file" { path = %q }
listener "tcp" {
  address     = "127.0.0.1:%d"
  tls_disable = true
}
api_addr      = %q
disable_mlock = true
ui            = false
log_level     = "info"
`, filepath.Join(dir, "data"), port, v.Addr)
		if err := os.WriteFile(v.conf, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		if err = v.start(); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("vault did not start: %w\n%s", err, Tail(v.logPath()))
	}
	if err := v.initialise(ctx); err != nil {
		v.Stop()
		return nil, err
	}
	return v, nil
}

func (v *Vault) logPath() string { return filepath.Join(v.Dir, "vault.log") }

// start runs `vault server` and waits until it says it has started and its API answers (sealed or
// not). Its own log decides, not the port: a port taken by another server between FreePort and the
// start must fail this start, not hand the caller someone else's Vault.
func (v *Vault) start() error {
	var from int64
	if st, err := os.Stat(v.logPath()); err == nil {
		from = st.Size()
	}
	cmd := exec.Command(v.bin, "server", "-config", v.conf)
	// Only what Vault needs: none of the caller's own credentials, and no ~/.vault-token of the user's.
	cmd.Env, cmd.Dir = []string{"HOME=" + v.Dir, "PATH=/usr/bin:/bin"}, v.Dir
	server, err := StartProcess(cmd, v.logPath())
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
		if done, err := server.Exited(); done {
			v.Stop()
			return fmt.Errorf("vault server exited: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		if time.Now().After(deadline) {
			v.Stop()
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
func (v *Vault) initialise(ctx context.Context) error {
	init, err := v.client("").Sys().InitWithContext(ctx, &vaultapi.InitRequest{SecretShares: 1, SecretThreshold: 1})
	if err != nil {
		return fmt.Errorf("vault operator init: %w", err)
	}
	v.UnsealKey, v.RootToken = init.KeysB64[0], init.RootToken
	if err := v.Unseal(ctx); err != nil {
		return err
	}
	if err := v.Client().Sys().MountWithContext(ctx, "secret", &vaultapi.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}); err != nil {
		return fmt.Errorf("mount KV v2 at secret/: %w", err)
	}
	return nil
}

func (v *Vault) client(token string) *vaultapi.Client {
	cfg := vaultapi.DefaultConfig()
	cfg.Address = v.Addr
	cfg.MaxRetries = 0
	cfg.Timeout = 10 * time.Second
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		panic(fmt.Sprintf("localserver: vault client: %v", err)) // only a malformed address fails here
	}
	c.SetToken(token)
	return c
}

// Client is an API client with the root token.
func (v *Vault) Client() *vaultapi.Client { return v.client(v.RootToken) }

// Seal seals the server as an operator does, with `vault operator seal`.
func (v *Vault) Seal() error {
	cmd := exec.Command(v.bin, "operator", "seal")
	// The token goes in the environment, never in argv.
	cmd.Env = []string{"HOME=" + v.Dir, "VAULT_ADDR=" + v.Addr, "VAULT_TOKEN=" + v.RootToken}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("vault operator seal: %w\n%s", err, out)
	}
	if s, err := v.client("").Sys().SealStatus(); err != nil || !s.Sealed {
		return fmt.Errorf("vault is not sealed after `vault operator seal`: %+v %v", s, err)
	}
	return nil
}

// Unseal unseals the server with the key kept at initialisation and waits until it is active.
func (v *Vault) Unseal(ctx context.Context) error {
	c := v.client("")
	if s, err := c.Sys().UnsealWithContext(ctx, v.UnsealKey); err != nil || s.Sealed {
		return fmt.Errorf("vault operator unseal: %+v %v", s, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		// Unsealed is not yet serving: health says 200 once the server is active.
		h, err := c.Sys().HealthWithContext(ctx)
		if err == nil && h.Initialized && !h.Sealed && !h.Standby {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vault not active after unseal: %+v %v\n%s", h, err, Tail(v.logPath()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Start serves the same storage on the same address again after Stop. Like a real restart, the server
// comes back sealed: Unseal it.
func (v *Vault) Start() error {
	if v.server != nil {
		return errors.New("vault is already running")
	}
	var err error
	for range 50 { // the port may linger for a moment after the process ends
		if err = v.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("vault did not start again: %w\n%s", err, Tail(v.logPath()))
}

// Stop ends the server: its address refuses connections until Start.
func (v *Vault) Stop() {
	if v.server == nil {
		return
	}
	v.server.Stop()
	v.server = nil
}

// Pid is the process id of the server, 0 while stopped.
func (v *Vault) Pid() int {
	if v.server == nil {
		return 0
	}
	return v.server.Pid()
}

// AppRole writes policy under name, and an AppRole of that name bound to it alone (no default policy)
// with params added, enabling AppRole auth where needed. It returns the role id and a new secret id.
func (v *Vault) AppRole(ctx context.Context, name, policy string, params map[string]any) (roleID, secretID string, err error) {
	admin := v.Client()
	if err := admin.Sys().PutPolicyWithContext(ctx, name, policy); err != nil {
		return "", "", fmt.Errorf("vault policy write %s: %w", name, err)
	}
	mounts, err := admin.Sys().ListAuthWithContext(ctx)
	if err != nil {
		return "", "", fmt.Errorf("list auth methods: %w", err)
	}
	if _, ok := mounts["approle/"]; !ok {
		if err := admin.Sys().EnableAuthWithOptionsWithContext(ctx, "approle", &vaultapi.EnableAuthOptions{Type: "approle"}); err != nil {
			return "", "", fmt.Errorf("enable AppRole: %w", err)
		}
	}
	role := map[string]any{"token_policies": []string{name}, "token_no_default_policy": true}
	for k, val := range params {
		role[k] = val
	}
	if _, err := admin.Logical().WriteWithContext(ctx, "auth/approle/role/"+name, role); err != nil {
		return "", "", fmt.Errorf("write AppRole %s: %w", name, err)
	}
	rid, err := admin.Logical().ReadWithContext(ctx, "auth/approle/role/"+name+"/role-id")
	if err != nil {
		return "", "", fmt.Errorf("read role id: %w", err)
	}
	sid, err := admin.Logical().WriteWithContext(ctx, "auth/approle/role/"+name+"/secret-id", nil)
	if err != nil {
		return "", "", fmt.Errorf("new secret id: %w", err)
	}
	return rid.Data["role_id"].(string), sid.Data["secret_id"].(string), nil
}

// Version is the server's version as it reports it, e.g. "1.21.0".
func (v *Vault) Version() (string, error) {
	s, err := v.client("").Sys().SealStatus()
	if err != nil {
		return "", fmt.Errorf("vault seal status: %w", err)
	}
	return s.Version, nil
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
