package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// Gitea is a running Gitea server with an admin user and an access token.
type Gitea struct {
	URL      string // http://127.0.0.1:PORT/ (with the slash Gitea's ROOT_URL has)
	SSHAddr  string // 127.0.0.1:PORT of Gitea's built-in SSH server
	User     string // admin user
	Password string
	Token    string // access token with every scope
	Dir      string // work path: app.ini, data, repositories, log

	hostKeys []ssh.PublicKey
	bin      string
	conf     string
	env      []string
	web      *process // nil while stopped
}

// Start serves `gitea web` (again, after Stop) and waits until HTTP and SSH answer.
func (g *Gitea) Start(t testing.TB) {
	t.Helper()
	if g.web != nil {
		t.Fatal("gitea is already running")
	}
	cmd := exec.Command(g.bin, "--config", g.conf, "--work-path", g.Dir, "web")
	cmd.Env, cmd.Dir = g.env, g.Dir
	web, err := startProcess(cmd, filepath.Join(g.Dir, "web.log"))
	if err != nil {
		t.Fatalf("start gitea web: %v", err)
	}
	g.web = web
	if err := g.waitReady(90 * time.Second); err != nil {
		t.Fatalf("gitea did not start: %v\n%s", err, tail(filepath.Join(g.Dir, "web.log"), filepath.Join(g.Dir, "log", "gitea.log")))
	}
}

// Stop ends `gitea web`: the server is unreachable until Start.
func (g *Gitea) Stop(t testing.TB) {
	t.Helper()
	g.stop()
}

func (g *Gitea) stop() {
	if g.web == nil {
		return
	}
	g.web.stop()
	g.web = nil
}

// StartGitea runs `gitea migrate`, creates an admin user and a token, and serves `gitea web` on
// ephemeral ports with its built-in SSH server, until the test ends.
func StartGitea(t testing.TB) *Gitea {
	t.Helper()
	bin := Binary(t, "gitea", "STANDS_GITEA_BIN")
	staticRoot := giteaStaticRoot(t)
	dir := t.TempDir()
	httpPort, sshPort := FreePort(t), FreePort(t)
	g := &Gitea{
		URL:      fmt.Sprintf("http://127.0.0.1:%d/", httpPort),
		SSHAddr:  fmt.Sprintf("127.0.0.1:%d", sshPort),
		User:     "stands",
		Password: "pw-" + RandomHex(8),
		Dir:      dir,
	}
	conf := filepath.Join(dir, "custom", "conf", "app.ini")
	if err := os.MkdirAll(filepath.Dir(conf), 0o700); err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(`APP_NAME = stands-test
RUN_USER = %[1]s
RUN_MODE = prod
WORK_PATH = %[2]s
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[3]d
ROOT_URL = %[4]s
DOMAIN = 127.0.0.1
SSH_DOMAIN = 127.0.0.1
START_SSH_SERVER = true
SSH_LISTEN_HOST = 127.0.0.1
SSH_PORT = %[5]d
SSH_LISTEN_PORT = %[5]d
BUILTIN_SSH_SERVER_USER = git
OFFLINE_MODE = true
STATIC_ROOT_PATH = %[6]s
APP_DATA_PATH = %[2]s/data
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = %[2]s/data/gitea.db

[repository]
ROOT = %[2]s/repositories

[security]
INSTALL_LOCK = true
SECRET_KEY = %[7]s
INTERNAL_TOKEN = %[8]s

[oauth2]
ENABLED = false

[webhook]
ALLOWED_HOST_LIST = loopback

[service]
DISABLE_REGISTRATION = true

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[mailer]
ENABLED = false

[actions]
ENABLED = false

[log]
MODE = file
LEVEL = Info
ROOT_PATH = %[2]s/log
`, currentUser(), dir, httpPort, g.URL, sshPort, staticRoot, RandomHex(32), "tok-"+RandomHex(32))
	if err := os.WriteFile(conf, []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GITEA_WORK_DIR="+dir, "HOME="+dir, "GITEA_CUSTOM="+filepath.Join(dir, "custom"))
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--config", conf, "--work-path", dir}, args...)...)
		cmd.Env, cmd.Dir = env, dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("gitea %s: %v\n%s%s", args[0], err, out.String(), errb.String())
		}
		return out.String()
	}
	run("migrate")
	run("admin", "user", "create", "--admin", "--username", g.User, "--password", g.Password,
		"--email", g.User+"@example.test", "--must-change-password=false")
	out := run("admin", "user", "generate-access-token", "--username", g.User, "--token-name", "tests", "--scopes", "all", "--raw")
	g.Token = lastLine(out)
	if !tokenRE.MatchString(g.Token) {
		t.Fatalf("gitea generate-access-token printed no token:\n%s", out)
	}

	g.bin, g.conf, g.env = bin, conf, env
	g.Start(t)
	t.Cleanup(g.stop)
	g.hostKeys = readHostKeys(t, filepath.Join(dir, "data", "ssh"))
	return g
}

func (g *Gitea) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if done, err := g.web.exitedNow(); done {
			return fmt.Errorf("gitea web exited: %v", err)
		}
		resp, err := client.Get(g.URL + "api/v1/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if c, err := net.DialTimeout("tcp", g.SSHAddr, time.Second); err == nil {
					c.Close()
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s and %s after %v (last error: %v)", g.URL, g.SSHAddr, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// HostKeyCallback pins the host keys Gitea's SSH server generated, so tests need no
// InsecureIgnoreHostKey.
func (g *Gitea) HostKeyCallback() ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		for _, k := range g.hostKeys {
			if bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
		}
		return errors.New("testenv: unknown gitea host key")
	}
}

// readHostKeys derives the public halves of Gitea's generated SSH host keys.
func readHostKeys(t testing.TB, dir string) []ssh.PublicKey {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("gitea ssh host keys: %v", err)
	}
	var keys []ssh.PublicKey
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".pub") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if s, err := ssh.ParsePrivateKey(data); err == nil {
			keys = append(keys, s.PublicKey())
		}
	}
	if len(keys) == 0 {
		t.Fatalf("gitea generated no SSH host key in %s", dir)
	}
	return keys
}

// giteaStaticRoot is Gitea's module folder (templates, options), recorded by `make tools`.
func giteaStaticRoot(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("STANDS_GITEA_STATIC_ROOT"); p != "" {
		return p
	}
	rec := filepath.Join(RepoRoot(), "bin", "gitea.static-root")
	data, err := os.ReadFile(rec)
	if err != nil {
		Missing(t, "%s missing: run `make tools`", rec)
	}
	p := strings.TrimSpace(string(data))
	if _, err := os.Stat(filepath.Join(p, "options", "locale")); err != nil {
		Missing(t, "gitea static root %s has no options/locale: run `make tools`", p)
	}
	return p
}

// tokenRE is the shape of a Gitea access token: 40 hex digits.
var tokenRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// lastLine is the last non-empty line: Gitea may log to stdout before it prints the token.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Getuid() == 0 {
		return "root"
	}
	return "nobody"
}

// RandomHex is n random bytes in hex, for names and credentials a test makes up.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// tail returns the last lines of log files, for failure messages.
func tail(files ...string) string {
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}
