//go:build bench || faults

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// counter is a reverse proxy that counts the requests it passes on: the daemon reaches Gitea and
// Vault through one each, so a cycle's requests are counted as they leave it.
type counter struct {
	srv *httptest.Server
	n   atomic.Int64
}

func newCounter(t *testing.T, target string) *counter {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) count() int64 { return c.n.Load() }

// world is what the daemon runs against: Gitea and a repository, Vault with the stands' secrets and
// the reconciler's AppRole, hcloudsim, the Pulumi CLI behind a counting wrapper, and our binary.
type world struct {
	t                *testing.T
	gitea            *testenv.Gitea
	repo             *testenv.Repo
	vault            *testenv.Vault
	roleID, secretID string
	hetzner          *testenv.Hetzner
	pl               *testenv.Pulumi
	giteaIn, vaultIn *counter
	bin              string // stands-reconciler
	wrapper, counts  string // the counting pulumi and its log
	dir              string
	api              *gitea.Client // the admin's, made once
}

// secretValues are the example's two secrets, in Vault under stands/.
var secretValues = map[string]string{"kv-password": "kv-bench-p@ss", "registry-password": "reg-bench-p@ss"}

func newWorld(t *testing.T, bin string, hetzner *testenv.Hetzner) *world {
	t.Helper()
	w := &world{t: t, gitea: testenv.StartGitea(t), vault: testenv.StartVault(t), hetzner: hetzner, pl: testenv.NewPulumi(t), bin: bin, dir: t.TempDir()}
	w.roleID, w.secretID = w.vault.AppRole(t, "stands-reconciler", testenv.ReconcilerPolicy(t), map[string]any{"token_ttl": "1h", "token_max_ttl": "24h"})
	for name, v := range secretValues {
		if _, err := w.vault.Client(t).KVv2("secret").Put(context.Background(), "stands/"+name, map[string]any{"value": v}); err != nil {
			t.Fatal(err)
		}
	}
	w.repo = w.gitea.CreateRepo(t, "stands")
	w.giteaIn, w.vaultIn = newCounter(t, strings.TrimSuffix(w.gitea.URL, "/")), newCounter(t, w.vault.Addr)
	w.wrapper, w.counts = testenv.CountingPulumi(t, w.pl.Bin)
	return w
}

// baseFiles are the example repository's bases and app packages, without its stands.
func baseFiles(t *testing.T) map[string]string {
	t.Helper()
	base, err := testfs.Dir(filepath.Join(testenv.RepoRoot(), "examples", "stands-repo"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for p, f := range base {
		if !strings.HasPrefix(p, "stands/") {
			files[p] = string(f.Data)
		}
	}
	return files
}

// benchStand is a one-node stand with the example's kv app (two secrets from Vault), applied
// servers only.
func benchStand(p string, port int) string { return testenv.KVStand(p, port) }

func standPath(p string) string { return "stands/" + p + "/stand.yml" }

// processes is how many Pulumi processes were started so far.
func (w *world) processes() int { return testenv.CountProcesses(w.counts) }

// ups is how many of them were `pulumi up`.
func (w *world) ups() int { return testenv.CountUps(w.counts) }

// repoURL is the repository as the daemon reaches it: through the counting proxy.
func (w *world) repoURL() string {
	u, _ := url.Parse(w.repo.Info.CloneURL)
	return strings.TrimSuffix(w.giteaIn.srv.URL, "/") + u.Path
}

// reader reads the repository directly, not through the proxy.
func (w *world) reader() *gitsource.Source {
	return gitsource.New(w.repo.Info.CloneURL, "main", gitsource.WithToken(w.gitea.User, func() (string, error) { return w.gitea.Token, nil }))
}

func (w *world) secretFile(name, value string) string {
	p := filepath.Join(w.dir, name)
	if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// daemon is `stands-reconciler run` in a process of its own; its state folder outlives restarts.
type daemon struct {
	w       *world
	state   string
	listen  string
	args    []string
	env     []string // added to the daemon's environment
	cmd     *exec.Cmd
	exited  chan error
	logFile string
	started time.Time
}

func (w *world) daemon(args ...string) *daemon {
	return &daemon{w: w, state: filepath.Join(w.t.TempDir(), "state"), args: args}
}

func (d *daemon) start(extra ...string) {
	w, t := d.w, d.w.t
	t.Helper()
	d.listen = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	// The bench pushes to main directly, as a repository that does not review.
	args := append([]string{"run", "--repo", w.repoURL(), "--listen", d.listen, "--drift-interval", "0", "--drain-timeout", "5m", "--require-review=false"}, d.args...)
	cmd := exec.Command(w.bin, append(args, extra...)...)
	cmd.Env = []string{"PATH=" + filepath.Dir(w.wrapper) + ":" + os.Getenv("PATH"), "HOME=" + w.dir,
		"STANDS_STATE_DIR=" + d.state, "STANDS_CLOUD_ENDPOINT=" + w.hetzner.Endpoint,
		"HCLOUD_TOKEN_FILE=" + w.secretFile("hcloud-token", w.hetzner.Token),
		"STANDS_PASSPHRASE_FILE=" + w.secretFile("passphrase", w.pl.Passphrase),
		"STANDS_GIT_USER=" + w.gitea.User, "STANDS_GIT_TOKEN_FILE=" + w.secretFile("git-token", w.gitea.Token),
		"VAULT_ADDR=" + w.vaultIn.srv.URL, "VAULT_ROLE_ID=" + w.roleID, "VAULT_SECRET_ID_FILE=" + w.secretFile("vault-secret-id", w.secretID),
		"STANDS_NODES=skip", "LOG_LEVEL=info", "LOG_FORMAT=json"}
	cmd.Env = append(cmd.Env, d.env...)
	d.logFile = filepath.Join(t.TempDir(), "daemon.log")
	logf, err := os.Create(d.logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// A bench killed mid-run must not leave its daemon polling a Gitea that is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd, d.exited = cmd, make(chan error, 1)
	go func() { d.exited <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		if d.cmd == cmd {
			testenv.KillTree(cmd.Process.Pid)
			<-d.exited
		}
		if t.Failed() {
			data, _ := os.ReadFile(d.logFile)
			t.Logf("daemon log (last 6000 bytes):\n%s", data[max(0, len(data)-6000):])
		}
	})
}

func (d *daemon) stop() {
	t := d.w.t
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("daemon stopped with %v", err)
		}
		d.cmd = nil
	case <-time.After(5 * time.Minute):
		t.Fatal("the daemon did not stop within 5 minutes")
	}
}

func (d *daemon) get(path string) string { return testenv.Get(d.listen, path) }

func (d *daemon) cycles() int { return testenv.Cycles(d.listen) }

// metric is a sample of /metrics by its full name with labels, e.g. `go_goroutines`.
func (d *daemon) metric(name string) float64 {
	for line := range strings.Lines(d.get("/metrics")) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	d.w.t.Fatalf("/metrics has no %s", name)
	return 0
}

// cycleSeconds is the daemon's own total of cycle time and the number of cycles it counts.
func (d *daemon) cycleSeconds() (sum float64, n float64) {
	return d.metric(`stands_cycle_duration_seconds_sum{result="ok"}`), d.metric(`stands_cycle_duration_seconds_count{result="ok"}`)
}

func (d *daemon) waitFor(what string, timeout time.Duration, cond func() bool) {
	t := d.w.t
	t.Helper()
	wait.For(t, what, timeout, cond, wait.Every(50*time.Millisecond), wait.Unless(d.gone))
}

// gone says how the daemon ended, once it has (nil while it runs).
func (d *daemon) gone() error {
	select {
	case err := <-d.exited:
		d.cmd = nil
		return fmt.Errorf("the daemon exited (%v)", err)
	default:
		return nil
	}
}

// clone is the repository, cloned into memory with its whole history.
func (w *world) clone(t *testing.T) *git.Repository {
	t.Helper()
	repo, err := git.Clone(memory.NewStorage(), nil, &git.CloneOptions{URL: w.repo.Info.CloneURL, Auth: w.gitea.HTTPAuth()})
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	return repo
}

// statuses reads every status file of the repository's main.
func (w *world) statuses() map[string]reconcile.Status {
	w.t.Helper()
	snap, err := w.reader().Fetch(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]reconcile.Status{}
	entries, _ := fs.ReadDir(snap.Files, "status")
	for _, e := range entries {
		data, err := fs.ReadFile(snap.Files, "status/"+e.Name())
		if err != nil {
			continue
		}
		var s reconcile.Status
		if json.Unmarshal(data, &s) == nil {
			out[s.ID] = s
		}
	}
	return out
}

// publishSigned commits status files as the daemon whose state folder is state would: under its
// identity, signed with its key (docs/operations.md#the-signing-key). Status files any other commit
// changes the daemon ignores.
func (w *world) publishSigned(t *testing.T, state string, files map[string]string, msg string) {
	t.Helper()
	key, err := ssh.ParsePrivateKey(must(os.ReadFile(filepath.Join(state, "signing-key"))))
	if err != nil {
		t.Fatalf("the daemon's signing key: %v", err)
	}
	src := gitsource.New(w.repo.Info.CloneURL, "main", gitsource.WithToken(w.gitea.User, func() (string, error) { return w.gitea.Token, nil }),
		gitsource.WithSigner(key), gitsource.WithWorkDir(t.TempDir()), gitsource.WithTimeout(10*time.Minute))
	data := map[string][]byte{}
	for p, f := range files {
		data[p] = []byte(f)
	}
	if _, err := src.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Publish(context.Background(), data, msg); err != nil {
		t.Fatalf("publish %d status files: %v", len(files), err)
	}
}

// repoBytes is the size of the repository's objects on Gitea's disk: what every commit costs
// whoever keeps or clones it.
func (w *world) repoBytes(t *testing.T) int64 {
	t.Helper()
	var n int64
	dir := filepath.Join(w.gitea.Dir, "repositories", strings.ToLower(w.repo.Info.Owner.UserName), strings.ToLower(w.repo.Info.Name)+".git", "objects")
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatalf("the repository's size on Gitea's disk: %v", err)
	}
	return n
}

// status reads one stand's status file of main through Gitea's API: at thousands of stands a
// fetch of the whole repository for each look would be the bench's own cost.
func (w *world) status(t *testing.T, id string) (reconcile.Status, bool) {
	t.Helper()
	var s reconcile.Status
	if w.api == nil {
		w.api = w.gitea.API(t)
	}
	data, _, err := w.api.GetFile(w.repo.Info.Owner.UserName, w.repo.Info.Name, "main", stands.StatusPath(id))
	if err != nil || json.Unmarshal(data, &s) != nil {
		return s, false
	}
	return s, true
}

// logSince says whether a record holding every one of want was logged at or after since.
func (d *daemon) logSince(since time.Time, want ...string) bool {
	data, _ := os.ReadFile(d.logFile)
lines:
	for line := range strings.Lines(string(data)) {
		for _, w := range want {
			if !strings.Contains(line, w) {
				continue lines
			}
		}
		var rec struct {
			Time time.Time `json:"time"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && !rec.Time.Before(since) {
			return true
		}
	}
	return false
}

// rss is the daemon's resident memory in MiB.
func (d *daemon) rss() float64 { return d.metric("process_resident_memory_bytes") / (1 << 20) }

// buildReconciler builds stands-reconciler once for the run.
func buildReconciler(t *testing.T) string {
	t.Helper()
	return buildReconcilerTags(t, "")
}

// buildReconcilerTags builds stands-reconciler with build tags (a control's behaviour).
func buildReconcilerTags(t *testing.T, tags string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "stands-reconciler")
	cmd := exec.Command("go", "build", "-tags", tags, "-o", out, "./cmd/stands-reconciler")
	cmd.Dir = testenv.RepoRoot()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, msg)
	}
	return out
}

// engine is an engine on the daemon's backend, for the bench's own reads and the baseline's applies.
func (w *world) engine(t *testing.T, state string) *engine.Engine {
	return w.engineOn(t, "file://"+backendDir(state))
}

// engineOn is an engine on the backend at url.
func (w *world) engineOn(t *testing.T, url string) *engine.Engine {
	t.Helper()
	eng, err := engine.New(engine.Config{PulumiBin: w.wrapper, BackendURL: url, Passphrase: w.pl.Passphrase,
		CloudToken: w.hetzner.Token, CloudEndpoint: w.hetzner.Endpoint, ProviderBin: w.bin, WorkDir: t.TempDir(), SkipNodes: true})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// head is main's commit now.
func (w *world) head(t *testing.T) string {
	t.Helper()
	snap, err := w.reader().Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap.Commit
}

// backendDir is the daemon's file:// backend.
func backendDir(state string) string { return filepath.Join(state, "pulumi", "local") }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
