package sshsig

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// keygen is OpenSSH's ssh-keygen: the reference for the format. Missing, the test fails in CI.
func keygen(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("ssh-keygen")
	if err != nil {
		testenv.Missing(t, "ssh-keygen not found (openssh-client; scripts/install-deps.sh installs it)")
	}
	return p
}

// key is a private key and its signer.
type key struct {
	private any
	ssh.Signer
}

func signers(t *testing.T) map[string]key {
	t.Helper()
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]key{}
	for name, k := range map[string]any{"ed25519": ed, "rsa": rk} {
		s, err := ssh.NewSignerFromKey(k)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = key{k, s}
	}
	return out
}

// TestOpenSSHAgrees: what Sign makes, ssh-keygen -Y verify accepts; what ssh-keygen -Y sign makes,
// Verify accepts; a changed message, another namespace and another key's signature are refused.
func TestOpenSSHAgrees(t *testing.T) {
	bin := keygen(t)
	message := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbbfe4a1\nauthor stands-reconciler <r@x> 1 +0000\n\nstatus\n")
	for name, k := range signers(t) {
		s := k.Signer
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
			allowed := filepath.Join(dir, "allowed")
			if err := os.WriteFile(allowed, []byte("reconciler "+pub+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			armored, err := Sign(s, NamespaceGit, message)
			if err != nil {
				t.Fatal(err)
			}
			sigFile := filepath.Join(dir, "msg.sig")
			if err := os.WriteFile(sigFile, []byte(armored), 0o600); err != nil {
				t.Fatal(err)
			}
			verify := func(namespace string, msg []byte) error {
				cmd := exec.Command(bin, "-Y", "verify", "-f", allowed, "-I", "reconciler", "-n", namespace, "-s", sigFile)
				cmd.Stdin = strings.NewReader(string(msg))
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("%w: %s", err, out)
				}
				return nil
			}
			if err := verify(NamespaceGit, message); err != nil {
				t.Fatalf("ssh-keygen refuses Sign's signature: %v", err)
			}
			if verify("file", message) == nil || verify(NamespaceGit, append(message, 'x')) == nil {
				t.Error("ssh-keygen accepts the signature for another namespace or message: the check proves nothing")
			}
			key, err := Verify(armored, NamespaceGit, message)
			if err != nil || !SameKey(key, s.PublicKey()) {
				t.Fatalf("Verify of Sign: %v", err)
			}

			// And the other way: ssh-keygen signs, Verify checks.
			priv, err := ssh.MarshalPrivateKey(k.private, "")
			if err != nil {
				t.Fatal(err)
			}
			keyFile := filepath.Join(dir, "key")
			if err := os.WriteFile(keyFile, pem.EncodeToMemory(priv), 0o600); err != nil {
				t.Fatal(err)
			}
			msgFile := filepath.Join(dir, "m")
			if err := os.WriteFile(msgFile, message, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "-Y", "sign", "-f", keyFile, "-n", NamespaceGit, msgFile).CombinedOutput(); err != nil {
				t.Fatalf("ssh-keygen -Y sign: %v %s", err, out)
			}
			theirs, err := os.ReadFile(msgFile + ".sig")
			if err != nil {
				t.Fatal(err)
			}
			if key, err := Verify(string(theirs), NamespaceGit, message); err != nil || !SameKey(key, s.PublicKey()) {
				t.Errorf("Verify refuses ssh-keygen's signature: %v", err)
			}
			for what, err := range map[string]error{
				"another message":   verifyErr(string(theirs), NamespaceGit, append(message, 'x')),
				"another namespace": verifyErr(string(theirs), "file", message),
				"no signature":      verifyErr("just text", NamespaceGit, message),
			} {
				if err == nil {
					t.Errorf("%s: verified", what)
				}
			}
		})
	}
}

func verifyErr(armored, namespace string, message []byte) error {
	_, err := Verify(armored, namespace, message)
	return err
}
