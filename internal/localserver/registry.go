package localserver

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
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/bcrypt"
)

// Registry is Debian's docker-registry on 127.0.0.1 with an htpasswd login, over plain HTTP.
type Registry struct {
	Addr     string // 127.0.0.1:PORT
	User     string
	Password string
	Dir      string
	proc     *Process
}

// NewRegistry serves a registry from bin (docker-registry) with its files in dir that refuses
// anonymous pulls and pushes: user and password are the only login.
func NewRegistry(ctx context.Context, bin, dir, user, password string) (*Registry, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: fmt.Sprintf("127.0.0.1:%d", port), User: user, Password: password, Dir: dir}
	// The hash is made here rather than by htpasswd(1), which takes the password in its argv.
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		return nil, fmt.Errorf("hash the registry's password: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: %s/data}
  delete: {enabled: true}
http:
  addr: %s
auth:
  htpasswd: {realm: stands, path: %s/htpasswd}
`, dir, r.Addr, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Dir = dir
	if r.proc, err = StartProcess(cmd, r.logPath()); err != nil {
		return nil, err
	}
	if err := r.waitReady(ctx, 20*time.Second); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *Registry) logPath() string { return filepath.Join(r.Dir, "registry.log") }

// waitReady waits for the 401 a login-protected registry answers on /v2/.
func (r *Registry) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if done, err := r.proc.Exited(); done {
			return fmt.Errorf("registry exited: %v\n%s", err, Tail(r.logPath()))
		}
		resp, err := client.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
			err = fmt.Errorf("/v2/ answers %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("registry on %s did not answer 401: %v\n%s", r.Addr, err, Tail(r.logPath()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the registry.
func (r *Registry) Stop() { r.proc.Stop() }

// Pid is the registry's process id.
func (r *Registry) Pid() int { return r.proc.Pid() }

// PushBinary builds an image with no base and no daemon — one layer holding the static binary at
// /app, which is the entrypoint — and pushes it as repo:tag; it returns the reference.
func (r *Registry) PushBinary(ctx context.Context, binary, repo, tag string) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config = v1.Config{Entrypoint: []string{"/app"}, ExposedPorts: map[string]struct{}{"8080/tcp": {}}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	ref, err := name.ParseReference(r.Addr+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		return "", err
	}
	auth := authn.FromConfig(authn.AuthConfig{Username: r.User, Password: r.Password})
	if err := remote.Write(ref, img, remote.WithAuth(auth), remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.String(), nil
}
