package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestReloadDuringApply: SIGHUP while an apply waits on Hetzner, the --config file changed and the
// webhook secret's file rotated meanwhile. The daemon does not stop: the apply finishes (Ready, one
// server), webhooks signed with the new secret are taken and the old one refused, the poll interval read again
// takes effect at once (cycles every few seconds where the old one was an hour), the worker count,
// which cannot change live, is named in the log and keeps its value, and a second reload with a
// broken file is refused whole. The SIGTERM after it drains as usual: exit 0, no lock, no Pulumi
// process left.
func TestReloadDuringApply(t *testing.T) {
	h := testenv.StartHetzner(t, "reload-token", hcloudsim.WithActionDelay(8*time.Second))
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{standPath("p"): plainStand("p")})
	config := filepath.Join(t.TempDir(), "daemon.yml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(config, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("poll-interval: 1h\nworkers: 4\n")
	hookSecret := filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(hookSecret, []byte("old-hook-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newLocalDaemon(t, lr, h)
	d.env = append(d.env, "STANDS_CONFIG="+config, "STANDS_WEBHOOK_SECRET_FILE="+hookSecret)
	d.start()
	d.waitCreate()
	write("poll-interval: 2s\nworkers: 2\n")
	// A rotated credential file, written aside and moved into place as a secret manager does.
	if err := os.WriteFile(hookSecret+".new", []byte("new-hook-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(hookSecret+".new", hookSecret); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.waitFor("the reload", 30*time.Second, func() bool { return strings.Contains(d.log(), "reload done") })
	log := d.log()
	for _, want := range []string{`"setting":"poll-interval","from":"1h0m0s","to":"2s"`, `"setting":"workers","running":"4","read":"2"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the reload's log does not say %s", want)
		}
	}
	// The rotated webhook secret is the one in force; the old one is refused.
	d.waitFor("the rotated webhook secret", 30*time.Second, func() bool { return postWebhook(t, d.listen, "new-hook-key") == http.StatusAccepted })
	if got := postWebhook(t, d.listen, "old-hook-key"); got != http.StatusUnauthorized {
		t.Errorf("a webhook signed with the secret rotated away: %d, want 401", got)
	}
	st := d.waitStatus("local_p_dev", 3*time.Minute, func(s reconcile.Status) bool { return s.Phase != reason.Progressing })
	if st.Phase != reason.Ready {
		t.Errorf("the apply under way at the reload: %+v", st)
	}
	if n := len(h.Servers(t)); n != 1 {
		t.Errorf("%d servers, want 1", n)
	}
	// The old interval was an hour: cycles now come every 2 s (±10 %).
	before := d.cycles()
	time.Sleep(9 * time.Second)
	if n := d.cycles() - before; n < 2 {
		t.Errorf("%d cycles in 9 s after the reload: the new poll interval is not in force", n)
	}

	write("poll-interval: soon\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.waitFor("the refused reload", 30*time.Second, func() bool { return strings.Contains(d.log(), "reload refused") })
	if !strings.Contains(d.log(), "poll-interval") {
		t.Errorf("the refused reload does not name the setting")
	}
	before = d.cycles()
	time.Sleep(5 * time.Second)
	if d.cycles() == before {
		t.Errorf("no cycle after a refused reload: the running settings did not stay")
	}

	if code, _ := d.stop(syscall.SIGTERM, 2*time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	if left := testenv.ProcessesWithEnv(d.state); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if locks := d.locks(); len(locks) != 0 {
		t.Errorf("locks left: %v", locks)
	}
}

// TestMetricsOnTheirOwnListener: with --metrics-listen, /metrics, /healthz and /readyz answer there
// and not on --listen, which serves the webhook alone; the metrics listener takes no webhook.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	h := testenv.StartHetzner(t, "metrics-token")
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{"README.md": "no stands yet\n"})
	metrics := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	d := newLocalDaemon(t, lr, h, "--metrics-listen", metrics)
	hook := d.listen
	d.listen = metrics // the helpers read /readyz
	d.start()
	d.waitFor("a cycle", time.Minute, func() bool { return d.cycles() > 0 })
	status := func(method, addr, path string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s%s: %v", method, addr, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, addr, path string
		want               int
	}{
		{"GET", metrics, "/metrics", http.StatusOK},
		{"GET", metrics, "/healthz", http.StatusOK},
		{"GET", metrics, "/readyz", http.StatusOK},
		{"POST", metrics, "/webhook", http.StatusNotFound},
		{"GET", hook, "/metrics", http.StatusNotFound},
		{"GET", hook, "/readyz", http.StatusNotFound},
		{"POST", hook, "/webhook", http.StatusUnauthorized}, // served: no secret, every delivery refused
	} {
		if got := status(c.method, c.addr, c.path); got != c.want {
			t.Errorf("%s %s on the %s listener: %d, want %d", c.method, c.path, map[bool]string{true: "metrics", false: "webhook"}[c.addr == metrics], got, c.want)
		}
	}
	if code, _ := d.stop(syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// TestSystemdNotify: under a unit of Type=notify the daemon says READY=1 once it serves, feeds the
// watchdog while an apply runs for longer than the watchdog's interval (operations run beside the
// loop), misses it while frozen (SIGSTOP: systemd would restart it), feeds it again once
// continued, and says STOPPING=1 when it drains. systemd's side is a unixgram socket, as systemd
// opens one.
func TestSystemdNotify(t *testing.T) {
	sock, got := testenv.NotifySocket(t)
	// count is how many of the states came within d, after dropping what came before.
	count := func(state string, d time.Duration) int {
		for len(got) > 0 {
			<-got
		}
		n := 0
		for deadline := time.After(d); ; {
			select {
			case s := <-got:
				if s == state {
					n++
				}
			case <-deadline:
				return n
			}
		}
	}
	waitState := func(state string, d time.Duration) {
		t.Helper()
		for deadline := time.After(d); ; {
			select {
			case s := <-got:
				if s == state {
					return
				}
			case <-deadline:
				t.Fatalf("systemd was not told %s within %s", state, d)
			}
		}
	}
	h := testenv.StartHetzner(t, "notify-token", hcloudsim.WithActionDelay(15*time.Second))
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{standPath("p"): plainStand("p")})
	d := newLocalDaemon(t, lr, h)
	const watchdog = 900 * time.Millisecond
	d.env = append(d.env, "NOTIFY_SOCKET="+sock, fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds()))
	d.start()
	waitState("READY=1", time.Minute)
	d.waitCreate()
	if n := count("WATCHDOG=1", 3*watchdog); n < 4 {
		t.Errorf("%d watchdog pings in %s of an apply (one every %s expected)", n, 3*watchdog, watchdog/3)
	}
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(watchdog / 3) // a ping under way
	if n := count("WATCHDOG=1", 2*watchdog); n != 0 {
		t.Errorf("%d watchdog pings while the daemon is frozen", n)
	}
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if n := count("WATCHDOG=1", 2*watchdog); n < 2 {
		t.Errorf("%d watchdog pings once continued", n)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitState("STOPPING=1", time.Minute)
	if code, _ := d.stop(syscall.SIGTERM, 3*time.Minute); code != 0 {
		t.Errorf("exit %d", code)
	}
}
