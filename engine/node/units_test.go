package node

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestFlavourFor(t *testing.T) {
	for _, c := range []struct {
		version string
		want    Flavour
		err     bool
	}{{"4.3.1", KubeTemplate, false}, {"4.4.0", Quadlet, false}, {"4.9.3", Quadlet, false}, {"5.2.0-dev", Quadlet, false},
		{"3.4.4", KubeTemplate, false}, {"4.10.0", Quadlet, false}, {"4", "", true}, {"x.y", "", true}} {
		got, err := FlavourFor(c.version)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("FlavourFor(%q) = %q, %v", c.version, got, err)
		}
	}
}

func TestEscape(t *testing.T) {
	// Outputs of systemd-escape 252 (Debian 12).
	for in, want := range map[string]string{
		"/home/app/hello-kube.yaml":                   `-home-app-hello\x2dkube.yaml`,
		"/home/app/.config/stands/kv--cache/pod.yaml": `-home-app-.config-stands-kv\x2d\x2dcache-pod.yaml`,
		".hidden/a b": `\x2ehidden-a\x20b`,
		"/home/app/.config/stands/web--front/pod.yaml": `-home-app-.config-stands-web\x2d\x2dfront-pod.yaml`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func rendered(t *testing.T, overlay string) *manifest.Rendered {
	t.Helper()
	base, err := testfs.Dir("../../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := testfs.Overlay(base, testfs.Parse(overlay))
	if err != nil {
		t.Fatal(err)
	}
	secrets := manifest.EnvSource{Lookup: func(k string) (string, bool) { return "secret-for-" + k, true }}
	res, err := manifest.Preflight(context.Background(), fsys, "stands/two-node/stand.yml", manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: "local"}, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	r, err := manifest.Render(fsys, res.Stand, res.Secrets, manifest.PreflightAddresses(res.Stand))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestUnitsGolden: both flavours of every instance of the two-node example, byte for byte.
func TestUnitsGolden(t *testing.T) {
	r := rendered(t, "")
	for _, f := range []Flavour{Quadlet, KubeTemplate} {
		for _, in := range r.Instances {
			u := Units(r.Stand.ID, in, "/home/app", f, ConfigHash(testKey, in))
			for _, file := range u.Files[1:] { // [0] is the Pod YAML, golden in engine/configset
				golden := filepath.Join("testdata", strings.TrimSuffix(string(f), "@"), InstanceName(in), filepath.Base(file.Path))
				if *update {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, file.Content, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if string(want) != string(file.Content) {
					t.Errorf("%s differs from %s:\n%s", file.Path, golden, file.Content)
				}
			}
			if f == KubeTemplate && !strings.HasPrefix(u.Service, `podman-kube@-home-app-.config-stands-`) {
				t.Errorf("service %s", u.Service)
			}
			if f == Quadlet && u.Service != "stands-"+InstanceName(in)+".service" {
				t.Errorf("service %s", u.Service)
			}
			if u.Files[0].Mode != 0o600 || string(u.Files[0].Content) != string(in.Pod) {
				t.Errorf("pod yaml file %+v", u.Files[0].Path)
			}
		}
	}
}

// TestConfigChangeChangesTheUnit: a preference change changes only that instance's unit text.
func TestConfigChangeChangesTheUnit(t *testing.T) {
	before := rendered(t, "")
	// The example itself with one preference changed, not a second copy of its manifest.
	example, err := os.ReadFile("../../examples/stands-repo/stands/two-node/stand.yml")
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(example), `greeting: "Hello from the two-node stand"`, `greeting: "A new greeting"`, 1)
	if changed == string(example) {
		t.Fatal("the example's greeting is not where this test expects it")
	}
	after := rendered(t, "-- stands/two-node/stand.yml --\n"+changed)
	for i := range before.Instances {
		b, a := before.Instances[i], after.Instances[i]
		for _, f := range []Flavour{Quadlet, KubeTemplate} {
			ub, ua := Units("s", b, "/home/app", f, ConfigHash(testKey, b)), Units("s", a, "/home/app", f, ConfigHash(testKey, a))
			changed := string(ub.Files[1].Content) != string(ua.Files[1].Content)
			if want := b.App == "web"; changed != want || (ub.ConfigHash != ua.ConfigHash) != want {
				t.Errorf("%s/%s %s: unit changed %v, hash %s → %s", b.App, b.Instance, f, changed, ub.ConfigHash, ua.ConfigHash)
			}
		}
	}
}

var testKey = []byte("stands-test-key")

// TestConfigHashIsKeyed: the same configuration under another key has another hash.
func TestConfigHashIsKeyed(t *testing.T) {
	in := rendered(t, "").Instances[0]
	if a, b := ConfigHash(testKey, in), ConfigHash([]byte("other"), in); a == b || a != ConfigHash(testKey, in) {
		t.Errorf("hashes %s %s", a, b)
	}
}
