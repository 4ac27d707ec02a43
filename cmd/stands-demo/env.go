package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// paths are the demo's folder and what it reads from the checkout.
type paths struct {
	root     string // _demo
	bin      string // bin
	examples string // examples/stands-repo
	browser  string // tools/browser: the browser check
	full     bool   // DEMO_NODES=full: the servers are QEMU VMs
}

func (p *paths) absolute() error {
	for _, s := range []*string{&p.root, &p.bin, &p.examples, &p.browser} {
		abs, err := filepath.Abs(*s)
		if err != nil {
			return err
		}
		*s = abs
	}
	for _, tool := range []string{"gitea", "vault", "pulumi", "stands-reconciler", "hcloudsim"} {
		if _, err := os.Stat(filepath.Join(p.bin, tool)); err != nil {
			return fmt.Errorf("%s/%s is missing: run `make build tools` (make demo does)", p.bin, tool)
		}
	}
	return nil
}

func (p *paths) join(elem ...string) string {
	return filepath.Join(append([]string{p.root}, elem...)...)
}

// errRunning: another demo holds the folder's lock.
var errRunning = errors.New("a demo is already running")

// lock takes the demo folder's lock for this process's lifetime: one demo per folder. A folder left
// by a demo that did not stop (kill -9, a reboot) is cleaned first: its servers are ended and its
// files removed.
func lock(p *paths) (*os.File, error) {
	if err := os.MkdirAll(p.root, 0o700); err != nil {
		return nil, err
	}
	f, err := lockOnly(p)
	if errors.Is(err, errRunning) {
		pid, _ := os.ReadFile(p.join("demo.pid"))
		return nil, fmt.Errorf("%w in %s (pid %s): see %s, or stop it with `make demo-down`", errRunning, p.root,
			strings.TrimSpace(string(pid)), p.join("ACCESS.txt"))
	}
	if err != nil {
		return nil, err
	}
	if err := endLeftovers(p, io.Discard); err != nil {
		f.Close()
		return nil, err
	}
	entries, _ := os.ReadDir(p.root)
	for _, e := range entries {
		if e.Name() != "demo.lock" {
			if err := os.RemoveAll(p.join(e.Name())); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	if err := os.WriteFile(p.join("demo.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// record notes a server's pid in the folder, so that `down` can end what a killed demo left running.
func record(p *paths, name string, pid int) error {
	f, err := os.OpenFile(p.join("pids"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%d %s\n", pid, name)
	return err
}

// endLeftovers kills, with every process below it, each recorded server still running in the demo's
// folder, then the VMs of DEMO_NODES=full (endVMs). The working folder decides, not the pid alone: a
// pid reused by an unrelated process since is left alone.
func endLeftovers(p *paths, out io.Writer) error {
	defer endVMs(p, out)
	f, err := os.Open(p.join("pids"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && strings.HasPrefix(cwd+"/", p.root+"/") {
			fmt.Fprintf(out, "ending %s (pid %d), left running\n", fields[1], pid)
			localserver.KillTree(pid)
		}
	}
	return sc.Err()
}

// down stops a running demo (its own stop ends every server it started), ends whatever a demo that
// did not stop left behind, and removes the folder.
func down(p *paths, out io.Writer) error {
	if _, err := os.Stat(p.root); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(out, "no demo in %s\n", p.root)
		return nil
	}
	f, err := lockOnly(p)
	if errors.Is(err, errRunning) {
		data, _ := os.ReadFile(p.join("demo.pid"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		if pid <= 0 {
			return fmt.Errorf("a demo holds %s but its pid is unknown", p.join("demo.lock"))
		}
		fmt.Fprintf(out, "stopping the demo (pid %d)…\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stop the demo: %w", err)
		}
		deadline := time.Now().Add(3 * time.Minute)
		for errors.Is(err, errRunning) && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
			f, err = lockOnly(p)
		}
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := endLeftovers(p, out); err != nil {
		return err
	}
	if err := os.RemoveAll(p.root); err != nil {
		return err
	}
	fmt.Fprintf(out, "demo stopped, %s removed\n", p.root)
	return nil
}

// lockOnly takes the folder's lock without cleaning anything.
func lockOnly(p *paths) (*os.File, error) {
	f, err := os.OpenFile(p.join("demo.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, errRunning
	}
	return f, nil
}

// startServer runs a binary of bin/ in its own folder under the demo's, its output in a log there.
func startServer(p *paths, name string, env []string, args ...string) (*localserver.Process, error) {
	dir := p.join(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Env, cmd.Dir = env, dir
	proc, err := localserver.StartProcess(cmd, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	if err := record(p, name, proc.Pid()); err != nil {
		proc.Stop()
		return nil, err
	}
	return proc, nil
}

// waitHTTP waits until url answers want (with the bearer token, when given) or proc ends.
func waitHTTP(ctx context.Context, proc *localserver.Process, url, token string, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if done, err := proc.Exited(); done {
			return fmt.Errorf("exited: %v", err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			err = fmt.Errorf("%s answers %s", url, resp.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer %d from %s within %v: %v", want, url, timeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// secretFile writes a credential 0600 into the demo's secrets folder and returns its path.
func secretFile(p *paths, name, value string) (string, error) {
	dir := p.join("secrets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(value+"\n"), 0o600)
}

// exampleSecrets reads the example's demo secrets (examples/demo.env) by the names the stands give
// them: SECRET_KV_PASSWORD=… is `!secret kv-password`. The variable's name is derived from the secret's
// by manifest.EnvName, and not the other way round (`-`, `/` and `.` all become `_`), so each name read
// back is checked against that rule.
func exampleSecrets(p *paths) (map[string]string, error) {
	path := filepath.Join(filepath.Dir(p.examples), "demo.env")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		name := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "SECRET_")), "_", "-")
		if !ok || manifest.EnvName(manifest.SecretRef{Path: name, Field: "value"}) != k {
			return nil, fmt.Errorf("%s:%d: want SECRET_NAME=value for a secret whose name has only letters, digits and dashes", path, i+1)
		}
		out[name] = v
	}
	return out, nil
}

func readFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	return string(data), err
}
