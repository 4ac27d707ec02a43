package localserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"
	"golang.org/x/crypto/ssh"
)

// GiteaConfig says where a Gitea server lives and how it is reached.
type GiteaConfig struct {
	Bin        string // the gitea binary (bin/gitea)
	StaticRoot string // Gitea's module folder: templates, options (bin/gitea.static-root)
	Dir        string // work path: app.ini, data, repositories, log
	HTTPPort   int
	SSHPort    int
	AppName    string // the site's name in its pages
	Admin      string // the admin user's name
	// Template, when set, is a folder where a migrated database with the admin user and its token is
	// made once (per Gitea binary) and copied from at every start, in place of `gitea migrate` and
	// the two admin commands: about 1.5 s of CPU a start (giteatemplate.go). Every server made from
	// one template shares the admin's password and token.
	Template string
}

// Gitea is a running Gitea server with an admin user and an access token of every scope.
type Gitea struct {
	URL      string // http://127.0.0.1:PORT/ (with the slash Gitea's ROOT_URL has)
	SSHAddr  string // 127.0.0.1:PORT of Gitea's built-in SSH server
	User     string // admin user
	Password string
	Token    string
	Dir      string

	hostKeys []ssh.PublicKey
	bin      string
	conf     string
	env      []string
	web      *Process // nil while stopped
}

// NewGitea runs `gitea migrate` in a new work path, creates the admin user and its token, and serves
// `gitea web` with its built-in SSH server until Stop.
func NewGitea(ctx context.Context, c GiteaConfig) (*Gitea, error) {
	g := &Gitea{
		URL:      fmt.Sprintf("http://127.0.0.1:%d/", c.HTTPPort),
		SSHAddr:  fmt.Sprintf("127.0.0.1:%d", c.SSHPort),
		User:     c.Admin,
		Password: "pw-" + RandomHex(8),
		Dir:      c.Dir,
		bin:      c.Bin,
		conf:     filepath.Join(c.Dir, "custom", "conf", "app.ini"),
	}
	if err := os.MkdirAll(filepath.Dir(g.conf), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(g.conf, []byte(g.appIni(c)), 0o600); err != nil {
		return nil, err
	}
	g.env = append(os.Environ(), "GITEA_WORK_DIR="+c.Dir, "HOME="+c.Dir, "GITEA_CUSTOM="+filepath.Join(c.Dir, "custom"))
	if c.Template != "" {
		if err := g.fromTemplate(ctx, c); err != nil {
			return nil, err
		}
	} else if err := g.setUp(ctx); err != nil {
		return nil, err
	}
	if err := g.Start(); err != nil {
		return nil, err
	}
	keys, err := readHostKeys(filepath.Join(c.Dir, "data", "ssh"))
	if err != nil {
		g.Stop()
		return nil, err
	}
	g.hostKeys = keys
	return g, nil
}

// setUp migrates the work path's database and makes the admin user and its token.
func (g *Gitea) setUp(ctx context.Context) error {
	if _, err := g.cli(ctx, "migrate"); err != nil {
		return err
	}
	if _, err := g.cli(ctx, "admin", "user", "create", "--admin", "--username", g.User, "--password", g.Password,
		"--email", g.User+"@example.test", "--must-change-password=false"); err != nil {
		return err
	}
	out, err := g.cli(ctx, "admin", "user", "generate-access-token", "--username", g.User, "--token-name", "admin", "--scopes", "all", "--raw")
	if err != nil {
		return err
	}
	if g.Token = lastLine(out); !tokenRE.MatchString(g.Token) {
		return fmt.Errorf("gitea generate-access-token printed no token:\n%s", out)
	}
	return nil
}

func (g *Gitea) appIni(c GiteaConfig) string {
	return fmt.Sprintf(`APP_NAME = %[9]s
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
`, currentUser(), c.Dir, c.HTTPPort, g.URL, c.SSHPort, c.StaticRoot, RandomHex(32), "tok-"+RandomHex(32), c.AppName)
}

// cli runs a gitea subcommand on the work path and returns its standard output.
func (g *Gitea) cli(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.bin, append([]string{"--config", g.conf, "--work-path", g.Dir}, args...)...)
	cmd.Env, cmd.Dir = g.env, g.Dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("gitea %s: %w\n%s%s", args[0], err, out.String(), errb.String())
	}
	return out.String(), nil
}

// Start serves `gitea web` (again, after Stop) and waits until HTTP and SSH answer.
func (g *Gitea) Start() error {
	if g.web != nil {
		return errors.New("gitea is already running")
	}
	cmd := exec.Command(g.bin, "--config", g.conf, "--work-path", g.Dir, "web")
	cmd.Env, cmd.Dir = g.env, g.Dir
	web, err := StartProcess(cmd, filepath.Join(g.Dir, "web.log"))
	if err != nil {
		return fmt.Errorf("start gitea web: %w", err)
	}
	g.web = web
	if err := g.waitReady(90 * time.Second); err != nil {
		g.Stop()
		return fmt.Errorf("gitea did not start: %w\n%s", err, Tail(filepath.Join(g.Dir, "web.log"), filepath.Join(g.Dir, "log", "gitea.log")))
	}
	return nil
}

// Stop ends `gitea web`: the server is unreachable until Start.
func (g *Gitea) Stop() {
	if g.web == nil {
		return
	}
	g.web.Stop()
	g.web = nil
}

// Pid is the process id of `gitea web`, 0 while stopped.
func (g *Gitea) Pid() int {
	if g.web == nil {
		return 0
	}
	return g.web.Pid()
}

func (g *Gitea) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if done, err := g.web.Exited(); done {
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

// HostKeyCallback pins the host keys Gitea's SSH server generated.
func (g *Gitea) HostKeyCallback() ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		for _, k := range g.hostKeys {
			if bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
		}
		return errors.New("localserver: unknown gitea host key")
	}
}

// readHostKeys derives the public halves of Gitea's generated SSH host keys.
func readHostKeys(dir string) ([]ssh.PublicKey, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gitea ssh host keys: %w", err)
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
		return nil, fmt.Errorf("gitea generated no SSH host key in %s", dir)
	}
	return keys, nil
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

// API is a Gitea SDK client authenticated as the admin user.
func (g *Gitea) API() (*gitea.Client, error) {
	return gitea.NewClient(strings.TrimSuffix(g.URL, "/"), gitea.SetToken(g.Token))
}

// User is a non-admin Gitea user with a password (to log in to the web pages) and an access token
// of every scope.
type User struct {
	Name     string
	Password string
	Token    string
}

// CreateUser makes a non-admin user through the admin API, and a token as that user.
func (g *Gitea) CreateUser(name string) (*User, error) {
	api, err := g.API()
	if err != nil {
		return nil, err
	}
	u := &User{Name: name, Password: "pw-" + RandomHex(8)}
	no := false
	if _, _, err := api.AdminCreateUser(gitea.CreateUserOption{Username: name, Email: name + "@example.test", Password: u.Password,
		MustChangePassword: &no}); err != nil {
		return nil, fmt.Errorf("create user %s: %w", name, err)
	}
	as, err := gitea.NewClient(strings.TrimSuffix(g.URL, "/"), gitea.SetBasicAuth(name, u.Password))
	if err != nil {
		return nil, err
	}
	tok, _, err := as.CreateAccessToken(gitea.CreateAccessTokenOption{Name: "all", Scopes: []gitea.AccessTokenScope{gitea.AccessTokenScopeAll}})
	if err != nil {
		return nil, fmt.Errorf("token for %s: %w", name, err)
	}
	u.Token = tok.Token
	return u, nil
}

// Client is an API client acting as the user.
func (u *User) Client(g *Gitea) (*gitea.Client, error) {
	return gitea.NewClient(strings.TrimSuffix(g.URL, "/"), gitea.SetToken(u.Token))
}
