package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestSigningKey: without a credential the daemon signs with a key of its state folder, made once
// (mode 0600) and kept across starts; a credential's key is used instead; a key that cannot be read
// is refused naming the credential; rotated keys are read from --signing-keys-trusted; replicas
// without a shared key are warned of.
func TestSigningKey(t *testing.T) {
	dir := t.TempDir()
	given, keyFile := testenv.NewSSHKey(t, dir, "given")
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	trusted := filepath.Join(dir, "trusted")
	if err := os.WriteFile(trusted, append(ssh.MarshalAuthorizedKey(given.PublicKey()), "# a comment\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) Env { return func(k string) string { return vars[k] } }

	s := Settings{}
	s.Engine.StateDir = t.TempDir()
	if what, _ := s.Signing(env(nil)); !strings.Contains(what, "made at the first start") {
		t.Errorf("before the first start: %q", what)
	}
	first, _, from, err := s.signing(env(nil), true)
	if err != nil || first == nil || from != filepath.Join(s.Engine.StateDir, "signing-key") {
		t.Fatalf("the state folder's key: %v %q", err, from)
	}
	if fi, err := os.Stat(from); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key made: %v %v, want mode 0600", fi.Mode(), err)
	}
	again, _, _, err := s.signing(env(nil), true)
	if err != nil || string(again.PublicKey().Marshal()) != string(first.PublicKey().Marshal()) {
		t.Errorf("a second start signs with another key (%v)", err)
	}

	key, _, from, err := s.signing(env(map[string]string{"STANDS_SIGNING_KEY_FILE": keyFile}), true)
	if err != nil || string(key.PublicKey().Marshal()) != string(given.PublicKey().Marshal()) || from != "credential signing-key" {
		t.Errorf("the credential's key: %v %q", err, from)
	}
	if _, _, _, err := s.signing(env(map[string]string{"STANDS_SIGNING_KEY_FILE": bad}), true); err == nil || !strings.Contains(err.Error(), "credential signing-key") {
		t.Errorf("a credential that is no key: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, from, err := s.signing(env(map[string]string{"STANDS_SIGNING_KEY_FILE": empty}), true); err != nil || !strings.HasSuffix(from, "signing-key") || strings.HasPrefix(from, "credential") {
		t.Errorf("an empty credential file (the unit's default): %q %v, want the state folder's key", from, err)
	}

	s.SigningKeysTrusted = trusted
	if _, keys, _, err := s.signing(env(nil), true); err != nil || len(keys) != 1 {
		t.Errorf("--signing-keys-trusted: %d key(s), %v", len(keys), err)
	}
	s.Replicas = true
	if _, warning := s.Signing(env(nil)); !strings.Contains(warning, "give every replica the same credential signing-key") {
		t.Errorf("replicas each with their own key: warning %q", warning)
	}
	if _, warning := s.Signing(env(map[string]string{"STANDS_SIGNING_KEY_FILE": keyFile})); warning != "" {
		t.Errorf("replicas with one key: warning %q", warning)
	}
}
