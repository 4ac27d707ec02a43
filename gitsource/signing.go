package gitsource

import (
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/internal/sshsig"
)

// The reconciler signs every commit it writes (status commits, removal commits) with an SSH key, as
// git does with gpg.format=ssh: `git verify-commit` checks it against an allowed-signers file, and
// Gitea shows it verified once the key is one of its user's. A name and an address anyone with
// write access can put on a commit; a signature only the key's holder can make. So with a key, a
// commit counts as the reconciler's only with a valid signature of that key, or of one it trusts
// still (a key rotated out: docs/operations.md#the-signing-key).

// WithSigner signs the reconciler's commits with key, and trusts as its own only the commits
// signed by key or by one of trusted.
func WithSigner(key ssh.Signer, trusted ...ssh.PublicKey) Option {
	return func(s *Source) { s.signer, s.trusted = key, trusted }
}

// sign signs c with the reconciler's key, when it has one.
func (s *Source) sign(c *object.Commit) error {
	if s.signer == nil {
		return nil
	}
	payload, err := unsigned(c)
	if err != nil {
		return err
	}
	sig, err := sshsig.Sign(s.signer, sshsig.NamespaceGit, payload)
	if err != nil {
		return err
	}
	c.PGPSignature = sig
	return nil
}

// unsigned is the text of c a signature covers: the commit without its signature.
func unsigned(c *object.Commit) ([]byte, error) {
	obj := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(obj); err != nil {
		return nil, fmt.Errorf("encode commit: %w", err)
	}
	r, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// notOwn says why c is not a commit of the reconciler's ("" when it is): made under its identity
// and, when it has a key, signed with a key it trusts.
func (s *Source) notOwn(c *object.Commit) string {
	if c.Author.Email != s.identity.Email || c.Author.Name != s.identity.Name {
		return "its author is not the reconciler"
	}
	if s.signer == nil {
		return ""
	}
	if c.PGPSignature == "" {
		return "it is not signed"
	}
	payload, err := unsigned(c)
	if err != nil {
		return err.Error()
	}
	key, err := sshsig.Verify(c.PGPSignature, sshsig.NamespaceGit, payload)
	if err != nil {
		return "its signature is not valid (" + err.Error() + ")"
	}
	if sshsig.SameKey(key, s.signer.PublicKey()) {
		return ""
	}
	for _, k := range s.trusted {
		if sshsig.SameKey(key, k) {
			return ""
		}
	}
	return "it is signed by a key the reconciler does not trust (" + ssh.FingerprintSHA256(key) + ")"
}
