package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// daemonStand is a one-node stand of project p on the example base; port varies its spec.
func daemonStand(p string, port int) string { return testenv.KVStand(p, port) }

// plainStand is a one-node stand of project p that references no secret (testenv.PlainStand), so
// it is judged even while Vault is down, and the guard against removing every stand does not stand
// in for the ones under test.
func plainStand(p string) string { return testenv.PlainStand(p) }

func standPath(p string) string { return "stands/" + p + "/stand.yml" }

// daemonEnv is everything TestDaemon runs against: real Gitea, the real Pulumi CLI behind a counting
// wrapper, hcloudsim and a real Vault, and the daemon in a process of its own, logged in to Vault as
// in production: an AppRole under the policy the docs give operators, and nothing more.
type daemonEnv struct {
	t        *testing.T
	gitea    *testenv.Gitea
	repo     *testenv.Repo
	hetzner  *testenv.Hetzner
	vault    *testenv.Vault
	roleID   string // the reconciler's AppRole; its secret id is secrets["vault secret id"]
	reader   *gitsource.Source
	counts   string   // one line per Pulumi CLI process: its arguments
	logFile  string   // of the running daemon
	logFiles []string // of every start
	environ  []string // the running daemon's environment
	listen   string
	hookKey  string
	secrets  map[string]string // every secret value the run uses, by name
	pl       *testenv.Pulumi
	// gitUser and gitToken are who the daemon is in Gitea (the admin unless a test says otherwise).
	gitUser, gitToken string
	state             string // the daemon's state folder, kept across its restarts
	cmd               *exec.Cmd
	exited            chan error
}

// newDaemonEnv starts every server and commits the example's bases and app packages with the given
// stands (name → port) to a new repository. The daemon is not started yet.
func newDaemonEnv(t *testing.T, stands map[string]int) *daemonEnv {
	pl := testenv.NewPulumi(t)
	// One state folder for every start, as a restarted daemon keeps its own: a fresh one is an empty
	// Pulumi backend, where a restarted daemon finds no stack at all.
	e := &daemonEnv{t: t, pl: pl, gitea: testenv.StartGitea(t), hetzner: testenv.StartHetzner(t, "hcloud-tok-"+hex.EncodeToString(randomBytes(8))),
		state: filepath.Join(t.TempDir(), "state")}
	e.vault = testenv.StartVault(t)
	roleID, secretID := e.vault.AppRole(t, "stands-reconciler", testenv.ReconcilerPolicy(t), map[string]any{"token_ttl": "1h", "token_max_ttl": "24h"})
	e.roleID = roleID
	e.repo = e.gitea.CreateRepo(t, "stands")
	e.gitUser, e.gitToken = e.gitea.User, e.gitea.Token
	e.reader = gitsource.New(e.repo.Info.CloneURL, "main", gitsource.WithToken(e.gitea.User, func() (string, error) { return e.gitea.Token, nil }))
	e.secrets = map[string]string{
		"kv-password":       "kv+p@ss/" + hex.EncodeToString(randomBytes(6)),
		"registry-password": "reg=p@ss?" + hex.EncodeToString(randomBytes(6)),
		"hcloud token":      e.hetzner.Token,
		"passphrase":        pl.Passphrase,
		"gitea token":       e.gitea.Token,
		"webhook secret":    "hook-" + hex.EncodeToString(randomBytes(8)),
		"vault root token":  e.vault.RootToken,
		"vault secret id":   secretID,
		// In the daemon's environment only, as an operator's SECRET_* for local mode would be: no
		// child of the daemon may inherit it.
		"daemon env sentinel": "env-" + hex.EncodeToString(randomBytes(8)),
	}
	e.hookKey = e.secrets["webhook secret"]
	for _, name := range []string{"kv-password", "registry-password"} {
		if _, err := e.vaultClient().KVv2("secret").Put(context.Background(), "stands/"+name, map[string]any{"value": e.secrets[name]}); err != nil {
			t.Fatal(err)
		}
	}
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
	for p, port := range stands {
		files[standPath(p)] = daemonStand(p, port)
	}
	e.repo.Change(fmt.Sprintf("%d stands", len(stands)), files)
	return e
}

func TestDaemon(t *testing.T) {
	e := newDaemonEnv(t, map[string]int{"a": 6300, "b": 6301, "c": 6302, "d": 6303})
	e.repo.Change("a stand without secrets", map[string]string{standPath("p"): plainStand("p")})
	vc := e.vaultClient()
	// Without the share and last-stand guards, only the code under test stands between an outage
	// (Gitea down, Vault sealed) and a destroy: "nothing destroyed" could not fail otherwise, because
	// a source misread as empty would be refused by the last-stand guard anyway. The guards get their
	// own subtest after a restart without this flag.
	e.start("--allow-mass-destroy")

	ids := []string{"local_a_dev", "local_b_dev", "local_c_dev", "local_d_dev", "local_p_dev"}
	for _, id := range ids {
		e.waitStatus(id, 4*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Ready })
	}
	e.waitReady(http.StatusOK)

	e.run("a merged pull request adds a stand", func(t *testing.T) {
		upsBefore := e.ups()
		e.repo.ChangeOn("add-e", "add stand e", map[string]string{standPath("e"): daemonStand("e", 6310)})
		merge := e.repo.Merge(e.gitea.API(t), "add-e", "Add stand e")
		s := e.waitStatus("local_e_dev", 3*time.Minute, func(s *reconcile.Status) bool {
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == merge
		})
		if len(s.Nodes) != 1 || s.Nodes[0].PublicIPv4 == "" || s.Nodes[0].PrivateIP == "" || s.Nodes[0].ServerID == 0 {
			t.Errorf("nodes: %+v", s.Nodes)
		}
		conn := string(s.Connection)
		if !strings.Contains(conn, `"id_stand": "local_e_dev"`) || !strings.Contains(conn, `"***"`) || strings.Contains(conn, e.secrets["kv-password"]) {
			t.Errorf("status connection is not the masked record:\n%s", conn)
		}
		stored, err := vc.KVv2("secret").Get(context.Background(), "stands/stands/local_e_dev/connection")
		if err != nil || !strings.Contains(fmt.Sprint(stored.Data["value"]), e.secrets["kv-password"]) {
			t.Errorf("Vault does not hold the unmasked connection: %v %v", stored, err)
		}
		if got := e.ups() - upsBefore; got != 1 {
			t.Errorf("adding one stand ran %d pulumi up", got)
		}
		if md := e.file("STATUS.md"); !strings.Contains(md, "local_e_dev") || !strings.Contains(md, "Ready") {
			t.Errorf("STATUS.md:\n%s", md)
		}
	})

	e.run("a poll with nothing new makes no commit", func(t *testing.T) {
		head := e.head()
		cycles := e.logCount("cycle planned")
		e.webhook(e.hookKey, http.StatusAccepted) // poll now, and again on the interval
		e.waitLog("cycle planned", cycles+3, time.Minute)
		if now := e.head(); now != head {
			t.Errorf("a no-op poll committed %s", now)
		}
	})

	e.run("one change of six runs one pulumi up", func(t *testing.T) {
		ups := e.ups()
		commit := e.repo.Change("c: another port", map[string]string{standPath("c"): daemonStand("c", 6399)})
		e.waitStatus("local_c_dev", 3*time.Minute, func(s *reconcile.Status) bool {
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == commit
		})
		e.waitLog("cycle planned", e.logCount("cycle planned")+2, time.Minute)
		if got := e.ups() - ups; got != 1 {
			t.Errorf("%d pulumi up processes for one changed stand of six, want 1", got)
		}
	})

	e.run("removing one stand destroys it", func(t *testing.T) {
		commit := e.repo.Change("remove d", nil, "stands/d")
		e.waitStatus("local_d_dev", 3*time.Minute, func(s *reconcile.Status) bool {
			return s.Phase == reason.Destroyed && s.LastSuccessfulCommit == commit
		})
		for name := range e.hetzner.Servers(t) {
			if strings.HasPrefix(name, "local-d-dev") {
				t.Errorf("server %s of the removed stand is left", name)
			}
		}
	})

	e.run("Gitea down for three polls destroys nothing", func(t *testing.T) {
		deletes := e.deletes()
		failed := e.logCount("cycle failed")
		e.gitea.Stop(t)
		e.waitLog("cycle failed", failed+3, time.Minute)
		e.waitReady(http.StatusServiceUnavailable)
		if got := e.deletes() - deletes; got != 0 {
			t.Errorf("%d server deletions while Gitea was down", got)
		}
		e.gitea.Start(t)
		e.waitReady(http.StatusOK)
		if got := e.deletes() - deletes; got != 0 {
			t.Errorf("%d server deletions after Gitea came back", got)
		}
	})

	e.run("Vault sealed, then restarted: nothing applied or destroyed until unsealed", func(t *testing.T) {
		ups, deletes := e.ups(), e.deletes()
		e.vault.Seal(t) // `vault operator seal`
		commit := e.repo.Change("a: another port; remove c", map[string]string{standPath("a"): daemonStand("a", 6398)}, "stands/c")
		s := e.waitStatus("local_a_dev", 2*time.Minute, func(s *reconcile.Status) bool {
			return s.Reason == reason.VaultUnavailable
		})
		if !strings.Contains(s.Message, "vault") {
			t.Errorf("the status does not name the cause: %+v", s)
		}
		e.waitReady(http.StatusServiceUnavailable)
		// A restart on top: unreachable for a while, then back but sealed, as a real Vault comes back.
		e.vault.Stop(t)
		e.waitLog("cycle planned", e.logCount("cycle planned")+2, time.Minute)
		e.vault.Start(t)
		e.waitLog("cycle planned", e.logCount("cycle planned")+2, time.Minute)
		// Only the hold stands in the way of c's destroy: the guards are lifted (--allow-mass-destroy)
		// and c is not protected.
		if got := e.ups() - ups; got != 0 {
			t.Errorf("%d pulumi up while Vault was sealed or down", got)
		}
		if got := e.deletes() - deletes; got != 0 {
			t.Errorf("%d server deletions while Vault was sealed or down", got)
		}
		if s := e.waitStatus("local_c_dev", time.Second, func(*reconcile.Status) bool { return true }); s.Phase != reason.Blocked || s.Reason != reason.VaultUnavailable {
			t.Errorf("c while Vault was sealed or down: %+v, want Blocked by VaultUnavailable", s)
		}
		if s := e.waitStatus("local_p_dev", time.Second, func(*reconcile.Status) bool { return true }); s.Phase != reason.Ready {
			t.Errorf("p, which needs no secret, while Vault was sealed: %+v", s)
		}
		e.vault.Unseal(t)
		e.waitStatus("local_a_dev", 3*time.Minute, func(s *reconcile.Status) bool {
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == commit
		})
		e.waitStatus("local_c_dev", 3*time.Minute, func(s *reconcile.Status) bool {
			return s.Phase == reason.Destroyed && s.LastSuccessfulCommit == commit
		})
		e.waitReady(http.StatusOK)
	})

	e.run("a webhook with a bad signature is refused", func(t *testing.T) {
		polls := e.logCount("webhook: polling now")
		e.webhook("not-the-secret", http.StatusUnauthorized)
		e.webhook("", http.StatusUnauthorized)
		time.Sleep(500 * time.Millisecond)
		if got := e.logCount("webhook: polling now"); got != polls {
			t.Errorf("a refused webhook triggered %d polls", got-polls)
		}
		e.webhook(e.hookKey, http.StatusAccepted) // control: the right secret does trigger
		e.waitLog("webhook: polling now", polls+1, 10*time.Second)
	})

	e.stop()
	e.start() // the guards back, and a restart on a repository whose stands are all Ready
	e.run("removing every stand is refused until approved", func(t *testing.T) {
		rest := []string{"local_a_dev", "local_b_dev", "local_e_dev", "local_p_dev"}
		deletes := e.deletes()
		e.repo.Change("remove every stand", nil, "stands")
		for _, id := range rest {
			s := e.waitStatus(id, 2*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Blocked })
			if s.Reason != "WouldRemoveAllStands" || !strings.Contains(s.Message, judge.AllowDestroyFile) {
				t.Errorf("%s: %+v", id, s)
			}
		}
		e.waitLog("cycle planned", e.logCount("cycle planned")+2, time.Minute)
		if got := e.deletes() - deletes; got != 0 {
			t.Fatalf("%d server deletions for a refused mass removal", got)
		}
		e.repo.Change("approve removing every stand", map[string]string{judge.AllowDestroyFile: "# approved in review\n" + strings.Join(rest, "\n") + "\n"})
		for _, id := range rest {
			e.waitStatus(id, 3*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Destroyed })
		}
		if n := len(e.hetzner.Servers(t)); n != 0 {
			t.Errorf("%d servers left", n)
		}
	})

	e.stop()

	e.run("no secret in history, logs or status", func(t *testing.T) {
		haystacks := e.history()
		log, err := e.allLogs()
		if err != nil {
			t.Fatal(err)
		}
		haystacks["daemon log"] = string(log)
		// Positive control: the scan finds a secret where one is, in each encoding.
		stored, err := vc.KVv2("secret").Get(context.Background(), "stands/stands/local_e_dev/connection")
		if err != nil {
			t.Fatal(err)
		}
		control := map[string]string{"Vault's connection record": fmt.Sprint(stored.Data["value"]),
			"base64 sample": base64.StdEncoding.EncodeToString([]byte("x" + e.secrets["kv-password"] + "y")),
			"url sample":    "https://h/?p=" + url.QueryEscape(e.secrets["kv-password"])}
		if found := scanSecrets(control, map[string]string{"kv-password": e.secrets["kv-password"]}); len(found) != 3 {
			t.Fatalf("the scan does not work: it found %v in the controls", found)
		}
		if len(haystacks) < 10 {
			t.Fatalf("only %d places scanned", len(haystacks))
		}
		for _, f := range scanSecrets(haystacks, e.secrets) {
			t.Errorf("secret found: %s", f)
		}
	})
}

// run is t.Run with the environment's helpers failing the subtest.
func (e *daemonEnv) run(name string, fn func(t *testing.T)) {
	parent := e.t
	parent.Run(name, func(t *testing.T) {
		e.t = t
		defer func() { e.t = parent }()
		fn(t)
	})
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	f, _ := os.Open("/dev/urandom")
	defer f.Close()
	_, _ = io.ReadFull(f, b)
	return b
}

// scanSecrets reports "<secret> (<form>) in <place>" for every secret found plain, base64- or
// URL-encoded.
func scanSecrets(haystacks map[string]string, secrets map[string]string) []string {
	var found []string
	for name, v := range secrets {
		forms := map[string]string{"plain": v, "base64": base64.StdEncoding.EncodeToString([]byte(v)),
			"base64url": base64.URLEncoding.EncodeToString([]byte(v)), "base64raw": base64.RawStdEncoding.EncodeToString([]byte(v)),
			"query-escaped": url.QueryEscape(v), "path-escaped": url.PathEscape(v),
			"hex": hex.EncodeToString([]byte(v)), "HEX": strings.ToUpper(hex.EncodeToString([]byte(v)))}
		for place, text := range haystacks {
			for form, needle := range forms {
				// base64 of a value inside a longer text is shifted: check the three alignments.
				if strings.Contains(text, needle) || strings.HasPrefix(form, "base64") && containsShiftedBase64(text, v) {
					found = append(found, fmt.Sprintf("%s (%s) in %s", name, form, place))
					break
				}
			}
		}
	}
	return found
}

// containsShiftedBase64 finds v base64-encoded at any offset of a longer encoded text: the stable
// middle of its encoding with 0, 1 or 2 bytes before it.
func containsShiftedBase64(text, v string) bool {
	for shift := range 3 {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, shift), v...))
		// Drop the characters that mix in the padding bytes and the trailing partial group.
		start := (shift*8 + 5) / 6
		end := len(enc) - 4
		if end-start < 8 {
			continue
		}
		if strings.Contains(text, enc[start:end]) {
			return true
		}
	}
	return false
}

func (e *daemonEnv) vaultClient() *vaultapi.Client { return e.vault.Client(e.t) }

// start runs the daemon in its own process with the real Pulumi CLI behind a wrapper on PATH that
// records each process's arguments.
func (e *daemonEnv) start(extra ...string) {
	t, pl := e.t, e.pl
	dir := t.TempDir()
	wrapper, counts := testenv.CountingPulumi(t, pl.Bin)
	e.counts = counts
	e.listen = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cmd := e.command(dir, filepath.Dir(wrapper), e.state, e.listen, extra...)
	e.environ = cmd.Env
	e.logFile = filepath.Join(dir, "daemon.log")
	e.logFiles = append(e.logFiles, e.logFile)
	e.cmd, e.exited = cmd, startLogged(t, cmd, e.logFile)
	t.Cleanup(func() {
		if e.cmd != nil {
			_ = cmd.Process.Kill()
			<-e.exited
		}
		if t.Failed() {
			data, _ := os.ReadFile(e.logFile)
			t.Logf("daemon log (last 6000 bytes):\n%s", data[max(0, len(data)-6000):])
		}
	})
}

// command is the daemon's command line and environment: Pulumi from wrapBin, its state in state,
// its secrets' files and home in dir.
func (e *daemonEnv) command(dir, wrapBin, state, listen string, extra ...string) *exec.Cmd {
	t, pl := e.t, e.pl
	secretFile := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Most tests push to main directly: a test of the review gate turns it on (extra wins).
	cmd := exec.Command(exe, append([]string{"run", "--repo", e.repo.Info.CloneURL, "--poll-interval", "1s", "--listen", listen,
		"--drift-interval", "0", "--drain-timeout", "2m", "--require-review=false"}, extra...)...)
	cmd.Env = []string{runMainEnv + "=1", "PATH=" + wrapBin + ":" + os.Getenv("PATH"), "HOME=" + dir,
		"STANDS_STATE_DIR=" + state, "STANDS_CLOUD_ENDPOINT=" + e.hetzner.Endpoint,
		"HCLOUD_TOKEN_FILE=" + secretFile("hcloud-token", e.hetzner.Token),
		"STANDS_PASSPHRASE_FILE=" + secretFile("passphrase", pl.Passphrase),
		"STANDS_GIT_USER=" + e.gitUser, "STANDS_GIT_TOKEN_FILE=" + secretFile("git-token", e.gitToken),
		"STANDS_WEBHOOK_SECRET_FILE=" + secretFile("webhook-secret", e.hookKey),
		"VAULT_ADDR=" + e.vault.Addr, "VAULT_ROLE_ID=" + e.roleID, "VAULT_SECRET_ID_FILE=" + secretFile("vault-secret-id", e.secrets["vault secret id"]),
		"STANDS_NODES=skip", "LOG_LEVEL=debug", "SECRET_DAEMON_SENTINEL=" + e.secrets["daemon env sentinel"]}
	return cmd
}

// stop sends SIGTERM and expects a clean exit.
// allLogs is the log of every start, in order.
func (e *daemonEnv) allLogs() ([]byte, error) {
	var all []byte
	for _, f := range e.logFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		all = append(all, data...)
	}
	return all, nil
}

func (e *daemonEnv) stop() {
	t := e.t
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-e.exited:
		if err != nil {
			t.Errorf("daemon exit after SIGTERM: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("daemon did not stop within 2 minutes of SIGTERM")
	}
	e.cmd = nil
	if e.logCount("reconciler stopped") != 1 {
		t.Error("no clean stop in the log")
	}
}

func (e *daemonEnv) waitFor(what string, timeout time.Duration, cond func() bool) {
	e.t.Helper()
	waitWhileRunning(e.t, e.exited, what, timeout, 250*time.Millisecond, cond)
}

// waitWhileRunning polls cond every poll until it holds, failing the test when the daemon whose Wait
// reports on exited ends first, or timeout passes.
func waitWhileRunning(t *testing.T, exited chan error, what string, timeout, poll time.Duration, cond func() bool) {
	t.Helper()
	wait.For(t, what, timeout, cond, wait.Every(poll), wait.Unless(func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the daemon exited (%v)", err)
		default:
			return nil
		}
	}))
}

// waitStatus polls the repository until the stand's committed status satisfies cond.
func (e *daemonEnv) waitStatus(id string, timeout time.Duration, cond func(*reconcile.Status) bool) *reconcile.Status {
	e.t.Helper()
	var last *reconcile.Status
	// A wait that fails ends the test (runtime.Goexit runs this): say what the status last was.
	defer func() {
		if e.t.Failed() && last != nil {
			e.t.Logf("the status of %s was last %s %s %q (last successful commit %.12s)", id, last.Phase, last.Reason, last.Message, last.LastSuccessfulCommit)
		}
	}()
	e.waitFor("status of "+id, timeout, func() bool {
		data := e.file(stands.StatusPath(id))
		if data == "" {
			return false
		}
		last = &reconcile.Status{}
		if err := json.Unmarshal([]byte(data), last); err != nil {
			e.t.Fatalf("status/%s.json: %v\n%s", id, err, data)
		}
		return cond(last)
	})
	return last
}

// file reads a file of main's head ("" when absent or Gitea is down).
func (e *daemonEnv) file(name string) string { return snapshotFile(e.reader, name) }

// snapshotFile reads a file of the branch src follows ("" when absent or unreachable).
func snapshotFile(src *gitsource.Source, name string) string {
	snap, err := src.Fetch(context.Background())
	if err != nil {
		return ""
	}
	data, err := fs.ReadFile(snap.Files, name)
	if err != nil {
		return ""
	}
	return string(data)
}

func (e *daemonEnv) head() string {
	snap, err := e.reader.Fetch(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return snap.Commit
}

// ups counts `pulumi up` processes.
func (e *daemonEnv) ups() int { return testenv.CountUps(e.counts) }

// deletes counts server deletions in hcloudsim's call log.
func (e *daemonEnv) deletes() int { return serverDeletes(e.hetzner) }

func serverDeletes(h *testenv.Hetzner) int {
	n := 0
	for _, c := range h.Sim.Calls() {
		if c.Method == http.MethodDelete && strings.HasPrefix(c.Path, "/servers/") {
			n++
		}
	}
	return n
}

func (e *daemonEnv) logCount(msg string) int {
	f, err := os.Open(e.logFile)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && strings.HasPrefix(rec.Msg, msg) {
			n++
		}
	}
	return n
}

func (e *daemonEnv) waitLog(msg string, n int, timeout time.Duration) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("%d log lines %q", n, msg), timeout, func() bool { return e.logCount(msg) >= n })
}

func (e *daemonEnv) waitReady(code int) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("/readyz %d", code), 2*time.Minute, func() bool {
		resp, err := http.Get("http://" + e.listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == code
	})
}

// webhook posts a push event signed with key ("" leaves the signature out) and checks the answer.
func (e *daemonEnv) webhook(key string, want int) {
	e.t.Helper()
	if got := postWebhook(e.t, e.listen, key); got != want {
		e.t.Errorf("webhook signed with %q: %d, want %d", key, got, want)
	}
}

// postWebhook posts a push event signed with key ("" leaves the signature out) to the listener at
// addr and returns the answer's status. Each is a new delivery about a new push, as Gitea sends: a
// replay would only be a hint already taken.
func postWebhook(t *testing.T, addr, key string) int {
	t.Helper()
	body := []byte(`{"ref":"refs/heads/main","after":"` + testenv.RandomHex(20) + `"}`)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhook", bytes.NewReader(body))
	req.Header.Set("X-Gitea-Event", "push")
	req.Header.Set("X-Gitea-Delivery", testenv.RandomHex(16))
	if key != "" {
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write(body)
		req.Header.Set("X-Gitea-Signature", hex.EncodeToString(mac.Sum(nil)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// commits clones the repository and returns every commit of every branch.
func (e *daemonEnv) commits() []*object.Commit {
	t := e.t
	r, err := git.Clone(memory.NewStorage(), nil, &git.CloneOptions{URL: e.repo.Info.CloneURL, Auth: e.gitea.HTTPAuth()})
	if err != nil {
		t.Fatal(err)
	}
	iter, err := r.Log(&git.LogOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []*object.Commit
	if err := iter.ForEach(func(c *object.Commit) error { out = append(out, c); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// history is every commit message and every file version of the repository's whole history.
func (e *daemonEnv) history() map[string]string {
	t := e.t
	out := map[string]string{}
	for _, c := range e.commits() {
		out["message of "+c.Hash.String()[:12]] = c.Message
		if c.Author.Email == gitsource.DefaultIdentity.Email {
			// The reconciler's own commits touch status only.
			parent, err := c.Parent(0)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := parent.Patch(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, fp := range patch.FilePatches() {
				from, to := fp.Files()
				for _, f := range []interface{ Path() string }{from, to} {
					if f != nil && !stands.IsStatusPath(f.Path()) {
						t.Errorf("status commit %s touches %s", c.Hash, f.Path())
					}
				}
			}
		}
		files, err := c.Files()
		if err != nil {
			t.Fatal(err)
		}
		err = files.ForEach(func(f *object.File) error {
			content, err := f.Contents()
			out[f.Name+"@"+c.Hash.String()[:12]] = content
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
