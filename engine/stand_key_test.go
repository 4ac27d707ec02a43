package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// The Stands Engine's STAND__PATH_TO_KEY: a new stand takes the file's key, or writes a new one there; a stand
// with a key in its state writes it to a missing file and refuses a file holding another; a preview
// writes nothing.
func TestStandKeyFile(t *testing.T) {
	dir := t.TempDir()
	statePriv, statePub, err := newEd25519("state")
	if err != nil {
		t.Fatal(err)
	}
	otherPriv, otherPub, _ := newEd25519("other")

	// A new stand, no file: a new key, written 0600.
	path := filepath.Join(dir, "new")
	priv, pub, err := newKeyFromFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileKey(t, path); got != pub || priv == "" {
		t.Errorf("the written key is %q, the stand's %q", got, pub)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", st.Mode().Perm())
	}
	// A new stand, a file: its key.
	imported := filepath.Join(dir, "imported")
	if err := os.WriteFile(imported, []byte(otherPriv), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, pub, err := newKeyFromFile(imported, false); err != nil || pub != otherPub {
		t.Errorf("import: %q %v, want the file's %q", pub, err, otherPub)
	}
	// A preview of a new stand writes nothing.
	if _, _, err := newKeyFromFile(filepath.Join(dir, "preview"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "preview")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a preview wrote the key file: %v", err)
	}
	// A stand with a key: a missing file receives it; the same key passes; another is refused.
	kept := filepath.Join(dir, "kept")
	if err := keepKeyFile(kept, statePriv, statePub, false); err != nil {
		t.Fatal(err)
	}
	if got := fileKey(t, kept); got != statePub {
		t.Errorf("the state's key was not written: %q", got)
	}
	if err := keepKeyFile(kept, statePriv, statePub, false); err != nil {
		t.Errorf("the same key: %v", err)
	}
	err = keepKeyFile(imported, statePriv, statePub, false)
	if !errors.Is(err, ErrKeyFileMismatch) || !strings.Contains(err.Error(), "SHA256:") || strings.Contains(err.Error(), "PRIVATE") {
		t.Errorf("another key: %v", err)
	}
	for _, c := range []struct{ name, path, content, want string }{
		{"no folder", filepath.Join(dir, "missing", "key"), "", "its folder does not exist"},
		{"not a key", filepath.Join(dir, "junk"), "not a key", "holds no private key"},
	} {
		if c.content != "" {
			if err := os.WriteFile(c.path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := newKeyFromFile(c.path, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func fileKey(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		t.Fatal(err)
	}
	return authorized(s.PublicKey())
}
