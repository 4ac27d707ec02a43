package testenv

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is Debian's docker-registry on 127.0.0.1 with an htpasswd login, over plain HTTP.
type Registry struct {
	Addr     string // 127.0.0.1:PORT
	User     string
	Password string
}

// StartRegistry serves a registry that refuses anonymous pulls and pushes, until the test ends.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	bin := Binary(t, "docker-registry", "STANDS_REGISTRY_BIN")
	htpasswd := Binary(t, "htpasswd", "STANDS_HTPASSWD_BIN")
	dir := t.TempDir()
	r := &Registry{Addr: fmt.Sprintf("127.0.0.1:%d", FreePort(t)), User: "robot", Password: "reg-" + RandomHex(8)}
	out, err := exec.Command(htpasswd, "-Bbn", r.User, r.Password).Output()
	if err != nil {
		t.Fatalf("htpasswd: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: %s/data}
  delete: {enabled: true}
http:
  addr: %s
auth:
  htpasswd: {realm: stands-test, path: %s/htpasswd}
`, dir, r.Addr, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start registry: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
	})
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		if i > 200 {
			data, _ := os.ReadFile(logf.Name())
			t.Fatalf("registry on %s did not answer 401: %v\n%s", r.Addr, err, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PushBinary builds an image with no base and no daemon — one layer holding the static binary at
// /app, which is the entrypoint — and pushes it as repo:tag; it returns the reference.
func (r *Registry) PushBinary(t testing.TB, binary, repo, tag string) string {
	t.Helper()
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config = v1.Config{Entrypoint: []string{"/app"}, ExposedPorts: map[string]struct{}{"8080/tcp": {}}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.Addr+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.FromConfig(authn.AuthConfig{Username: r.User, Password: r.Password})
	if err := remote.Write(ref, img, remote.WithAuth(auth), remote.WithContext(context.Background())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}

// BuildStatic builds a Go package of this module as a static linux/amd64 binary and returns its path.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, msg)
	}
	return out
}
