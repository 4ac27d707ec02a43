package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/vault"
)

// secrets is Vault when --vault-addr is set, else local mode: secrets from SECRET_<NAME> (with
// FilesOnly: SECRET_<NAME>_FILE) and connection records as 0600 files under
// <state-dir>/connections. The closer, when not nil, ends the Vault login's renewal.
func (s *Settings) secrets(env Env, log *slog.Logger) (reconcile.Secrets, io.Closer, error) {
	if s.VaultAddr == "" {
		dir, err := s.stateFile("connections")
		if err != nil {
			return nil, nil, err
		}
		src := "SECRET_<NAME> variables"
		if s.FilesOnly {
			src = "SECRET_<NAME>_FILE files"
		}
		log.Info("no Vault address: secrets from " + src + ", connection records in " + dir)
		return &localSecrets{SecretSource: localSource(env, s.FilesOnly), dir: dir}, nil, nil
	}
	auth, err := vaultAuth(env, s.VaultRoleID)
	if err != nil {
		return nil, nil, err
	}
	v := vault.Open(s.VaultAddr, auth, log, vault.WithMount(s.VaultMount), vault.WithPrefix(s.VaultPrefix))
	return v, v, nil
}

// vaultAuth is AppRole when VAULT_ROLE_ID is set, else a token; the token and the secret id follow
// the credential rule (KEY or KEY_FILE, not both), and files are read again at each login.
func vaultAuth(env Env, role string) (vault.Auth, error) {
	token, tokenFile, err := credential.Source(env, "VAULT_TOKEN")
	if err != nil {
		return nil, err
	}
	if role != "" {
		secretID, secretIDFile, err := credential.Source(env, "VAULT_SECRET_ID")
		switch {
		case err != nil:
			return nil, err
		case secretID != "" || secretIDFile == "":
			return nil, errors.New("--vault-role-id is set: the secret id must come from $VAULT_SECRET_ID_FILE or credentials.vault-secret-id (read at each login)")
		case token != "" || tokenFile != "":
			return nil, errors.New("both --vault-role-id and a Vault token are set: set one")
		}
		return vault.AppRole{RoleID: role, SecretIDFile: secretIDFile}, nil
	}
	switch {
	case tokenFile != "":
		return vault.TokenFile(tokenFile), nil
	case token != "":
		return vault.Token(token), nil
	}
	return nil, errors.New("--vault-addr is set but no Vault login: $VAULT_TOKEN_FILE (or credentials.vault-token), or --vault-role-id with $VAULT_SECRET_ID_FILE (or credentials.vault-secret-id)")
}

// localSecrets is local mode's secret store.
type localSecrets struct {
	manifest.SecretSource
	dir string
}

func (l *localSecrets) WriteConnection(_ context.Context, id string, record json.RawMessage) error {
	return engine.WriteConnectionFile(l.dir, id, record)
}

// localSource resolves !secret NAME from SECRET_<NAME>, or, with filesOnly (the daemon), from the file
// SECRET_<NAME>_FILE names: a value in the daemon's environment is refused, naming the variable.
func localSource(env Env, filesOnly bool) manifest.SecretSource {
	if !filesOnly {
		return manifest.EnvSource{Lookup: func(k string) (string, bool) {
			v := env(k)
			return v, v != ""
		}}
	}
	return fileSecrets{env}
}

type fileSecrets struct{ env Env }

func (s fileSecrets) Secret(_ context.Context, ref manifest.SecretRef) (string, error) {
	name := manifest.EnvName(ref)
	if s.env(name) != "" {
		return "", fmt.Errorf("%w: $%s is set, but the daemon takes secrets from files only: set $%s_FILE", manifest.ErrSecretNotFound, name, name)
	}
	file := s.env(name + "_FILE")
	if file == "" {
		return "", fmt.Errorf("%w: $%s_FILE is not set", manifest.ErrSecretNotFound, name)
	}
	v, err := credential.Read(s.env, name)
	if err != nil {
		return "", fmt.Errorf("%w: %v", manifest.ErrSecretNotFound, err)
	}
	return v, nil
}

func (s fileSecrets) SecretExists(ctx context.Context, ref manifest.SecretRef) error {
	_, err := s.Secret(ctx, ref)
	return err
}
