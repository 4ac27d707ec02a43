// Package sshsig makes and checks SSH signatures in OpenSSH's "SSHSIG" format (the format of
// ssh-keygen -Y sign, which git uses for commits with gpg.format=ssh): the reconciler signs the
// commits it writes with it, and trusts a commit under its name only with a valid one
// (docs/operations.md#the-signing-key).
package sshsig

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// NamespaceGit is the namespace git signs and verifies commits in.
const NamespaceGit = "git"

const (
	magic      = "SSHSIG"
	version    = 1
	hashSHA512 = "sha512"
	armorBegin = "-----BEGIN SSH SIGNATURE-----"
	armorEnd   = "-----END SSH SIGNATURE-----"
)

// ErrNotSigned is the error of a text that holds no SSH signature.
var ErrNotSigned = errors.New("no SSH signature")

// blob is the signature's wire form (PROTOCOL.sshsig, "Armored format").
type blob struct {
	Magic     [6]byte
	Version   uint32
	PublicKey []byte
	Namespace string
	Reserved  string
	Hash      string
	Signature []byte
}

// signedData is what the key signs: the message's digest under hash, bound to the namespace.
func signedData(namespace, hash string, message []byte) []byte {
	var digest []byte
	if hash == hashSHA512 {
		sum := sha512.Sum512(message)
		digest = sum[:]
	} else {
		sum := sha256.Sum256(message)
		digest = sum[:]
	}
	return append([]byte(magic), ssh.Marshal(struct {
		Namespace, Reserved, Hash string
		Digest                    []byte
	}{namespace, "", hash, digest})...)
}

// Sign signs message in namespace and returns the armored signature, ending in a newline.
func Sign(signer ssh.Signer, namespace string, message []byte) (string, error) {
	data := signedData(namespace, hashSHA512, message)
	var sig *ssh.Signature
	var err error
	if as, ok := signer.(ssh.AlgorithmSigner); ok && signer.PublicKey().Type() == ssh.KeyAlgoRSA {
		sig, err = as.SignWithAlgorithm(nil, data, ssh.KeyAlgoRSASHA512) // ssh-rsa (SHA-1) is refused by OpenSSH
	} else {
		sig, err = signer.Sign(nil, data)
	}
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	b := blob{Version: version, PublicKey: signer.PublicKey().Marshal(), Namespace: namespace, Hash: hashSHA512, Signature: ssh.Marshal(sig)}
	copy(b.Magic[:], magic)
	enc := base64.StdEncoding.EncodeToString(ssh.Marshal(b))
	var out strings.Builder
	out.WriteString(armorBegin + "\n")
	for len(enc) > 70 {
		out.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	out.WriteString(enc + "\n" + armorEnd + "\n")
	return out.String(), nil
}

// Verify checks the armored signature of message in namespace, and returns the key that made it.
// Which keys to trust is the caller's: compare the key returned.
func Verify(armored string, namespace string, message []byte) (ssh.PublicKey, error) {
	text := strings.TrimSpace(armored)
	if !strings.HasPrefix(text, armorBegin) || !strings.HasSuffix(text, armorEnd) {
		return nil, ErrNotSigned
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(text[len(armorBegin):len(text)-len(armorEnd)]), ""))
	if err != nil {
		return nil, fmt.Errorf("read the signature: %w", err)
	}
	var b blob
	if err := ssh.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("read the signature: %w", err)
	}
	switch {
	case string(b.Magic[:]) != magic || b.Version != version:
		return nil, fmt.Errorf("read the signature: not an SSHSIG version %d", version)
	case b.Namespace != namespace:
		return nil, fmt.Errorf("the signature is for namespace %q, not %q", b.Namespace, namespace)
	case b.Hash != hashSHA512 && b.Hash != "sha256":
		return nil, fmt.Errorf("the signature's hash %q is not sha256 or sha512", b.Hash)
	}
	pub, err := ssh.ParsePublicKey(b.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("read the signature's key: %w", err)
	}
	var sig ssh.Signature
	if err := ssh.Unmarshal(b.Signature, &sig); err != nil {
		return nil, fmt.Errorf("read the signature: %w", err)
	}
	if pub.Type() == ssh.KeyAlgoRSA && sig.Format == ssh.KeyAlgoRSA {
		return nil, errors.New("the signature uses ssh-rsa (SHA-1), which is not accepted")
	}
	if err := pub.Verify(signedData(namespace, b.Hash, message), &sig); err != nil {
		return nil, fmt.Errorf("the signature does not match: %w", err)
	}
	return pub, nil
}

// SameKey says whether two public keys are one.
func SameKey(a, b ssh.PublicKey) bool {
	return a != nil && b != nil && bytes.Equal(a.Marshal(), b.Marshal())
}
