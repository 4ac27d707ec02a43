//go:build faults

package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestFaults is the fault suite (make faults; FAULTS=short runs the subset .ci/run runs,
// FAULTS_RUN=<regexp> the cases whose name matches). One
// world — Gitea, Vault, hcloudsim with actions lasting seconds, the real Pulumi CLI — and one
// daemon, into which each case brings one fault, takes it away and measures how long the daemon
// took to recover. Whatever a case did, after it: no server outside every stack (read from the
// backend), no stack lock left, no server deleted that the case did not remove, every stand that
// should exist Ready with its server, and no secret in any daemon log or anywhere in the
// repository's history.
func TestFaults(t *testing.T) {
	short := os.Getenv("FAULTS") == "short"
	only := regexp.MustCompile(os.Getenv("FAULTS_RUN")) // a developer's choice of cases
	pick := func(cases []faultCase) []faultCase {
		return slices.DeleteFunc(slices.Clone(cases), func(c faultCase) bool { return (short && !c.short) || !only.MatchString(c.name) })
	}
	w := newWorld(t, buildReconciler(t), startHetzner(t))
	var rows []*caseRun
	if cases := pick(faultCases); len(cases) > 0 {
		rows = append(rows, newSuite(t, w, suiteOpts{}).runAll(cases)...)
	}
	// Nodes set up over SSH, on servers whose addresses are on the loopback network, port 22 closed.
	if cases := pick(sshCases); len(cases) > 0 {
		h := testenv.StartHetzner(t, "faults-token", hcloudsim.WithActionDelay(2*time.Second), hcloudsim.WithMachine(&loopbackMachine{RecordMachine: &hcloudsim.RecordMachine{}}))
		rows = append(rows, newSuite(t, w.sibling(t, "stands-ssh", h), suiteOpts{full: true}).runAll(cases)...)
	}
	cases := pick(s3Cases)
	if len(cases) == 0 {
		reportFaults(t, rows, short)
		return
	}
	// The same daemon on an S3 backend (versitygw, a real S3 server over a folder), with a repository
	// and a Hetzner of its own: what only an S3 backend can do wrong.
	bucket := testenv.StartVersityGW(t, "stands-state")
	for _, kv := range bucket.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // for the suite's own engine
	}
	s3 := newSuite(t, w.sibling(t, "stands-s3", startHetzner(t)), suiteOpts{bucket: bucket})
	rows = append(rows, s3.runAll(cases)...)
	reportFaults(t, rows, short)
}

func startHetzner(t *testing.T) *testenv.Hetzner {
	return testenv.StartHetzner(t, "faults-token", hcloudsim.WithActionDelay(2*time.Second))
}

// sibling is a world sharing this one's Gitea, Vault and Pulumi, with a repository and a Hetzner of
// its own.
func (w *world) sibling(t *testing.T, repo string, h *testenv.Hetzner) *world {
	o := *w
	o.repo, o.hetzner, o.dir = w.gitea.CreateRepo(t, repo), h, t.TempDir()
	return &o
}

func (s *suite) runAll(cases []faultCase) []*caseRun {
	for _, c := range cases {
		s.run(c)
	}
	return s.rows
}

// faultCase brings one fault and takes it away; recover is how long the daemon took, from the fault
// gone to the state the case waits for, and cause where the daemon named the fault.
type faultCase struct {
	name  string
	short bool // in .ci/run's subset
	run   func(s *suite, c *caseRun)
}

type caseRun struct {
	name     string
	started  time.Time
	deletes  int           // servers the case removes on purpose
	recovery time.Duration // set by the case
	cause    string        // where and how the daemon named the fault
	failed   bool
}

// suite is the world, the daemon and what the cases committed.
type suite struct {
	t        *testing.T
	w        *world
	d        *daemon
	eng      *engine.Engine
	logs     []string          // every daemon log, across restarts
	live     map[string]string // stands that must exist: id → stand.yml path
	files    map[string]string // the stands' manifests as committed
	port     int
	hookKey  string
	rows     []*caseRun
	secrets  []string
	tmpfsDir string
	s3       *testenv.S3 // the backend, when not the state folder
}

const faultOpTimeout = 60 * time.Second

// suiteOpts: the backend, when not the state folder; nodes set up over SSH (full) and no stands to
// begin with, rather than servers only and two stands.
type suiteOpts struct {
	bucket *testenv.S3
	full   bool
}

func newSuite(t *testing.T, w *world, o suiteOpts) *suite {
	bucket := o.bucket
	s := &suite{t: t, w: w, s3: bucket, live: map[string]string{}, files: map[string]string{}, port: 7100, hookKey: "faults-webhook-" + testenv.RandomHex(8)}
	s.secrets = []string{w.hetzner.Token, w.pl.Passphrase, w.gitea.Token, w.secretID, s.hookKey}
	for _, v := range secretValues {
		s.secrets = append(s.secrets, v)
	}
	if bucket != nil {
		s.secrets = append(s.secrets, testenv.S3SecretKey)
	}
	files := baseFiles(t)
	if !o.full {
		files["stands/fbase/stand.yml"] = s.manifest("fbase")
		files["stands/fother/stand.yml"] = s.manifest("fother")
	}
	w.repo.Change("bases and the suite's stands", files)
	s.d = w.daemon("--poll-interval", "2s", "--status-delay", "1s", "--operation-timeout", faultOpTimeout.String(), "--workers", "4")
	s.d.state = s.stateDir(t)
	s.d.env = append(s.d.env, "STANDS_WEBHOOK_SECRET_FILE="+w.secretFile("webhook-secret", s.hookKey))
	backend := "file://" + backendDir(s.d.state)
	if bucket != nil {
		backend = bucket.Backend("local")
		s.d.env = append(append(s.d.env, bucket.Env()...), "STANDS_BACKEND_URL="+backend)
	}
	if o.full {
		s.d.env = append(s.d.env, "STANDS_NODES=full")
	}
	s.start()
	s.eng = w.engineOn(t, backend)
	if o.full {
		return s
	}
	for _, p := range []string{"fbase", "fother"} {
		s.live[id(p)] = standPath(p)
	}
	if !s.waitReady(nil, 5*time.Minute, id("fbase"), id("fother")) {
		t.Fatal("the suite's two stands did not become Ready")
	}
	return s
}

// stateDir is the daemon's state folder: a tmpfs of its own when we may mount one, so the disk-full
// case fills it and nothing else.
func (s *suite) stateDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256m,mode=0700"); err != nil {
		t.Logf("state folder on the test's disk (tmpfs: %v): the disk-full case needs root", err)
		return dir
	}
	s.tmpfsDir = dir
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

func (s *suite) start() {
	s.d.start()
	s.logs = append(s.logs, s.d.logFile)
}

func id(project string) string { return "local_" + project + "_dev" }

// manifest is a new one-node kv stand (it reads both secrets from Vault); every call a new port,
// so committing it again is a change.
func (s *suite) manifest(project string) string {
	s.port++
	m := benchStand(project, s.port)
	s.files[standPath(project)] = m
	return m
}

// run runs one case and the checks every case ends with.
func (s *suite) run(fc faultCase) {
	c := &caseRun{name: fc.name, started: time.Now()}
	s.rows = append(s.rows, c)
	s.t.Logf("fault: %s", fc.name)
	fc.run(s, c)
	if !c.failed {
		s.invariants(c)
	}
	if c.failed {
		s.t.Logf("%s: the daemon's log since the case began:\n%s", c.name, s.logSince(c.started))
	}
	s.t.Logf("fault: %s: recovered in %s (%s)", fc.name, roundDuration(c.recovery), c.cause)
}

// logSince is the daemon's log records since t, but those of unchanged stands, at most 80.
func (s *suite) logSince(t time.Time) string {
	data, _ := os.ReadFile(s.d.logFile)
	var out []string
	for line := range strings.Lines(string(data)) {
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && !rec.Time.Before(t) && rec.Msg != "stand is up to date" {
			out = append(out, line)
		}
	}
	return strings.Join(out[max(0, len(out)-80):], "")
}

// roundDuration keeps two significant figures or so: 45ms, 8.1s, 1m12s.
func roundDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func (c *caseRun) fail(s *suite, format string, args ...any) {
	c.failed = true
	s.t.Errorf("%s: %s", c.name, fmt.Sprintf(format, args...))
}

// wait polls cond until it holds or timeout passes; false (and the case failed) then.
func (s *suite) wait(c *caseRun, what string, timeout time.Duration, cond func() bool) bool {
	var exited error
	err := wait.Until(context.Background(), timeout, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	}, wait.Every(250*time.Millisecond), wait.Unless(func() error { exited = s.d.gone(); return exited }))
	switch {
	case exited != nil:
		s.t.Fatalf("%s: %v while waiting for %s", c.name, exited, what)
	case err != nil:
		c.fail(s, "timed out after %s waiting for %s", timeout, what)
		return false
	}
	return true
}

// status is one stand's status on main; ok false while it has none.
func (s *suite) status(standID string) (reconcile.Status, bool) {
	st, ok := s.w.statuses()[standID]
	return st, ok
}

// waitReady waits until each stand is Ready on a commit at or after commit (any when "").
func (s *suite) waitReady(c *caseRun, timeout time.Duration, ids ...string) bool {
	return s.waitPhase(c, timeout, reason.Ready, "", ids...)
}

func (s *suite) waitPhase(c *caseRun, timeout time.Duration, phase reason.Phase, commit string, ids ...string) bool {
	if c == nil {
		c = &caseRun{name: "setup"}
	}
	var all map[string]reconcile.Status
	defer func() {
		if c.failed {
			for _, i := range ids {
				st := all[i]
				s.t.Logf("%s: %s is %s %s %q at %.12s", c.name, i, st.Phase, st.Reason, st.Message, st.LastAttemptedCommit)
			}
		}
	}()
	return s.wait(c, fmt.Sprintf("%v %s", ids, phase), timeout, func() bool {
		all = s.w.statuses()
		for _, i := range ids {
			st, ok := all[i]
			if !ok || st.Phase != phase || (commit != "" && st.LastAttemptedCommit != commit) {
				return false
			}
		}
		return true
	})
}

// history is every version of a stand's status on main, oldest first.
func (s *suite) history(standID string) []reconcile.Status {
	s.t.Helper()
	repo := s.clone()
	iter, err := repo.Log(&git.LogOptions{FileName: ptr(statusFile(standID))})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []reconcile.Status
	_ = iter.ForEach(func(c *object.Commit) error {
		f, err := c.File(statusFile(standID))
		if err != nil {
			return nil
		}
		var st reconcile.Status
		if json.Unmarshal([]byte(must(f.Contents())), &st) == nil {
			out = append(out, st)
		}
		return nil
	})
	slices.Reverse(out)
	return out
}

func statusFile(standID string) string { return stands.StatusPath(standID) }

func ptr[T any](v T) *T { return &v }

func (s *suite) clone() *git.Repository { return s.w.clone(s.t) }

// readyz is the daemon's /readyz: ready, and its problems by name.
func (s *suite) readyz() (bool, map[string]string) {
	var r struct {
		Ready    bool              `json:"ready"`
		Problems map[string]string `json:"problems"`
	}
	_ = json.Unmarshal([]byte(s.d.get("/readyz")), &r)
	return r.Ready, r.Problems
}

// deletesSince counts hcloudsim's server deletes since t.
func (s *suite) deletesSince(t time.Time) int {
	n := 0
	for _, c := range s.w.hetzner.Sim.Calls() {
		if c.Method == http.MethodDelete && strings.HasPrefix(c.Path, "/servers/") && !c.Time.Before(t) && c.Status < 300 {
			n++
		}
	}
	return n
}

// createsSince counts the server creates that reached hcloudsim since t.
func (s *suite) createsSince(t time.Time) int {
	n := 0
	for _, c := range s.w.hetzner.Sim.Calls() {
		if c.Method == http.MethodPost && c.Path == "/servers" && !c.Time.Before(t) {
			n++
		}
	}
	return n
}

// invariants are the checks every case ends with.
func (s *suite) invariants(c *caseRun) {
	ctx := context.Background()
	if orphans, err := s.eng.Orphans(ctx); err != nil || len(orphans) > 0 {
		c.fail(s, "orphaned servers %+v (%v)", orphans, err)
	}
	locks := func() []string {
		if s.s3 != nil {
			var l []string
			for _, k := range s.s3.Keys(s.t) {
				if strings.HasPrefix(k, "local/.pulumi/locks/") && strings.HasSuffix(k, ".json") {
					l = append(l, k)
				}
			}
			return l
		}
		l, _ := filepath.Glob(filepath.Join(backendDir(s.d.state), ".pulumi", "locks", "*", "*", "*", "*.json"))
		return l
	}
	// An operation just finished may still be releasing its lock.
	if !s.wait(c, "no stack lock", 30*time.Second, func() bool { return len(locks()) == 0 }) {
		s.t.Errorf("%s: locks left: %v", c.name, locks())
	}
	if n := s.deletesSince(c.started); n != c.deletes {
		c.fail(s, "%d servers deleted, want %d", n, c.deletes)
	}
	servers := map[string]int{}
	for _, srv := range s.w.hetzner.Servers(s.t) {
		servers[srv.Labels[provider.LabelStand]]++
	}
	statuses := s.w.statuses()
	for standID := range s.live {
		if servers[standID] != 1 {
			c.fail(s, "%s has %d servers, want 1", standID, servers[standID])
		}
		if st := statuses[standID]; st.Phase != reason.Ready {
			c.fail(s, "%s is %s (%s: %s), want Ready", standID, st.Phase, st.Reason, st.Message)
		}
	}
	s.noSecret(c)
}

// noSecret looks for every secret the world holds in every daemon log and in every blob and commit
// message of the repository.
func (s *suite) noSecret(c *caseRun) {
	var hay [][]byte
	for _, l := range s.logs {
		data, _ := os.ReadFile(l)
		hay = append(hay, data)
	}
	repo := s.clone()
	blobs, _ := repo.BlobObjects()
	_ = blobs.ForEach(func(b *object.Blob) error {
		r, err := b.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r)
		hay = append(hay, buf.Bytes())
		return nil
	})
	commits, _ := repo.CommitObjects()
	_ = commits.ForEach(func(cm *object.Commit) error { hay = append(hay, []byte(cm.Message)); return nil })
	for _, h := range hay {
		for _, secret := range s.secrets {
			if bytes.Contains(h, []byte(secret)) {
				c.fail(s, "a secret (%d bytes) is in a daemon log or the repository", len(secret))
				return
			}
		}
	}
}

// change commits a new manifest of the stand (a new port) and returns the commit.
func (s *suite) change(project, msg string) string {
	return s.w.repo.Change(msg, map[string]string{standPath(project): s.manifest(project)})
}

// add commits a new stand that must exist from now on.
func (s *suite) add(project string) string {
	s.live[id(project)] = standPath(project)
	return s.change(project, "add "+project)
}

// report prints every case's recovery time and, after a whole run, writes bench/faults.md and the
// table in docs/faults.md.
func reportFaults(t *testing.T, rows []*caseRun, short bool) {
	res := &results{t: t, header: []string{"fault", "recovery", "how the daemon named it", "after it"}}
	for _, r := range rows {
		rec, after := roundDuration(r.recovery), "no orphan, no lock, no wrong destroy, no secret"
		if r.failed {
			rec, after = "FAILED", "see the test log"
		}
		res.row(r.name, rec, r.cause, after)
	}
	if !short && !t.Failed() && len(rows) == len(faultCases)+len(sshCases)+len(s3Cases) {
		res.write(t, faultsReport)
	}
}

var faultsReport = report{"faults.md", "Fault suite results",
	"Written by `make faults` (bench/faults_test.go); what each case does and checks is in [docs/faults.md](../docs/faults.md).",
	"faults.md", "<!-- fault results: written by make faults -->", "<!-- end of fault results -->"}

var statusLine = regexp.MustCompile(`stand\.yml:\d+`)

var faultCases = []faultCase{
	{"malformed stand.yml", true, faultMalformed},
	{"webhook with a bad signature", true, faultWebhook},
	{"webhook floods: replays and deliveries of one commit", false, faultWebhookFlood},
	{"a pull request of endless templates beside an ordinary one", false, faultPlanStarvation},
	{"pull requests of large files: 300 MB, 20 × 50 MB", false, faultLargeFiles},
	{"Vault down and back", true, faultVault},
	{"kill -9 of the daemon mid-apply", true, faultKill},
	{"hcloud action ending in error", true, faultActionError},
	{"repository emptied in one commit", true, faultEmptied},
	{"Gitea down and back", false, faultGitea},
	{"hcloud rate limits", false, faultRateLimit},
	{"hcloud 5xx burst", false, faultServerErrors},
	{"hcloud request hanging", false, faultHanging},
	{"stand removed while its apply runs", false, faultRemovedMidApply},
	{"state folder's disk full", false, faultDiskFull},
}

// sshCases run on a daemon that sets nodes up over SSH (--nodes full).
var sshCases = []faultCase{
	{"node unreachable over SSH", false, faultSSH},
}

// s3Cases run on the daemon whose backend is S3.
var s3Cases = []faultCase{
	{"S3 backend down and back", true, faultBackend},
	{"kill -9 mid-apply, S3 backend", false, faultKill},
}

// faultMalformed: an applied stand's manifest broken, first so YAML cannot read it (the stand is
// held: without its manifest nothing may be destroyed), then with a profile that does not exist
// (the stand fails); both name file and line, the other stand goes on and nothing is destroyed;
// fixed, the stand is applied.
func faultMalformed(s *suite, c *caseRun) {
	p := standPath("fbase")
	good := s.files[p]
	var causes []string
	for _, bad := range []struct {
		replace string
		phase   reason.Phase
		reason  reason.Reason
		judged  bool // the status names the broken commit: an unreadable stand's does not
	}{
		{"profile: [small", reason.Blocked, reason.SourceUnavailable, false},
		{"profile: no-such-profile", reason.Failed, reason.Invalid, true},
	} {
		commit := s.w.repo.Change("break fbase", map[string]string{p: strings.Replace(good, "profile: small", bad.replace, 1)})
		if !bad.judged {
			commit = ""
		}
		if !s.waitPhase(c, 2*time.Minute, bad.phase, commit, id("fbase")) {
			return
		}
		st, _ := s.status(id("fbase"))
		if st.Reason != bad.reason || !strings.Contains(st.Message, p+":") || !statusLine.MatchString(st.Message) {
			c.fail(s, "status %s/%s %q: want %s naming %s:<line>", st.Phase, st.Reason, st.Message, bad.reason, p)
		}
		causes = append(causes, fmt.Sprintf("%s %s %s", st.Phase, st.Reason, statusLine.FindString(st.Message)))
		if other, _ := s.status(id("fother")); other.Phase != reason.Ready {
			c.fail(s, "the other stand is %s", other.Phase)
		}
	}
	c.cause = "status " + strings.Join(causes, "; ")
	fixed := time.Now()
	commit := s.change("fbase", "fix fbase")
	if s.waitPhase(c, 3*time.Minute, reason.Ready, commit, id("fbase")) {
		c.recovery = time.Since(fixed)
	}
}

// faultWebhook: a webhook signed with another key, or not at all, is refused and logged, and starts
// no poll; one signed right does.
func faultWebhook(s *suite, c *caseRun) {
	body := []byte(`{"ref":"refs/heads/main","after":"0000000000000000000000000000000000000000"}`)
	since := time.Now()
	for _, sig := range []string{s.sign([]byte("not-the-key"), body), "", strings.Repeat("0", 64), "zz"} {
		if code := s.postHook(c, "refused-"+sig, body, sig); code != http.StatusUnauthorized {
			c.fail(s, "a webhook signed %q: HTTP %d, want 401", sig, code)
		}
	}
	time.Sleep(time.Second)
	if s.d.logSince(since, "webhook: polling now") {
		c.fail(s, "a refused webhook started a poll")
	}
	if !s.d.logSince(since, "webhook refused") {
		c.fail(s, "no log record of the refused webhooks")
	}
	c.cause = "HTTP 401, logged \"webhook refused\""
	good := time.Now()
	if code := s.postHook(c, "good", body, s.sign([]byte(s.hookKey), body)); code != http.StatusAccepted {
		c.fail(s, "a webhook signed right: HTTP %d, want 202", code)
	}
	if s.wait(c, "the signed webhook's poll", 10*time.Second, func() bool { return s.d.logSince(good, "webhook: polling now") }) {
		c.recovery = time.Since(good)
	}
}

// postHook posts a push webhook as Gitea would: delivery id, event and signature (none when "").
func (s *suite) postHook(c *caseRun, id string, body []byte, sig string) int {
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.d.listen+"/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gitea-Event", "push")
	req.Header.Set("X-Gitea-Delivery", id)
	if sig != "" {
		req.Header.Set("X-Gitea-Signature", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.fail(s, "post the webhook: %v", err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (s *suite) sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// faultWebhookFlood: webhooks are hints. With the poll slowed to 10 minutes, so that only webhooks
// start cycles: 1,000 replays of one signed delivery, then 1,000 distinct deliveries naming the
// tracked branch's commit, each flood paced over 10 s, run at most 2 cycles each; every request is
// answered, and the daemon's resident memory grows by less than 50 MiB. The control: 8 deliveries
// naming distinct commits, a second apart, run a cycle each, so the count sees what webhooks start.
func faultWebhookFlood(s *suite, c *caseRun) {
	s.d.stop()
	s.d.start("--poll-interval", "10m")
	s.logs = append(s.logs, s.d.logFile)
	defer func() { s.d.stop(); s.start() }()
	if !s.wait(c, "the restarted daemon's first cycle", 2*time.Minute, func() bool { return s.d.cycles() >= 1 }) {
		return
	}
	ref, err := s.clone().Head()
	if err != nil {
		c.fail(s, "the tracked branch's head: %v", err)
		return
	}
	head := ref.Hash().String()
	push := func(commit string, n int) []byte {
		return fmt.Appendf(nil, `{"ref":"refs/heads/main","after":%q,"n":%d}`, commit, n)
	}
	rss := s.d.rss()
	// flood sends n deliveries over about 10 s from 20 senders and returns the cycles they ran, once
	// what they started has ended.
	flood := func(what string, n int, delivery func(i int) (id string, body []byte), spacing time.Duration) int {
		before := s.d.cycles()
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		start := time.Now()
		for g := range 20 {
			wg.Go(func() {
				for i := g; i < n; i += 20 {
					time.Sleep(time.Until(start.Add(time.Duration(i) * spacing)))
					id, body := delivery(i)
					code := s.postHook(c, id, body, s.sign([]byte(s.hookKey), body))
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if codes[0] > 0 {
			c.fail(s, "%s: %d requests not answered", what, codes[0])
		}
		// Cycles the last deliveries asked for end within seconds: a cycle here runs no operation.
		time.Sleep(5 * time.Second)
		ran := s.d.cycles() - before
		s.t.Logf("%s: HTTP %v in %s, %d cycles", what, codes, time.Since(start).Round(time.Millisecond), ran)
		return ran
	}
	replays := flood("1,000 replays", 1000, func(int) (string, []byte) { return "replayed", push(head, 0) }, 10*time.Millisecond)
	distinct := flood("1,000 deliveries of one commit", 1000, func(i int) (string, []byte) { return fmt.Sprintf("delivery-%d", i), push(head, i) }, 10*time.Millisecond)
	control := flood("control: 8 commits", 8, func(i int) (string, []byte) {
		return fmt.Sprintf("control-%d", i), push(fmt.Sprintf("%040x", i+1), 0)
	}, time.Second)
	grew := s.d.rss() - rss
	if replays > 2 || distinct > 2 {
		c.fail(s, "1,000 replays ran %d cycles and 1,000 deliveries of one commit %d, want at most 2 each", replays, distinct)
	}
	if control < 6 {
		c.fail(s, "control: 8 deliveries of distinct commits ran %d cycles: the count cannot see what webhooks start", control)
	}
	if grew > 50 {
		c.fail(s, "resident memory grew by %.0f MiB during the floods", grew)
	}
	c.cause = fmt.Sprintf("cycles: %d for 1,000 replays, %d for 1,000 deliveries of one commit (control, 8 commits: %d); RSS %+.0f MiB", replays, distinct, control, grew)
}

// faultPlanStarvation: a pull request of 20 stands whose templates never end (each render runs into
// the sandbox's CPU limit) is being planned; an ordinary pull request opened after it is planned
// within 60 s, and a change committed meanwhile starts its apply about as soon as the same change
// did before (the baseline). The hostile plan ends at its render CPU budget, naming it. The
// control: the daemon restarted with one plan worker and both pull requests pushed again, the
// ordinary one now waits for the hostile one, which shows the measurement can see a wait.
func faultPlanStarvation(s *suite, c *caseRun) {
	t, api := s.t, s.w.gitea.API(s.t)
	owner, repo := s.w.repo.Info.Owner.UserName, s.w.repo.Info.Name
	applyStart := func(what string) time.Duration {
		pushed := time.Now()
		s.change("fother", what)
		if !s.wait(c, what+": its apply starting", 3*time.Minute, func() bool {
			return s.d.logSince(pushed, `"msg":"cycle planned"`, `"update":1`)
		}) {
			return 0
		}
		return time.Since(pushed)
	}
	baseline := applyStart("a change with no pull request open")
	files := baseFiles(t)
	hostile := map[string]string{
		"apps/bomb/app.yml":       "images: [\"registry.example.test/bomb:1\"]\nfiles:\n  - src: bomb.tmpl\n    dest: /tmp/bomb\npod: pod.yaml.tmpl\n",
		"apps/bomb/bomb.tmpl":     "{{ range 1000000000 }}{{ range 1000000000 }}{{ end }}{{ end }}\n",
		"apps/bomb/pod.yaml.tmpl": files["apps/kv/pod.yaml.tmpl"],
	}
	for i := range 20 {
		p := fmt.Sprintf("bomb%02d", i)
		hostile[standPath(p)] = strings.Replace(benchStand(p, 7500+i), "apps: [kv]", "apps: [kv, bomb]", 1) +
			"  bomb:\n    package: ../../apps/bomb\n    instances:\n      x: {}\n"
	}
	open := func(branch string, change map[string]string) (int64, string) {
		head := s.w.repo.ChangeOn(branch, branch, change)
		return s.w.repo.Open(api, branch, branch), head
	}
	hostileIdx, hostileHead := open("hostile-plan", hostile)
	if !s.wait(c, "the hostile pull request's plan to start", time.Minute, func() bool { return s.d.logSince(c.started, "a stand's render was stopped") }) {
		return
	}
	opened := time.Now()
	ordinaryIdx, ordinaryHead := open("ordinary-plan", map[string]string{standPath("fbase"): benchStand("fbase", 7600)})
	ordinary := s.planState(c, ordinaryHead, 3*time.Minute)
	planned := time.Since(opened)
	during := applyStart("a change while the hostile pull request is planned")
	final := s.planState(c, hostileHead, 5*time.Minute)
	if ordinary.State != gitea.StatusSuccess || planned > time.Minute {
		c.fail(s, "the ordinary pull request: stands/plan %s after %s, want success within 60s", ordinary.State, planned)
	}
	if final.State != gitea.StatusFailure || !strings.Contains(final.Description, "render CPU time") {
		c.fail(s, "the hostile pull request: stands/plan %s %q, want failure naming the render CPU budget", final.State, final.Description)
	}
	if during > baseline+15*time.Second {
		c.fail(s, "an apply started %s after its commit with the hostile plan running, %s without", during, baseline)
	}

	// The control: one plan worker, both pull requests pushed again (a push is a new budget).
	s.d.stop()
	s.d.start("--plan-workers", "1")
	s.logs = append(s.logs, s.d.logFile)
	defer func() { s.d.stop(); s.start() }()
	hostile[standPath("bomb00")] += "# again\n"
	s.w.repo.ChangeOn("hostile-plan", "again", hostile)
	time.Sleep(2 * time.Second)
	again := time.Now()
	ordinaryHead = s.w.repo.ChangeOn("ordinary-plan", "again", map[string]string{standPath("fbase"): benchStand("fbase", 7601)})
	s.planState(c, ordinaryHead, 5*time.Minute)
	waited := time.Since(again)
	if waited < planned+20*time.Second {
		c.fail(s, "control: with one plan worker the ordinary pull request was planned after %s, with two after %s: the wait is not seen", waited, planned)
	}
	for _, idx := range []int64{hostileIdx, ordinaryIdx} {
		closed := gitea.StateClosed
		if _, _, err := api.EditPullRequest(owner, repo, idx, gitea.EditPullRequestOption{State: &closed}); err != nil {
			c.fail(s, "close #%d: %v", idx, err)
		}
	}
	c.cause = fmt.Sprintf("ordinary pull request planned in %s beside one of 20 endless stands (one worker, the control: %s); apply start %s (%s without); the hostile plan: %q",
		roundDuration(planned), roundDuration(waited), roundDuration(during), roundDuration(baseline), final.Description)
}

// planState waits for the final stands/plan of a commit; nil, and the case failed, when none came.
func (s *suite) planState(c *caseRun, sha string, timeout time.Duration) *gitea.Status {
	var final *gitea.Status
	s.wait(c, "stands/plan on "+sha[:12], timeout, func() bool {
		statuses, _, err := s.w.gitea.API(s.t).ListStatuses(s.w.repo.Info.Owner.UserName, s.w.repo.Info.Name, sha, gitea.ListStatusesOption{})
		var newest *gitea.Status
		for _, st := range statuses {
			if st.Context == prplan.PlanContext && (newest == nil || st.ID > newest.ID) {
				newest = st
			}
		}
		if err == nil && newest != nil && newest.State != gitea.StatusPending {
			final = newest
		}
		return final != nil
	})
	if final == nil {
		return &gitea.Status{State: "none"}
	}
	return final
}

// faultVault: with Vault down, a changed stand fails with VaultUnavailable and nothing else moves;
// Vault back (sealed, then unsealed), the change is applied.
func faultVault(s *suite, c *caseRun) {
	s.w.vault.Stop(s.t)
	commit := s.change("fbase", "change fbase while Vault is down")
	// Nothing is applied or destroyed while Vault is away; the stand is applied as soon as it
	// answers, with no backoff. /readyz names the secret store at once.
	if s.wait(c, "/readyz naming the secrets", time.Minute, func() bool { _, p := s.readyz(); return p["secrets"] != "" }) {
		_, problems := s.readyz()
		c.cause = fmt.Sprintf("/readyz secrets: %.60q", problems["secrets"])
	}
	// Held, not attempted: the status says why and keeps the commit last attempted.
	if s.wait(c, "the status naming Vault", time.Minute, func() bool {
		st, _ := s.status(id("fbase"))
		return st.Reason == reason.VaultUnavailable
	}) {
		st, _ := s.status(id("fbase"))
		c.cause += fmt.Sprintf("; status %s %s", st.Phase, st.Reason)
	}
	if n := s.createsSince(c.started) + s.deletesSince(c.started); n > 0 {
		c.fail(s, "%d servers created or deleted while Vault was down", n)
	}
	s.w.vault.Start(s.t)
	s.w.vault.Unseal(s.t)
	back := time.Now()
	if s.waitPhase(c, 3*time.Minute, reason.Ready, commit, id("fbase")) {
		c.recovery = time.Since(back)
	}
}

// faultKill: the daemon is killed with SIGKILL while a server create is in flight; its Pulumi
// process group lives on, as under a unit whose KillMode spared it. Restarted, the daemon finishes
// the stand: one server, no lock, no orphan.
func faultKill(s *suite, c *caseRun) {
	s.add("fkill")
	if !s.wait(c, "the server create", 2*time.Minute, func() bool { return s.createsSince(c.started) > 0 }) {
		return
	}
	if err := s.d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	<-s.d.exited
	s.d.cmd = nil
	restarted := time.Now()
	s.start()
	if s.waitReady(c, 5*time.Minute, id("fkill")) {
		c.recovery = time.Since(restarted)
	}
	for _, sign := range []string{"removed a stale stack lock", "pending operation", "in progress"} {
		if s.d.logSince(restarted, sign) {
			c.cause = "log: " + sign
			return
		}
	}
	c.cause = "the restarted daemon found the stand done"
}

// faultActionError: Hetzner's create_server action ends in error; the stand fails naming it, and
// the retry after the backoff creates it, leaving no server outside the stack.
func faultActionError(s *suite, c *caseRun) {
	const msg = "injected: the host of this server failed"
	s.w.hetzner.Sim.FailNextAction("create_server", "server_error", msg)
	s.add("faction")
	var failedAt time.Time
	if !s.wait(c, "the failure in the status", 2*time.Minute, func() bool {
		st, _ := s.status(id("faction"))
		failedAt = time.Now()
		return st.Phase == reason.Failed && strings.Contains(st.Message, "host of this server failed")
	}) {
		st, _ := s.status(id("faction"))
		c.fail(s, "status %s %s %q", st.Phase, st.Reason, st.Message)
		return
	}
	st, _ := s.status(id("faction"))
	c.cause = fmt.Sprintf("status %s %s %q", st.Phase, st.Reason, msg)
	if s.waitReady(c, 3*time.Minute, id("faction")) {
		c.recovery = time.Since(failedAt)
	}
}

// faultEmptied: one commit removes every stand; the guard destroys none and says so; the next
// commit restores them.
func faultEmptied(s *suite, c *caseRun) {
	var paths []string
	for _, p := range s.live {
		paths = append(paths, p)
	}
	s.w.repo.Change("remove every stand", nil, paths...)
	ids := slices.Collect(maps.Keys(s.live))
	if !s.waitPhase(c, 2*time.Minute, reason.Blocked, "", ids...) {
		return
	}
	st, _ := s.status(ids[0])
	if st.Reason != reason.LastStand && st.Reason != reason.MassDeletion {
		c.fail(s, "status %s %q, want a destroy guard", st.Reason, st.Message)
	}
	c.cause = "status " + string(st.Reason)
	restore := map[string]string{}
	for _, p := range paths {
		restore[p] = s.files[p]
	}
	back := time.Now()
	s.w.repo.Change("restore every stand", restore)
	if s.waitReady(c, 3*time.Minute, ids...) {
		c.recovery = time.Since(back)
	}
}

// faultGitea: Gitea stopped; the daemon reports the source unreachable and destroys nothing; back,
// the next change is applied.
func faultGitea(s *suite, c *caseRun) {
	s.w.gitea.Stop(s.t)
	down := time.Now()
	var problem string
	s.wait(c, "/readyz naming the source", time.Minute, func() bool {
		_, p := s.readyz()
		problem = p["source"]
		return problem != ""
	})
	time.Sleep(6 * time.Second) // three polls against a Gitea that is gone
	c.cause = fmt.Sprintf("/readyz source: %.80q", problem)
	if n := s.deletesSince(down); n > 0 {
		c.fail(s, "%d servers deleted while Gitea was down", n)
	}
	s.w.gitea.Start(s.t)
	back := time.Now()
	if !s.wait(c, "/readyz ready", 2*time.Minute, func() bool { ok, _ := s.readyz(); return ok }) {
		return
	}
	c.recovery = time.Since(back)
	commit := s.change("fother", "change fother after Gitea came back")
	s.waitPhase(c, 3*time.Minute, reason.Ready, commit, id("fother"))
}

// hetznerFault: a stand created through a fault on hcloudsim's server creates; it becomes Ready,
// and any failure on the way names the cause.
func hetznerFault(s *suite, c *caseRun, project string, f hcloudsim.Fault, want []reason.Reason) {
	s.w.hetzner.Sim.Inject(f)
	s.add(project)
	if s.waitReady(c, 5*time.Minute, id(project)) {
		c.recovery = time.Since(c.started)
	}
	c.cause = "retried inside the operation (no failed status)"
	for _, st := range s.history(id(project)) {
		if st.Phase == reason.Failed {
			if !slices.Contains(want, st.Reason) {
				c.fail(s, "a failure named %s %q, want one of %v", st.Reason, st.Message, want)
			}
			c.cause = "status " + string(st.Reason)
		}
	}
}

func faultRateLimit(s *suite, c *caseRun) {
	hetznerFault(s, c, "frate", hcloudsim.Fault{Method: http.MethodPost, Path: "/servers", Times: 5, Code: "rate_limit_exceeded"}, []reason.Reason{reason.RateLimited})
}

func faultServerErrors(s *suite, c *caseRun) {
	hetznerFault(s, c, "f5xx", hcloudsim.Fault{Path: "/servers", Times: 3, Code: "server_error"}, []reason.Reason{reason.CloudUnavailable})
}

// faultHanging: the server create hangs past the operation timeout; the stand fails with Timeout,
// and the retry takes over the server Hetzner made meanwhile rather than leaving it orphaned.
func faultHanging(s *suite, c *caseRun) {
	s.w.hetzner.Sim.Inject(hcloudsim.Fault{Method: http.MethodPost, Path: "/servers", Delay: faultOpTimeout + 30*time.Second})
	s.add("fhang")
	var st reconcile.Status
	if !s.wait(c, "a failure naming the timeout", faultOpTimeout+2*time.Minute, func() bool {
		st, _ = s.status(id("fhang"))
		return st.Phase == reason.Failed && (st.Reason == reason.Timeout || strings.Contains(st.Message, "Timeout") || strings.Contains(st.Message, "deadline"))
	}) {
		return
	}
	c.cause = fmt.Sprintf("status %s %s", st.Phase, st.Reason)
	failed := time.Now()
	if s.waitReady(c, 5*time.Minute, id("fhang")) {
		c.recovery = time.Since(failed)
	}
}

// faultRemovedMidApply: a stand is removed while its create runs; the create ends, then the stand
// is destroyed: its one server deleted, nothing left over.
func faultRemovedMidApply(s *suite, c *caseRun) {
	s.add("fgone")
	if !s.wait(c, "the server create", 2*time.Minute, func() bool { return s.createsSince(c.started) > 0 }) {
		return
	}
	delete(s.live, id("fgone"))
	removed := time.Now()
	s.w.repo.Change("remove fgone", nil, standPath("fgone"))
	c.deletes = 1
	if s.waitPhase(c, 5*time.Minute, reason.Destroyed, "", id("fgone")) {
		c.recovery = time.Since(removed)
	}
	c.cause = "status Destroyed " + string(reason.Removed)
}

// faultDiskFull: the state folder fills up while a change is applied; the stand fails naming it,
// the stack's state survives, and once space is free the change is applied.
func faultDiskFull(s *suite, c *caseRun) {
	if s.tmpfsDir == "" {
		testenv.Missing(s.t, "the disk-full case mounts a tmpfs as the state folder: run as root")
		return
	}
	fill := filepath.Join(s.tmpfsDir, "fill")
	var fs syscall.Statfs_t
	if err := syscall.Statfs(s.tmpfsDir, &fs); err != nil {
		s.t.Fatal(err)
	}
	f, err := os.Create(fill)
	if err != nil {
		s.t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	commit := s.change("fother", "change fother on a full disk")
	// The new commit's objects go to the state folder first (the tracked branch is kept there), so
	// the fetch is what usually fails: /readyz names the state folder, not the repository. A write
	// that fails later, in the operation, names it in the stand's status.
	failed := func() (reconcile.Status, string) {
		st, _ := s.status(id("fother"))
		if st.LastAttemptedCommit != commit || st.Phase != reason.Failed {
			st = reconcile.Status{}
		}
		_, problems := s.readyz()
		return st, problems["source"]
	}
	if s.wait(c, "a failure naming the full disk", 3*time.Minute, func() bool {
		st, source := failed()
		return st.Phase != "" || strings.Contains(source, "no space left on device")
	}) {
		switch st, source := failed(); {
		case st.Phase != "":
			if !strings.Contains(st.Message, "no space left on device") {
				c.fail(s, "status %s %q: want it to name the full disk", st.Reason, st.Message)
			}
			c.cause = fmt.Sprintf("status %s \"no space left on device\"", st.Reason)
		default:
			if !strings.HasPrefix(source, "the state folder cannot be written") {
				c.fail(s, "/readyz source: %q: want it to name the state folder, not the repository", source)
			}
			c.cause = `/readyz source: "the state folder cannot be written" … "no space left on device"`
		}
	}
	if n := s.createsSince(c.started) + s.deletesSince(c.started); n > 0 {
		c.fail(s, "%d servers created or deleted while the disk was full", n)
	}
	if err := os.Remove(fill); err != nil {
		s.t.Fatal(err)
	}
	freed := time.Now()
	if s.waitPhase(c, 3*time.Minute, reason.Ready, commit, id("fother")) {
		c.recovery = time.Since(freed)
	}
}

// faultBackend: the S3 server stopped while a stand changes; the daemon names the backend, applies
// and destroys nothing; back, the change is applied.
func faultBackend(s *suite, c *caseRun) {
	s.s3.Stop(s.t)
	commit := s.change("fbase", "change fbase while the backend is down")
	if s.wait(c, "/readyz naming the backend", time.Minute, func() bool { _, p := s.readyz(); return p["backend"] != "" }) {
		_, problems := s.readyz()
		if !strings.HasPrefix(problems["backend"], "the Pulumi backend is unavailable: ") {
			c.fail(s, "/readyz backend: %q, want it to say the backend is unavailable", problems["backend"])
		}
		c.cause = fmt.Sprintf("/readyz backend: %.60q", problems["backend"])
	}
	time.Sleep(6 * time.Second) // three polls
	if n := s.createsSince(c.started) + s.deletesSince(c.started); n > 0 {
		c.fail(s, "%d servers created or deleted while the backend was down", n)
	}
	s.s3.Start(s.t)
	back := time.Now()
	if s.waitPhase(c, 3*time.Minute, reason.Ready, commit, id("fbase")) {
		c.recovery = time.Since(back)
	}
}

// loopbackMachine gives servers addresses on the loopback network, where nothing listens on port
// 22: every node refuses SSH, and no packet leaves the machine.
type loopbackMachine struct {
	*hcloudsim.RecordMachine
	mu sync.Mutex
	n  int
}

func (m *loopbackMachine) Create(ctx context.Context, spec hcloudsim.MachineSpec) (string, error) {
	if _, err := m.RecordMachine.Create(ctx, spec); err != nil || !spec.WantIPv4 {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	return fmt.Sprintf("127.0.%d.%d", 100+m.n/250, 1+m.n%250), nil
}

// faultSSH: a new stand's node cannot be reached over SSH. The apply fails naming what it waited
// for, the server is neither destroyed nor made again by the retry, and removing the stand destroys
// it without connecting. Its recovery is how long the daemon took to name the fault.
func faultSSH(s *suite, c *caseRun) {
	if conn, err := net.DialTimeout("tcp", "127.0.100.2:22", time.Second); err == nil {
		conn.Close()
		s.t.Fatal("something listens on 127.0.100.2:22: the SSH case needs port 22 of the loopback network closed")
	}
	s.add("fssh")
	var st reconcile.Status
	if !s.wait(c, "the stand failing on SSH", faultOpTimeout+2*time.Minute, func() bool {
		st, _ = s.status(id("fssh"))
		return st.Phase == reason.Failed
	}) {
		return
	}
	c.recovery = time.Since(c.started)
	c.cause = fmt.Sprintf("status %s %s naming \"ssh <address>\" and \"connection refused\"", st.Phase, st.Reason)
	if !strings.Contains(st.Message, "ssh 127.0.") || !strings.Contains(st.Message, "connection refused") {
		c.fail(s, "status %s %q does not say the node could not be reached over SSH", st.Reason, st.Message)
	}
	// The retry after the backoff: the same server, still unreachable, nothing made again.
	if !s.wait(c, "the retry", 3*time.Minute, func() bool {
		next, _ := s.status(id("fssh"))
		return next.Phase == reason.Failed && next.Timings != nil && st.Timings != nil && next.Timings.Started.After(st.Timings.Started)
	}) {
		return
	}
	if n := s.createsSince(c.started); n != 1 {
		c.fail(s, "%d server creates for one node", n)
	}
	delete(s.live, id("fssh"))
	// The repository's last stand: its removal is approved, or the guard holds it.
	s.w.repo.Change("remove fssh", map[string]string{judge.AllowDestroyFile: id("fssh") + "\n"}, standPath("fssh"))
	c.deletes = 1
	s.waitPhase(c, 3*time.Minute, reason.Destroyed, "", id("fssh"))
}
