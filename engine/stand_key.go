package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// ErrKeyFileMismatch: the key file holds another key than the one the stand's servers authorize.
var ErrKeyFileMismatch = errors.New("the key file holds another key than the stand's")

// readKeyFile reads a private key file, or reports it absent.
func readKeyFile(path string) (private, public string, found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("read the stand's key file: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return "", "", false, fmt.Errorf("the stand's key file %s is encrypted: give an unencrypted key (it is kept encrypted in the stand's state)", path)
		}
		return "", "", false, fmt.Errorf("the stand's key file %s holds no private key the SSH library reads: %w", path, err)
	}
	return string(data), authorized(signer.PublicKey()), true, nil
}

// newKeyFromFile is a new stand's key: the file's, or a new pair written there (not by a preview,
// which writes nothing).
func newKeyFromFile(path string, readOnly bool) (private, public string, err error) {
	private, public, found, err := readKeyFile(path)
	if err != nil || found {
		return private, public, err
	}
	if private, public, err = newEd25519("stands-reconciler"); err != nil {
		return "", "", err
	}
	if !readOnly {
		err = writeKeyFile(path, private)
	}
	return private, public, err
}

// keepKeyFile checks the file against the key in the stand's state, or writes that key there. A
// different key is refused: servers authorize the key they were created with (user data is never
// changed after the create), so taking the file's would lock the stand out of its nodes.
func keepKeyFile(path, private, public string, readOnly bool) error {
	_, filePublic, found, err := readKeyFile(path)
	switch {
	case err != nil:
		return err
	case found && filePublic != public:
		return fmt.Errorf("%w: %s holds %s, the stand's servers authorize %s, kept in its state since it was created: point STAND__PATH_TO_KEY at that key, or at a missing file to have it written",
			ErrKeyFileMismatch, path, fingerprint(filePublic), fingerprint(public))
	case !found && !readOnly:
		return writeKeyFile(path, private)
	}
	return nil
}

// writeKeyFile writes a private key readable by its owner only, into a folder that must exist (the
// the Stands Engine's rule: a key is not dropped somewhere unexpected).
func writeKeyFile(path, private string) error {
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return fmt.Errorf("write the stand's key file %s: its folder does not exist", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write the stand's key file: %w", err)
	}
	if _, err := f.WriteString(private); err != nil {
		f.Close()
		return fmt.Errorf("write the stand's key file: %w", err)
	}
	return f.Close()
}

// fingerprint is an authorized_keys line's SHA256 fingerprint.
func fingerprint(authorizedKey string) string {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(authorizedKey))
	if err != nil {
		return "an unreadable key"
	}
	return ssh.FingerprintSHA256(k)
}
