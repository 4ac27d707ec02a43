package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// recorder is a controls that keeps every call.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

var _ controls = (*recorder)(nil)

func (r *recorder) add(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
	return nil
}
func (r *recorder) Pause(by, why string) error { return r.add("pause " + why + " by " + by) }
func (r *recorder) Resume(by string) error     { return r.add("resume by " + by) }
func (r *recorder) SetPlanOnly(on bool, by string) error {
	return r.add(fmt.Sprintf("plan-only %v by %s", on, by))
}
func (r *recorder) Retry(id, by string) error {
	if id == "nope" {
		return fmt.Errorf("%w %q", reconcile.ErrUnknownStand, id)
	}
	return r.add("retry " + id + " by " + by)
}
func (r *recorder) ApproveChange(_ context.Context, q reconcile.ApproveRequest) (reconcile.Approval, error) {
	ap := reconcile.Approval{Stand: q.Stand, Commits: []stands.LogEntry{{Commit: q.Commit, Author: "dev", Subject: "resize"}}, Complete: true}
	return ap, r.add(fmt.Sprintf("approve %s at %s by %s: %s (all %v)", q.Stand, q.Commit, q.By, q.Why, q.All))
}
func (r *recorder) Controls() reconcile.ControlView {
	return reconcile.ControlView{Running: len(r.calls)}
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func TestActions(t *testing.T) {
	rec := &recorder{}
	path := filepath.Join(t.TempDir(), "control.sock")
	srv, err := listenControl(path, rec, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 || info.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v %v, want a 0600 socket", info.Mode(), err)
	}
	c, ctx := NewControlClient(path), context.Background()
	for _, a := range []struct {
		action string
		req    ControlRequest
	}{
		{"pause", ControlRequest{Reason: "incident 7", Operator: "alice"}},
		{"resume", ControlRequest{}},
		{"plan-only", ControlRequest{On: true, Operator: "bob\x1b[31m|`"}},
		{"retry", ControlRequest{Stand: "local_a_dev"}},
		{"", ControlRequest{}},
	} {
		if _, err := c.Do(ctx, a.action, a.req); err != nil {
			t.Fatalf("%s: %v", a.action, err)
		}
	}
	me := "uid " + fmt.Sprint(os.Geteuid())
	got := rec.all()
	if len(got) != 4 || !strings.HasPrefix(got[0], "pause incident 7 by alice as ") || !strings.Contains(got[0], me+") via the control socket") ||
		!strings.HasPrefix(got[2], "plan-only true by bob[31m as ") || !strings.HasPrefix(got[3], "retry local_a_dev by ") {
		t.Errorf("calls: %q", got)
	}
	if _, err := c.Do(ctx, "retry", ControlRequest{Stand: "nope"}); err == nil || !strings.Contains(err.Error(), "no such stand") {
		t.Errorf("retry of an unknown stand: %v", err)
	}
	if _, err := c.Do(ctx, "retry", ControlRequest{}); err == nil {
		t.Error("a retry naming no stand was taken")
	}
	// A second reconciler on the same state folder is refused while the first answers.
	if _, err := listenControl(path, rec, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "another reconciler") {
		t.Errorf("a second listener on a live socket: %v", err)
	}
}

// TestOtherUsersRefused: a caller that is neither the daemon's user nor root is refused by the
// kernel's account of it, even with the socket opened to everyone (so the mode does not stand in
// for the check). The caller is this test binary re-run as nobody; the control is the same call
// as the daemon's own user.
func TestOtherUsersRefused(t *testing.T) {
	if p := os.Getenv(callerEnv); p != "" {
		_, err := NewControlClient(p).Do(context.Background(), "pause", ControlRequest{Reason: "from nobody"})
		fmt.Print(errString(err))
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to run a caller as another user")
	}
	rec := &recorder{}
	// A folder nobody can reach, for the socket and a copy of this binary (go test's own folders
	// are private to root).
	dir, err := os.MkdirTemp("", "control-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "control.sock")
	srv, err := listenControl(path, rec, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "caller")
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	call := func(uid uint32) string {
		cmd := exec.Command(exe, "-test.run", "^TestOtherUsersRefused$")
		cmd.Env = []string{callerEnv + "=" + path}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("caller as uid %d: %v\n%s", uid, err, out)
		}
		return string(out)
	}
	if out := call(65534); !strings.Contains(out, "only the reconciler's user or root") {
		t.Errorf("nobody's call: %q", out)
	}
	if n := len(rec.all()); n != 0 {
		t.Fatalf("nobody's call was taken: %q", rec.all())
	}
	if out := call(0); out != "ok" || len(rec.all()) != 1 {
		t.Errorf("the control, root's call: %q, calls %q", out, rec.all())
	}
}

const callerEnv = "STANDS_TEST_CONTROL_CALLER"

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
