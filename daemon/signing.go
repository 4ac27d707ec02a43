package daemon

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/credential"
)

// signingKeyFile is the key the daemon makes in its state folder when no credential signing-key is
// given (docs/operations.md#the-signing-key).
const signingKeyFile = "signing-key"

// signing is the key the reconciler signs its commits with: the credential signing-key
// ($STANDS_SIGNING_KEY_FILE), else <state-dir>/signing-key, an ed25519 key made there at the first
// start when create is set; with the public keys of --signing-keys-trusted, keys rotated out whose
// signatures still count. from says where the key is.
func (s *Settings) signing(env Env, create bool) (key ssh.Signer, trusted []ssh.PublicKey, from string, err error) {
	if trusted, err = s.trustedKeys(); err != nil {
		return nil, nil, "", err
	}
	text, err := credential.Read(env, "STANDS_SIGNING_KEY")
	switch {
	case err != nil && !errors.Is(err, credential.ErrNotSet):
		return nil, nil, "", fmt.Errorf("credential signing-key: %w", err)
	case strings.TrimSpace(text) != "":
		key, err := ssh.ParsePrivateKey([]byte(text))
		if err != nil {
			return nil, nil, "", fmt.Errorf("credential signing-key: %w (an OpenSSH private key without a passphrase)", err)
		}
		return key, trusted, "credential signing-key", nil
	}
	path, err := s.stateFile(signingKeyFile)
	if err != nil {
		return nil, nil, "", err
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && !create:
		return nil, trusted, path + " (made at the first start)", nil
	case errors.Is(err, os.ErrNotExist):
		if data, err = newSigningKey(path); err != nil {
			return nil, nil, "", err
		}
	case err != nil:
		return nil, nil, "", fmt.Errorf("read the signing key: %w", err)
	}
	if key, err = ssh.ParsePrivateKey(data); err != nil {
		return nil, nil, "", fmt.Errorf("read the signing key %s: %w", path, err)
	}
	return key, trusted, path, nil
}

// newSigningKey writes a new ed25519 key to path, readable by the daemon's user alone, and returns
// it. A key another start wrote meanwhile is the one kept.
func newSigningKey(path string) ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "stands-reconciler commit signing")
	if err != nil {
		return nil, err
	}
	data := pem.EncodeToMemory(block)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("make the signing key: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("make the signing key: %w", err)
	}
	return data, f.Close()
}

// trustedKeys reads --signing-keys-trusted: public keys in authorized_keys format, one a line.
func (s *Settings) trustedKeys() ([]ssh.PublicKey, error) {
	if s.SigningKeysTrusted == "" {
		return nil, nil
	}
	data, err := os.ReadFile(s.SigningKeysTrusted)
	if err != nil {
		return nil, fmt.Errorf("read --signing-keys-trusted: %w", err)
	}
	var keys []ssh.PublicKey
	for i, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("read --signing-keys-trusted %s:%d: %w", s.SigningKeysTrusted, i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// signingOption signs the source's commits, and says with which key.
func (s *Settings) signingOption(env Env, log *slog.Logger) (gitsource.Option, error) {
	key, trusted, from, err := s.signing(env, true)
	if err != nil {
		return nil, err
	}
	log.Info("the reconciler's commits are signed; register the key with its Gitea user to show them verified",
		"key", strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key.PublicKey()))), "fingerprint", ssh.FingerprintSHA256(key.PublicKey()),
		"from", from, "trusted_rotated_keys", len(trusted))
	return gitsource.WithSigner(key, trusted...), nil
}

// Signing says, for config check, which key signs the reconciler's commits, and warns where the
// settings make that key differ between replicas (each state folder makes its own).
func (s *Settings) Signing(env Env) (what, warning string) {
	key, trusted, from, err := s.signing(env, false)
	switch {
	case err != nil:
		return "", "" // Check reports it
	case key == nil:
		what = "commits signed with a key made at the first start: " + from
	default:
		what = fmt.Sprintf("commits signed with %s (%s) from %s", ssh.FingerprintSHA256(key.PublicKey()), key.PublicKey().Type(), from)
	}
	if len(trusted) > 0 {
		what += fmt.Sprintf("; %d rotated key(s) still trusted", len(trusted))
	}
	if s.Replicas && !strings.HasPrefix(from, "credential") {
		warning = "with --replicas each replica signs with its own <state-dir>/signing-key, and trusts only its own: a removal another replica pushed is not merged; give every replica the same credential signing-key"
	}
	return what, warning
}
