package daemon

// The operator controls' endpoint: an HTTP API on a Unix socket (never a TCP port), mode 0600 in the
// state folder, that only the daemon's own user and root may use — the kernel says who connects
// (SO_PEERCRED), so there is no token to leak. Every request names the caller as the kernel reports
// it; the caller's own claim (who is on call behind sudo) is kept beside it, never instead of it.
// The controls themselves are the reconciler's (reconcile/controls.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stands-engine/stands-reconciler/reconcile"
)

// controls is what the endpoint needs of the reconciler.
type controls interface {
	Pause(by, why string) error
	Resume(by string) error
	SetPlanOnly(on bool, by string) error
	Retry(id, by string) error
	ApproveChange(ctx context.Context, q reconcile.ApproveRequest) (reconcile.Approval, error)
	Controls() reconcile.ControlView
}

// ControlRequest is a control action's body.
type ControlRequest struct {
	// Operator is who the caller says is acting (e.g. $SUDO_USER); recorded beside the kernel's uid.
	Operator string `json:"operator,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Stand    string `json:"stand,omitempty"`
	Commit   string `json:"commit,omitempty"` // approve: the commit of the change released
	// All: approve a change made of more than one commit (reconcile.ApproveRequest.All).
	All bool `json:"all,omitempty"`
	On  bool `json:"on,omitempty"`
}

// ControlAnswer is every response: the controls after the action, or why it was refused.
type ControlAnswer struct {
	Error    string                 `json:"error,omitempty"`
	Controls *reconcile.ControlView `json:"controls,omitempty"`
	// Approval: what ctl approve released, or would have (the commits its change holds).
	Approval *reconcile.Approval `json:"approval,omitempty"`
}

type peerKey struct{}

type peer struct{ uid, pid int }

// listenControl serves c on a Unix socket at path. A socket left by a run that died is replaced; one
// that answers belongs to a live reconciler on the same state folder, which is refused.
func listenControl(path string, c controls, log *slog.Logger) (*server, error) {
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("control socket %s: another reconciler answers on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Not through the umask, which is the whole process's. The kernel's word on each caller
	// (allowOwnUser) is what guards the endpoint; the mode keeps others from even connecting.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := serve(ln, controlHandler(c, log), func(ctx context.Context, conn net.Conn) context.Context {
		return context.WithValue(ctx, peerKey{}, peerOf(conn))
	}, log, "control socket")
	s.after = func() { _ = os.Remove(path) }
	return s, nil
}

// peerOf is the connecting process as the kernel reports it; uid -1 when it cannot tell, which is
// refused.
func peerOf(conn net.Conn) peer {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return peer{uid: -1}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{uid: -1}
	}
	p := peer{uid: -1}
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			p = peer{uid: int(cred.Uid), pid: int(cred.Pid)}
		}
	})
	return p
}

// who names the caller for logs and statuses: the claimed operator, then the kernel's account.
func (p peer) who(claimed string) string {
	account := "uid " + strconv.Itoa(p.uid)
	if u, err := user.LookupId(strconv.Itoa(p.uid)); err == nil {
		account = u.Username + " (uid " + strconv.Itoa(p.uid) + ")"
	}
	claimed = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '|' || r == '`' {
			return -1
		}
		return r
	}, claimed)
	if len(claimed) > 64 {
		claimed = claimed[:64]
	}
	if claimed == "" || claimed == strings.SplitN(account, " ", 2)[0] {
		return account + " via the control socket"
	}
	return claimed + " as " + account + " via the control socket"
}

func controlHandler(c controls, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	act := func(pattern string, do func(ctx context.Context, req ControlRequest, by string, a *ControlAnswer) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			var req ControlRequest
			if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
				answer(w, http.StatusBadRequest, c, ControlAnswer{}, fmt.Errorf("read the request: %w", err))
				return
			}
			by := r.Context().Value(peerKey{}).(peer).who(req.Operator)
			if len(req.Reason) > 500 {
				req.Reason = req.Reason[:500]
			}
			var a ControlAnswer
			if err := do(r.Context(), req, by, &a); err != nil {
				code := http.StatusConflict
				if errors.Is(err, reconcile.ErrUnknownStand) {
					code = http.StatusNotFound
				}
				answer(w, code, c, a, err)
				return
			}
			answer(w, http.StatusOK, c, a, nil)
		})
	}
	act("POST /v1/pause", func(_ context.Context, req ControlRequest, by string, _ *ControlAnswer) error {
		return c.Pause(by, req.Reason)
	})
	act("POST /v1/resume", func(_ context.Context, _ ControlRequest, by string, _ *ControlAnswer) error { return c.Resume(by) })
	act("POST /v1/plan-only", func(_ context.Context, req ControlRequest, by string, _ *ControlAnswer) error {
		return c.SetPlanOnly(req.On, by)
	})
	act("POST /v1/retry", func(_ context.Context, req ControlRequest, by string, _ *ControlAnswer) error {
		if req.Stand == "" {
			return errors.New("name the stand to retry")
		}
		return c.Retry(req.Stand, by)
	})
	act("POST /v1/approve", func(ctx context.Context, req ControlRequest, by string, a *ControlAnswer) error {
		if req.Stand == "" || req.Commit == "" {
			return errors.New("name the stand and the commit of its change to approve")
		}
		ap, err := c.ApproveChange(ctx, reconcile.ApproveRequest{Stand: req.Stand, Commit: req.Commit, By: by, Why: req.Reason, All: req.All})
		if ap.Commits != nil {
			a.Approval = &ap
		}
		return err
	})
	mux.HandleFunc("GET /v1/controls", func(w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, c, ControlAnswer{}, nil) })
	return allowOwnUser(mux, log)
}

// allowOwnUser lets only the daemon's user and root through; the socket's mode already should.
func allowOwnUser(next http.Handler, log *slog.Logger) http.Handler {
	self := os.Geteuid()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.Context().Value(peerKey{}).(peer)
		if p.uid != self && p.uid != 0 {
			log.Warn("control socket: refused a caller", "uid", p.uid, "pid", p.pid, "path", r.URL.Path)
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(ControlAnswer{Error: "only the reconciler's user or root may use its controls"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func answer(w http.ResponseWriter, code int, c controls, a ControlAnswer, err error) {
	if err != nil {
		a.Error = err.Error()
	}
	v := c.Controls()
	a.Controls = &v
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(a)
}

// ControlClient talks to a daemon's control socket: `stands-reconciler ctl`.
type ControlClient struct {
	path string
	http *http.Client
}

// NewControlClient is a client of the socket at path.
func NewControlClient(path string) *ControlClient {
	return &ControlClient{path: path, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}}
}

// Do runs one action ("pause", "resume", "plan-only", "retry", "approve"; "" reads the controls).
func (c *ControlClient) Do(ctx context.Context, action string, req ControlRequest) (*ControlAnswer, error) {
	method, url := http.MethodPost, "http://stands-reconciler/v1/"+action
	if action == "" {
		method, url = http.MethodGet, "http://stands-reconciler/v1/controls"
	}
	body, _ := json.Marshal(req)
	r, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(r)
	if err != nil {
		return nil, fmt.Errorf("reach the reconciler at %s (is it running, and are you its user or root?): %w", c.path, err)
	}
	defer resp.Body.Close()
	var a ControlAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil {
		return nil, fmt.Errorf("read the reconciler's answer (%s): %w", resp.Status, err)
	}
	if a.Error != "" {
		return &a, errors.New(a.Error)
	}
	return &a, nil
}
