package manifest

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
)

// specHashVersion prefixes every spec hash so a change of the canonical form is a visible, deliberate
// re-apply of every stand rather than a silent one.
const specHashVersion = "v1"

// SpecHash is a deterministic digest of everything that defines a stand: the merged manifest (so a
// base manifest counts), every file of its app packages and templates, and its secret values. Key
// order and YAML formatting do not change it; the order of apps and instances does (it is the deploy
// order). stand.protect, stand.suspend and stand.expires are policy, not spec, and are left out: an
// extended lifetime applies nothing.
//
// The digest is an HMAC keyed from the Pulumi passphrase through HKDF, and secret values enter it only
// as HMACs under a second derived key: a hash in a status file or a stack tag reveals no secret, and a
// lost local cache recomputes the same hashes instead of re-applying every stand.
func SpecHash(fsys fs.FS, s *Stand, secrets Secrets, passphrase string) (string, error) {
	if passphrase == "" {
		return "", errors.New("spec hash: the Pulumi passphrase is empty")
	}
	specKey, err := hkdf.Key(sha256.New, []byte(passphrase), []byte("stands-reconciler"), "spec-hash/"+specHashVersion, 32)
	if err != nil {
		return "", fmt.Errorf("derive spec hash key: %w", err)
	}
	secretKey, err := hkdf.Key(sha256.New, []byte(passphrase), []byte("stands-reconciler"), "spec-hash-secrets/"+specHashVersion, 32)
	if err != nil {
		return "", fmt.Errorf("derive secret hash key: %w", err)
	}
	c := canon{secretKey: secretKey, secrets: secrets}
	doc := map[string]any{
		"id":       s.ID,
		"manifest": c.value(stripPolicy(s.root), ""),
	}
	pkgs := map[string]any{}
	files := map[string]bool{}
	for _, p := range s.Profiles {
		if p.CloudInit != "" {
			files[p.CloudInit] = true
		}
	}
	for _, a := range s.Apps {
		pkg := a.Package
		if pkg == nil || pkg.File == "" {
			continue
		}
		data, err := fs.ReadFile(fsys, pkg.File)
		if err != nil {
			return "", fmt.Errorf("spec hash: read %s: %w", pkg.File, err)
		}
		n, diags := parseYAML(pkg.File, data, false)
		if len(diags) > 0 {
			return "", fmt.Errorf("spec hash: %s: %s", pkg.File, diags[0].Msg)
		}
		pkgs[pkg.Dir] = c.value(n, "")
		for _, f := range pkg.Files {
			files[f.Src] = true
		}
		for _, f := range []string{pkg.Pod, pkg.Connection} {
			files[f] = true
		}
		if pkg.PostStart != nil {
			files[pkg.PostStart.Src] = true
		}
	}
	delete(files, "")
	doc["packages"] = pkgs
	fileHashes := map[string]string{}
	for f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return "", fmt.Errorf("spec hash: read %s: %w", f, err)
		}
		sum := sha256.Sum256(data)
		fileHashes[f] = hex.EncodeToString(sum[:])
	}
	doc["files"] = fileHashes
	// encoding/json writes map keys sorted, which is what makes the form canonical.
	canonical, err := json.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("spec hash: encode: %w", err)
	}
	mac := hmac.New(sha256.New, specKey)
	mac.Write([]byte(specHashVersion + "\n"))
	mac.Write(canonical)
	return specHashVersion + "-" + hex.EncodeToString(mac.Sum(nil)), nil
}

// stripPolicy drops stand.protect, stand.suspend and stand.expires from a copy of the merged document.
//
// It also lays users and ssh out at the top level, where this project's first manifests had them:
// the hash is of the stand, not of where its manifest writes them, so neither form re-applies the
// stands the other applied.
func stripPolicy(root *node) *node {
	meta := root.get("stand")
	if meta == nil {
		return root
	}
	m := *meta
	var hoisted []field
	m.fields = slices.DeleteFunc(slices.Clone(m.fields), func(f field) bool {
		if slices.Contains(legacyKeys, f.key) {
			hoisted = append(hoisted, f)
			return true
		}
		return f.key == "protect" || f.key == "suspend" || f.key == "expires"
	})
	r := *root
	r.fields = slices.Clone(root.fields)
	for i := range r.fields {
		if r.fields[i].key == "stand" {
			r.fields[i].value = &m
		}
	}
	r.fields = append(r.fields, hoisted...)
	return &r
}

type canon struct {
	secretKey []byte
	secrets   Secrets
}

// orderedSections are the mappings whose order is meaning (deploy order); elsewhere key order is
// formatting. Paths are dotted, with * for any name.
var orderedSections = map[string]bool{"apps": true, "apps.*.instances": true}

// value turns a node into JSON-able values: mappings become sorted maps, except ordered sections,
// which become lists of [key, value] pairs.
func (c canon) value(n *node, path string) any {
	if n == nil {
		return nil
	}
	switch n.kind {
	case kindMap:
		if orderedSections[path] {
			pairs := make([][2]any, len(n.fields))
			for i, f := range n.fields {
				pairs[i] = [2]any{f.key, c.value(f.value, childPath(path, f.key, true))}
			}
			return pairs
		}
		m := make(map[string]any, len(n.fields))
		for _, f := range n.fields {
			m[f.key] = c.value(f.value, childPath(path, f.key, false))
		}
		return m
	case kindSeq:
		l := make([]any, len(n.items))
		for i, it := range n.items {
			l[i] = c.value(it, path+"[]")
		}
		return l
	case kindSecret:
		v, _ := c.secrets.Value(n.secret)
		mac := hmac.New(sha256.New, c.secretKey)
		mac.Write([]byte(n.secret.String()))
		mac.Write([]byte{0})
		mac.Write([]byte(v))
		return map[string]string{"secret": n.secret.String(), "hmac": hex.EncodeToString(mac.Sum(nil))}
	case kindScalar:
		return [2]string{n.tag, n.value}
	}
	return nil
}

// childPath names a child for orderedSections: names inside apps become *.
func childPath(parent, key string, parentOrdered bool) string {
	if parentOrdered {
		key = "*"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}
