package manifest

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// assetsRoot is the example's shared bases and app packages as a resource root of their own.
func assetsRoot(t *testing.T) fstest.MapFS {
	t.Helper()
	ex, err := testfs.Dir("../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	root := fstest.MapFS{}
	for name, f := range ex {
		if strings.HasPrefix(name, "bases/") || strings.HasPrefix(name, "apps/") {
			root[name] = f
		}
	}
	return root
}

const sharedStand = `from_dep_manifest: resource://assets/bases/common.yml
stand:
  project: shared
  env: dev
nodes:
  main:
    profile: small
    apps: [kv]
apps:
  kv:
    instances:
      cache:
        preferences:
          port: 6379
`

var resourceSecrets = EnvSource{Lookup: func(string) (string, bool) { return "s3cr3t", true }}

// A stand whose base, cloud-init and app package live in a resource root loads, renders and hashes
// through it; a change in the root changes the spec hash.
func TestResourceRoot(t *testing.T) {
	repo := fstest.MapFS{"stands/shared/stand.yml": {Data: []byte(sharedStand)}}
	root := assetsRoot(t)
	fsys, err := WithResources(repo, map[string]fs.FS{"assets": root})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Preflight(context.Background(), fsys, "stands/shared/stand.yml", PreflightOptions{LoadOptions: LoadOptions{DefaultOwner: "t"}, Secrets: resourceSecrets})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Stand.Apps[0].Package.Dir; got != "resource:/assets/apps/kv" {
		t.Errorf("package dir %q", got)
	}
	if got := res.Stand.Profiles[0].CloudInit; got != "resource:/assets/bases/cloud-init.yaml.tmpl" {
		t.Errorf("cloud-init %q", got)
	}
	if len(res.Rendered.Nodes) != 1 || !strings.Contains(string(res.Rendered.Nodes[0].CloudInit), "#cloud-config") {
		t.Errorf("cloud-init not rendered from the root")
	}
	h1, err := SpecHash(fsys, res.Stand, res.Secrets, "p")
	if err != nil {
		t.Fatal(err)
	}
	root["apps/kv/redis.conf.tmpl"] = &fstest.MapFile{Data: append([]byte("# changed\n"), root["apps/kv/redis.conf.tmpl"].Data...)}
	h2, _ := SpecHash(fsys, res.Stand, res.Secrets, "p")
	if h1 == h2 {
		t.Error("a change of a file in the resource root leaves the spec hash as it was")
	}
	stands, err := Discover(fsys)
	if err != nil || len(stands) != 1 {
		t.Errorf("Discover = %v %v: a root's files are not the repository's stands", stands, err)
	}
}

func TestResourceRefusals(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string // repository
		root  map[string]string // the assets root; nil: no --resource
		want  string
	}{
		{name: "no root given (the daemon)", files: map[string]string{"stands/shared/stand.yml": sharedStand},
			want: `stands/shared/stand.yml:1:20: read resource://assets/bases/common.yml: "assets": no such resource root`},
		{name: "another root's name", files: map[string]string{"stands/shared/stand.yml": strings.Replace(sharedStand, "//assets/", "//other/", 1)}, root: map[string]string{},
			want: `"other": no such resource root`},
		{name: "a bad name", files: map[string]string{"stands/shared/stand.yml": strings.Replace(sharedStand, "//assets/", "//Assets/", 1)}, root: map[string]string{},
			want: "want resource://NAME/PATH"},
		{name: "out of the root by ..", files: map[string]string{"stands/shared/stand.yml": strings.Replace(sharedStand, "//assets/bases/", "//assets/../bases/", 1)}, root: map[string]string{},
			want: `the path leaves the resource root "assets"`},
		{name: "from the root into the repository", files: map[string]string{"stands/shared/stand.yml": sharedStand, "apps/kv/app.yml": "x"},
			root: map[string]string{"bases/common.yml": "apps:\n  kv:\n    package: ../../../apps/kv\n"},
			want: `resource:/assets/bases/common.yml:3:14: apps.kv.package "../../../apps/kv": the path leaves the resource root "assets"`},
		{name: "from the repository into a root by a relative path", files: map[string]string{"stands/shared/stand.yml": strings.Replace(sharedStand, "resource://assets/bases/common.yml", "../../resource:/assets/bases/common.yml", 1)},
			root: map[string]string{}, want: "a resource root is reached as resource://NAME/PATH"},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := fstest.MapFS{}
			for n, d := range c.files {
				repo[n] = &fstest.MapFile{Data: []byte(d)}
			}
			var fsys fs.FS = repo
			if c.root != nil {
				root := fstest.MapFS{}
				for n, d := range c.root {
					root[n] = &fstest.MapFile{Data: []byte(d)}
				}
				var err error
				if fsys, err = WithResources(repo, map[string]fs.FS{"assets": root}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Preflight(context.Background(), fsys, "stands/shared/stand.yml", PreflightOptions{LoadOptions: LoadOptions{DefaultOwner: "t"}, Secrets: resourceSecrets})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant %q", err, c.want)
			}
		})
	}
}

// A repository whose own files sit where the roots are mounted is refused: they would be read
// neither as its files nor as a root's.
func TestWithResourcesRefusesTheMountName(t *testing.T) {
	repo := fstest.MapFS{"resource:/assets/x": {Data: []byte("x")}}
	if _, err := WithResources(repo, nil); err == nil || !strings.Contains(err.Error(), `"resource:"`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := WithResources(fstest.MapFS{}, map[string]fs.FS{"Bad Name": fstest.MapFS{}}); err == nil {
		t.Fatal("a bad root name was taken")
	}
}
