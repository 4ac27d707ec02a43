package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/providertest"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestMain serves the provider: the daemon's engine runs this test binary as it.
func TestMain(m *testing.M) { providertest.Main(m) }

// testSettings are a daemon's on a local stands repository holding one stand without secrets, in
// local mode, servers only, against hcloudsim and the real Pulumi CLI; its listeners on loopback.
func testSettings(t *testing.T) (Settings, Env) {
	t.Helper()
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, "daemon-test-token")
	repo := t.TempDir()
	testenv.CommitAll(t, testenv.InitStandsRepo(t, repo), repo, "one stand", map[string]string{"stands/p/stand.yml": testenv.PlainStand("p")})
	dir := t.TempDir()
	// A socket path must stay under 108 bytes: the test's temporary folders can be long.
	sockDir, err := os.MkdirTemp("", "sr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	vars := map[string]string{
		"HCLOUD_TOKEN_FILE":      testenv.WriteFile(t, dir, "hcloud-token", h.Token),
		"STANDS_PASSPHRASE_FILE": testenv.WriteFile(t, dir, "passphrase", pl.Passphrase),
	}
	s := Settings{
		Engine:   engine.Settings{Owner: "local", StateDir: filepath.Join(dir, "state"), Pulumi: pl.Bin, Endpoint: h.Endpoint, Nodes: "skip"},
		LogLevel: "info", LogFormat: "json", Repo: repo, Branch: "main", GitName: "stands-reconciler", GitEmail: "r@localhost",
		Listen: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), ControlSocket: filepath.Join(sockDir, "control.sock"),
		Poll: time.Hour, Drain: time.Minute, OperationTimeout: time.Hour, StatusDelay: 0, Workers: 2, HealLimit: 3,
		PlanWorkers: 2, PlanBudget: time.Minute, PlanRenderCPU: time.Minute, RequiredApprovals: 1,
		MaxDestroyShare: 0.5, Previews: true, FilesOnly: true, LeaseTTL: 30 * time.Second, LeaseGrace: 10 * time.Second,
	}
	return s, func(k string) string { return vars[k] }
}

// origins says every setting is its default.
type origins struct{}

func (origins) Setting(string) string        { return "default" }
func (origins) Credential(Credential) string { return "" }

// TestOpenRunClose: Open serves the probes and the controls, Run reconciles the repository's stand
// until its context ends, Shutdown drains, and Close leaves no goroutine of the daemon behind.
func TestOpenRunClose(t *testing.T) {
	s, env := testSettings(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	d, err := Open(context.Background(), s, env, origins{}, WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { d.Run(ctx); close(ran) }()
	wait.NoError(t, "the stand Ready", 2*time.Minute, func() error {
		if st := d.Reconciler().Status("local_p_dev"); st == nil || st.Phase != reason.Ready {
			return fmt.Errorf("the stand is not Ready: %+v", st)
		}
		return nil
	})
	resp, err := http.Get("http://" + s.Listen + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}
	if _, err := NewControlClient(s.SocketPath()).Do(context.Background(), "", ControlRequest{}); err != nil {
		t.Errorf("the controls do not answer: %v", err)
	}
	cancel()
	<-ran
	if err := d.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stat(s.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the control socket is left: %v", err)
	}
	if _, err := http.Get("http://" + s.Listen + "/healthz"); err == nil {
		t.Error("the listener still answers after Close")
	}
}

// TestOpenRefusesBadSettings: settings Check refuses are refused by Open too, all of them at once,
// and nothing is left open.
func TestOpenRefusesBadSettings(t *testing.T) {
	s, env := testSettings(t)
	s.Workers, s.Engine.Backend = 0, "postgres://u:hunter2@127.0.0.1/db"
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, err := Open(context.Background(), s, env, origins{})
	if err == nil || !strings.Contains(err.Error(), "--workers") || !strings.Contains(err.Error(), "--backend") {
		t.Fatalf("Open: %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error shows the password: %v", err)
	}
}

// TestOpenClosesWhatItOpenedOnError: an Open that fails half way (the listen address taken) closes
// the parts it had opened.
func TestOpenClosesWhatItOpenedOnError(t *testing.T) {
	s, env := testSettings(t)
	taken, err := listenTCP(s.Listen, http.NotFoundHandler(), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	if _, err := Open(context.Background(), s, env, origins{}); err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("Open on a taken address: %v", err)
	}
}
