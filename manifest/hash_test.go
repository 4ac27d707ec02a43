package manifest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"testing/fstest"
)

func hashOf(t *testing.T, fsys fstest.MapFS, secrets map[string]string, passphrase string) string {
	t.Helper()
	s, err := Load(fsys, "stands/a/stand.yml", LoadOptions{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	sec, err := ResolveSecrets(context.Background(), s, mapSource(secrets))
	if err != nil {
		t.Fatalf("secrets: %v", err)
	}
	h, err := SpecHash(fsys, s, sec, passphrase)
	if err != nil {
		t.Fatalf("hash: %v", err)
	}
	return h
}

func with(base fstest.MapFS, files map[string]string) fstest.MapFS {
	out := fstest.MapFS{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range files {
		out[k] = &fstest.MapFile{Data: []byte(v)}
	}
	return out
}

func edit(t *testing.T, fsys fstest.MapFS, file, old, new string) map[string]string {
	t.Helper()
	s := string(fsys[file].Data)
	if !strings.Contains(s, old) {
		t.Fatalf("%s has no %q", file, old)
	}
	return map[string]string{file: strings.Replace(s, old, new, 1)}
}

// hashRepo is the mini repository with a base manifest and a second app, so every kind of input
// exists.
func hashRepo(t *testing.T) fstest.MapFS {
	base := miniRepo(t)
	stand := string(base["stands/a/stand.yml"].Data)
	// Move the profile into a base and add a second app that deploys after kv.
	i, j := strings.Index(stand, "node_profiles:"), strings.Index(stand, "nodes:")
	baseYML := stand[i:j]
	baseYML = strings.Replace(baseYML, "../../cloud-init.yaml.tmpl", "../cloud-init.yaml.tmpl", 1)
	stand = "from_dep_manifest: ../../bases/base.yml\n" + stand[:i] + stand[j:]
	stand = strings.Replace(stand, "apps: [kv]", "apps: [kv, kv2]", 1)
	stand += "  kv2:\n    package: ../../apps/kv\n    instances:\n      two:\n        preferences: {port: 7001, password: plain}\n"
	return with(base, map[string]string{"stands/a/stand.yml": stand, "bases/base.yml": baseYML})
}

func TestSpecHash(t *testing.T) {
	repo := hashRepo(t)
	const pass = "correct horse"
	h0 := hashOf(t, repo, testSecrets, pass)
	if !strings.HasPrefix(h0, "v1-") || len(h0) != 3+64 {
		t.Fatalf("hash %q: want v1- and 64 hex digits", h0)
	}
	stand := "stands/a/stand.yml"
	reordered := `apps:
  kv:
    instances:
      one:
        preferences:
          password: !secret kv-pass
          port: 7000
    registry: r
    package: ../../apps/kv
  kv2:
    instances: {two: {preferences: {password: plain, port: 7001}}}
    package: ../../apps/kv
registries: {r: {password: !secret reg-pass, url: registry.test, username: u}}
nodes:
  n1: {apps: [kv, kv2], profile: p}
ssh: {key_name_admin: k}
users: {app: app, sudo: admin}
stand:
  owner: t   # comments are formatting
  env: "a"
  project: 'mini'
from_dep_manifest: ../../bases/base.yml
`
	// The same two apps, kv2 first.
	kv2 := "  kv2:\n    package: ../../apps/kv\n    instances:\n      two:\n        preferences: {port: 7001, password: plain}\n"
	swapped := edit(t, repo, stand, kv2, "")
	swapped[stand] = strings.Replace(swapped[stand], "apps:\n  kv:\n", "apps:\n"+kv2+"  kv:\n", 1)
	secretsB := map[string]string{"SECRET_REG_PASS": testSecrets["SECRET_REG_PASS"], "SECRET_KV_PASS": "another-value"}
	cases := []struct {
		name    string
		files   map[string]string
		secrets map[string]string
		pass    string
		same    bool
	}{
		{name: "nothing changed", same: true},
		{name: "keys reordered and YAML reformatted", files: map[string]string{stand: reordered}, same: true},
		{name: "protect is policy, not spec", files: edit(t, repo, stand, "  owner: t\n", "  owner: t\n  protect: true\n"), same: true},
		{name: "an expiry is policy, not spec", files: edit(t, repo, stand, "  owner: t\n", "  owner: t\n  expires: 2026-12-24T18:00:00Z\n"), same: true},
		{name: "a field", files: edit(t, repo, stand, "port: 7000", "port: 7002")},
		{name: "a base manifest", files: edit(t, repo, "bases/base.yml", "type_serv: cx22", "type_serv: cx32")},
		{name: "an app package descriptor", files: edit(t, repo, "apps/kv/app.yml", `mode: "0600"`, `mode: "0640"`)},
		{name: "an app file", files: edit(t, repo, "apps/kv/kv.conf.tmpl", "port ", "port  ")},
		{name: "a Pod YAML template", files: edit(t, repo, "apps/kv/pod.yaml.tmpl", "name: kv", "name: kv0")},
		{name: "the cloud-init template", files: edit(t, repo, "cloud-init.yaml.tmpl", "users:", "users: # x")},
		{name: "the order of apps (deploy order)", files: swapped},
		{name: "a secret value", secrets: secretsB},
		{name: "the passphrase", pass: "another passphrase"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := with(repo, c.files)
			secrets := testSecrets
			if c.secrets != nil {
				secrets = c.secrets
			}
			pass := pass
			if c.pass != "" {
				pass = c.pass
			}
			h := hashOf(t, fsys, secrets, pass)
			if again := hashOf(t, fsys, secrets, pass); again != h {
				t.Fatalf("not deterministic: %s then %s", h, again)
			}
			if c.same && h != h0 {
				t.Errorf("hash changed: %s -> %s", h0, h)
			}
			if !c.same && h == h0 {
				t.Errorf("hash did not change")
			}
		})
	}
}

// TestSpecHashHidesSecrets: nothing derived from the secret without the passphrase appears in the hash.
func TestSpecHashHidesSecrets(t *testing.T) {
	repo := hashRepo(t)
	secret := testSecrets["SECRET_KV_PASS"]
	h := hashOf(t, repo, testSecrets, "pass")
	sum := sha256.Sum256([]byte(secret))
	for _, leak := range []string{secret, hex.EncodeToString([]byte(secret)), hex.EncodeToString(sum[:]), hex.EncodeToString(sum[:8]), base64.StdEncoding.EncodeToString([]byte(secret))} {
		if strings.Contains(h, leak) {
			t.Errorf("hash %s contains %q", h, leak)
		}
	}
	if _, err := SpecHash(repo, &Stand{}, Secrets{}, ""); err == nil {
		t.Error("empty passphrase accepted")
	}
}

// TestScrubLongestFirst: a secret containing another is hidden whole, not cut by the shorter one.
func TestScrubLongestFirst(t *testing.T) {
	s := NewSecrets(map[SecretRef]string{{Path: "user", Field: "value"}: "admin", {Path: "pass", Field: "value"}: "admin-P4ss!"})
	got := s.Scrub("login admin with admin-P4ss! or " + base64.StdEncoding.EncodeToString([]byte("admin-P4ss!")))
	if strings.Contains(got, "P4ss") || strings.Contains(got, "admin") || strings.Contains(got, "YWRtaW4tUDRzcyE") {
		t.Errorf("scrubbed: %q", got)
	}
}
