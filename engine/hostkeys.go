package engine

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// No trust on first use: the engine makes each node's SSH host key itself, keeps it in the stack (a
// secret output), hands it to the server through cloud-init in a part of its own, ahead of the
// stand's template, and pins its public half before the first connection, also to a replacement
// server. A server that offers another key is refused during the key exchange, before any
// authentication or command.

// OutHostKeys holds each node's host key, node name → the private half (OpenSSH PEM), secret.
const OutHostKeys = "hostKeys"

type hostKey struct{ private, public string }

// hostKeys are the nodes' host keys: the ones the stack keeps, and new ones for nodes it has none of.
func hostKeys(outs auto.OutputMap, nodes []*manifest.Node) (map[string]hostKey, error) {
	kept, _ := outs[OutHostKeys].Value.(map[string]any)
	out := map[string]hostKey{}
	for _, n := range nodes {
		if pemKey, ok := kept[n.Name].(string); ok && pemKey != "" {
			signer, err := ssh.ParsePrivateKey([]byte(pemKey))
			if err != nil {
				return nil, fmt.Errorf("parse the host key of node %s from its stack: %w", n.Name, err)
			}
			out[n.Name] = hostKey{private: pemKey, public: authorized(signer.PublicKey())}
			continue
		}
		private, public, err := newEd25519(fmt.Sprintf("host key of node %s", n.Name))
		if err != nil {
			return nil, err
		}
		out[n.Name] = hostKey{private: private, public: public}
	}
	return out, nil
}

// newEd25519 makes an ed25519 key pair: the private half as OpenSSH PEM, the public as an
// authorized_keys line.
func newEd25519(comment string) (private, public string, err error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return "", "", err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(block)), authorized(signer.PublicKey()), nil
}

func authorized(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// userDataBoundary separates the parts of a server's user data.
const userDataBoundary = "==stands-reconciler-user-data=="

// userData is a server's user data: a MIME multipart document cloud-init merges, the engine's part
// (the host key; no other key type generated, so the server offers only the pinned one) before the
// stand's cloud-init template.
func userData(k hostKey, standCloudInit []byte) string {
	var b strings.Builder
	part := func(name, body string) {
		fmt.Fprintf(&b, "--%s\nContent-Type: text/cloud-config; charset=\"utf-8\"\nMIME-Version: 1.0\nContent-Transfer-Encoding: 8bit\nContent-Disposition: attachment; filename=%q\n\n%s\n",
			userDataBoundary, name, strings.TrimRight(body, "\n"))
	}
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=%q\nMIME-Version: 1.0\n\n", userDataBoundary)
	ours := "#cloud-config\nssh_deletekeys: true\nssh_genkeytypes: []\nssh_keys:\n  ed25519_private: |\n    " +
		strings.ReplaceAll(strings.TrimSpace(k.private), "\n", "\n    ") + "\n  ed25519_public: " + k.public + "\n"
	part("stands-host-key.cfg", ours)
	part("stand.cfg", string(standCloudInit))
	fmt.Fprintf(&b, "--%s--\n", userDataBoundary)
	return b.String()
}
