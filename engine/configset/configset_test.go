package configset

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// exampleSecrets are what the example repository's secrets resolve to in tests.
var exampleSecrets = map[string]string{
	"SECRET_REGISTRY_PASSWORD": "example-registry-password",
	"SECRET_KV_PASSWORD":       "example-kv-password",
}

func renderExamples(t *testing.T) []*manifest.Result {
	t.Helper()
	fsys := os.DirFS("../../examples/stands-repo")
	files, err := manifest.Discover(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("example repository has %d stands, want at least 3", len(files))
	}
	results, err := manifest.PreflightAll(context.Background(), fsys, files, manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: "demo"},
		Secrets:     manifest.EnvSource{Lookup: func(k string) (string, bool) { v, ok := exampleSecrets[k]; return v, ok }},
	})
	if err != nil {
		t.Fatalf("example repository does not validate:\n%v", err)
	}
	return results
}

// TestExamplesGolden renders the example repository and compares every file with testdata/golden
// (go test -run TestExamplesGolden -update rewrites them).
func TestExamplesGolden(t *testing.T) {
	out := t.TempDir()
	for _, r := range renderExamples(t) {
		dir, err := Write(out, r.Rendered)
		if err != nil {
			t.Fatal(err)
		}
		checkModes(t, dir)
	}
	golden := filepath.Join("testdata", "golden")
	if *update {
		if err := os.RemoveAll(golden); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(golden, os.DirFS(out)); err != nil {
			t.Fatal(err)
		}
	}
	got, want := tree(t, out), tree(t, golden)
	for name, data := range got {
		w, ok := want[name]
		switch {
		case !ok:
			t.Errorf("%s: rendered but not in golden files (run with -update)", name)
		case !bytes.Equal(data, w):
			t.Errorf("%s differs from its golden file:\n--- got\n%s\n--- want\n%s", name, data, w)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("%s: golden file no longer rendered", name)
		}
	}
}

func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkModes: configsets hold secrets, so nothing in them is readable by others.
func checkModes(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(fileMode)
		if d.IsDir() {
			want = dirMode
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExamplesParse parses what the examples render, independently of the preflight's own checks:
// cloud-init is a #cloud-config YAML mapping with users, Pod YAML is a Pod whose images are the
// instance's images, connection output is a JSON object, and the two-node stand's web app is
// configured with the private address of the kv instance on the other node.
func TestExamplesParse(t *testing.T) {
	byID := map[string]*manifest.Rendered{}
	for _, r := range renderExamples(t) {
		byID[r.Stand.ID] = r.Rendered
		for _, n := range r.Rendered.Nodes {
			if !bytes.HasPrefix(n.CloudInit, []byte("#cloud-config\n")) {
				t.Errorf("%s/%s: cloud-init does not start with #cloud-config", r.Stand.ID, n.Name)
			}
			var ci struct {
				Users      []map[string]any `yaml:"users"`
				WriteFiles []map[string]any `yaml:"write_files"`
				Runcmd     []any            `yaml:"runcmd"`
			}
			if err := yaml.Unmarshal(n.CloudInit, &ci); err != nil {
				t.Errorf("%s/%s: cloud-init: %v", r.Stand.ID, n.Name, err)
			}
			if len(ci.Users) != 2 || ci.Users[0]["name"] != r.Stand.Users.Sudo || ci.Users[1]["name"] != r.Stand.Users.App {
				t.Errorf("%s/%s: cloud-init users = %v", r.Stand.ID, n.Name, ci.Users)
			}
			if !strings.Contains(string(n.CloudInit), "network-pre ordering removed") {
				t.Errorf("%s/%s: cloud-init lacks the firewalld ordering fix", r.Stand.ID, n.Name)
			}
		}
		for _, in := range r.Rendered.Instances {
			var pod struct {
				Kind string `yaml:"kind"`
				Spec struct {
					Containers []struct {
						Image string `yaml:"image"`
						Ports []struct {
							HostPort int `yaml:"hostPort"`
						} `yaml:"ports"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			}
			if err := yaml.Unmarshal(in.Pod, &pod); err != nil {
				t.Errorf("%s %s/%s: Pod YAML: %v", r.Stand.ID, in.App, in.Instance, err)
			}
			if pod.Kind != "Pod" || len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].Image != in.Images[0] {
				t.Errorf("%s %s/%s: Pod = %+v, images %v", r.Stand.ID, in.App, in.Instance, pod, in.Images)
			}
			var conn map[string]any
			if err := json.Unmarshal(in.Connection, &conn); err != nil || conn["endpoint"] == nil {
				t.Errorf("%s %s/%s: connection %s: %v", r.Stand.ID, in.App, in.Instance, in.Connection, err)
			}
		}
	}
	two := byID["demo_demo_two-node"]
	if two == nil {
		t.Fatal("no two-node stand")
	}
	var web *manifest.RenderedInstance
	for _, in := range two.Instances {
		if in.App == "web" {
			web = in
		}
	}
	if web == nil || web.Node != "web" {
		t.Fatalf("two-node: no web instance on node web")
	}
	dbIP := manifest.PreflightAddresses(two.Stand).Nodes["db"].PrivateIP
	var env string
	for _, f := range web.Files {
		if strings.HasSuffix(f.Dest, "/web.env") {
			env = string(f.Content)
		}
	}
	if !strings.Contains(env, "BACKEND_ADDR="+dbIP+":6379\n") {
		t.Errorf("web.env does not point at db's private address %s:\n%s", dbIP, env)
	}
}

// TestExampleOverlay: tests and the local demo point the example stands at another registry with a
// small overlay manifest, without editing the examples: images and the registry come from
// preferences and registries, which a dependent manifest overrides.
func TestExampleOverlay(t *testing.T) {
	base, err := testfs.Dir("../../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := testfs.Overlay(base, testfs.Parse(`-- stands/two-node-local/stand.yml --
from_dep_manifest: ../two-node/stand.yml
stand:
  env: two-node-local
registries:
  local:
    url: 10.0.2.100:5000
    insecure: true
apps:
  kv:
    preferences:
      image: 10.0.2.100:5000/stands/kv:test
  web:
    instances:
      front:
        preferences:
          image: 10.0.2.100:5000/stands/web:test
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := manifest.Preflight(context.Background(), fsys, "stands/two-node-local/stand.yml", manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: "demo"},
		Secrets:     manifest.EnvSource{Lookup: func(k string) (string, bool) { v, ok := exampleSecrets[k]; return v, ok }},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Stand
	if len(s.Nodes) != 2 || s.Registries[0].URL.Text != "10.0.2.100:5000" || !s.Registries[0].Insecure || s.Registries[0].Username.Text != "robot" {
		t.Errorf("overlay not merged: nodes %d, registry %+v", len(s.Nodes), s.Registries[0])
	}
	var images []string
	for _, in := range res.Rendered.Instances {
		images = append(images, in.Images...)
	}
	if strings.Join(images, " ") != "10.0.2.100:5000/stands/kv:test 10.0.2.100:5000/stands/web:test" {
		t.Errorf("images = %v", images)
	}
}
