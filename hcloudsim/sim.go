// Package hcloudsim is a stateful simulator of the Hetzner Cloud API for tests and the local demo,
// driven by the real hcloud-go client through hcloud.WithEndpoint. Its JSON comes from hcloud-go's own
// schema package, its errors use the API's envelope and codes, and it keeps state: servers, networks
// with private IP allocation, SSH keys and actions that run for a while before they succeed.
//
// What a server *is* is up to a Machine backend: the default one only records servers; a VM backend
// makes each one a real QEMU VM. Tests can inject faults (fail the Nth matching call, rate-limit, make
// an action fail) and read the call log. With a state file the simulator survives a restart.
package hcloudsim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sim is the simulator. It is an http.Handler serving the API under /v1.
type Sim struct {
	token       string
	actionDelay time.Duration
	now         func() time.Time
	machine     Machine
	stateFile   string
	log         *slog.Logger

	mu          sync.Mutex
	st          state
	faults      []*Fault
	failActions []actionFailure
	calls       []Call
}

// Option configures a Sim.
type Option func(*Sim)

// WithToken sets the bearer token every request must carry (default "test-token").
func WithToken(t string) Option { return func(s *Sim) { s.token = t } }

// WithActionDelay sets how long actions stay "running" before they succeed (default 200ms).
func WithActionDelay(d time.Duration) Option { return func(s *Sim) { s.actionDelay = d } }

// SetActionDelay changes how long the actions started from now on run (a test slowing Hetzner
// down mid-run).
func (s *Sim) SetActionDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actionDelay = d
}

// WithMachine sets the backend that makes servers real (default: RecordMachine).
func WithMachine(m Machine) Option { return func(s *Sim) { s.machine = m } }

// WithStateFile keeps state in a JSON file, loaded at start and written after every change.
func WithStateFile(path string) Option { return func(s *Sim) { s.stateFile = path } }

// WithClock replaces time.Now.
func WithClock(now func() time.Time) Option { return func(s *Sim) { s.now = now } }

// WithLogger sets the logger for backend failures and restarts (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Sim) { s.log = l } }

// New creates a simulator, loading the state file if one is configured and exists, and reattaching
// the servers it holds to the machine backend.
func New(ctx context.Context, opts ...Option) (*Sim, error) {
	s := &Sim{token: "test-token", actionDelay: 200 * time.Millisecond, now: time.Now, machine: &RecordMachine{},
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	s.st = newState()
	if s.stateFile != "" {
		loaded, err := loadState(s.stateFile)
		if err != nil {
			return nil, err
		}
		if loaded != nil {
			s.st = *loaded
			for _, srv := range s.st.Servers {
				if err := s.machine.Reattach(ctx, srv.spec(s.st)); err != nil {
					s.log.Warn("reattach server", "server", srv.Name, "server_id", srv.ID, "err", err)
				}
			}
		}
	}
	return s, nil
}

// CreateExampleProject creates, when missing, what the example stands expect of a Hetzner project: the
// network "stands-net" (10.0.0.0/16 with the subnet 10.0.1.0/24 in eu-central) and the admin SSH key
// "stands-admin". The local demo starts the simulator with it.
func (s *Sim) CreateExampleProject(publicKey string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.networkByName("stands-net") == nil {
		body := []byte(`{"name":"stands-net","ip_range":"10.0.0.0/16","subnets":[{"type":"cloud","ip_range":"10.0.1.0/24","network_zone":"eu-central"}]}`)
		if _, e := s.createNetwork(body); e != nil {
			return fmt.Errorf("create the example network: %s", e.Message)
		}
	}
	for _, k := range s.st.SSHKeys {
		if k.Name == "stands-admin" {
			return s.save()
		}
	}
	body, _ := json.Marshal(map[string]string{"name": "stands-admin", "public_key": publicKey})
	if _, e := s.routeSSHKeys(http.MethodPost, nil, nil, body); e != nil {
		return fmt.Errorf("create the example SSH key: %s", e.Message)
	}
	return s.save()
}

// ServeHTTP serves the API.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if !ok {
		writeError(w, apiErr(http.StatusNotFound, "not_found", "not found"))
		return
	}
	path = strings.TrimSuffix(path, "/")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, apiErr(http.StatusBadRequest, "invalid_input", "read request body: "+err.Error()))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	call := Call{Method: r.Method, Path: "/" + path, Query: r.URL.RawQuery, Time: s.now()}
	status := s.serve(w, r, path, body)
	call.Status = status
	s.calls = append(s.calls, call)
}

func (s *Sim) serve(w http.ResponseWriter, r *http.Request, path string, body []byte) int {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		return writeError(w, apiErr(http.StatusUnauthorized, "unauthorized", "unable to authenticate"))
	}
	if f := s.matchFault(r.Method, "/"+path); f != nil {
		if f.Delay > 0 {
			s.mu.Unlock()
			select {
			case <-time.After(f.Delay):
			case <-r.Context().Done():
			}
			s.mu.Lock()
		}
		if f.Code != "" {
			return writeError(w, f.err())
		}
	}
	s.advance()
	resp, e := s.route(r, path, body)
	if e != nil {
		return writeError(w, e)
	}
	if r.Method != http.MethodGet {
		if err := s.save(); err != nil {
			return writeError(w, apiErr(http.StatusInternalServerError, "service_error", "state file: "+err.Error()))
		}
	}
	status := http.StatusOK
	if r.Method == http.MethodPost && !strings.Contains(path, "/actions/") {
		status = http.StatusCreated
	}
	if resp == nil {
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	}
	return writeJSON(w, status, resp)
}

// Error is an API error as the simulator sends it.
type Error struct {
	Status  int
	Code    string
	Message string
	Details any
}

func apiErr(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

func notFound(kind string, id any) *Error {
	return apiErr(http.StatusNotFound, "not_found", fmt.Sprintf("%s with ID '%v' not found", kind, id))
}

func invalidInput(field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid_input", Message: fmt.Sprintf("invalid input in field '%s'", field),
		Details: map[string]any{"fields": []map[string]any{{"name": field, "messages": []string{msg}}}}}
}

func uniqueness(field, msg string) *Error {
	return &Error{Status: http.StatusConflict, Code: "uniqueness_error", Message: msg,
		Details: map[string]any{"fields": []map[string]any{{"name": field}}}}
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("RateLimit-Limit", "3600")
	w.Header().Set("RateLimit-Remaining", "3599")
	w.Header().Set("RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
	return status
}

func writeError(w http.ResponseWriter, e *Error) int {
	if e.Code == "rate_limit_exceeded" {
		w.Header().Set("RateLimit-Remaining", "0")
	}
	return writeJSON(w, e.Status, map[string]any{"error": map[string]any{"code": e.Code, "message": e.Message, "details": e.Details}})
}

// route dispatches a request. The mutex is held.
func (s *Sim) route(r *http.Request, path string, body []byte) (any, *Error) {
	parts := strings.Split(path, "/")
	q := r.URL.Query()
	m := r.Method
	switch parts[0] {
	case "servers":
		return s.routeServers(m, parts[1:], q, body)
	case "networks":
		return s.routeNetworks(m, parts[1:], q, body)
	case "ssh_keys":
		return s.routeSSHKeys(m, parts[1:], q, body)
	case "actions":
		return s.routeActions(m, parts[1:], q)
	case "server_types":
		return s.routeServerTypes(m, parts[1:], q)
	case "images":
		return s.routeImages(m, parts[1:], q)
	case "locations":
		return s.routeLocations(m, parts[1:], q)
	}
	return nil, apiErr(http.StatusNotFound, "not_found", "not found")
}

func decode(body []byte, v any) *Error {
	if len(body) == 0 {
		return apiErr(http.StatusBadRequest, "invalid_input", "request body is empty")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return apiErr(http.StatusBadRequest, "json_error", "invalid JSON: "+err.Error())
	}
	return nil
}

func parseID(s string) (int64, bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

// page applies page/per_page to n items and returns the slice bounds and the meta block.
func page(q map[string][]string, n int) (int, int, any, *Error) {
	get := func(k string, def int) (int, *Error) {
		v := first(q, k)
		if v == "" {
			return def, nil
		}
		i, err := strconv.Atoi(v)
		if err != nil || i < 1 {
			return 0, invalidInput(k, "must be a positive integer")
		}
		return i, nil
	}
	p, e := get("page", 1)
	if e != nil {
		return 0, 0, nil, e
	}
	per, e := get("per_page", 25)
	if e != nil {
		return 0, 0, nil, e
	}
	per = min(per, 50)
	last := max(1, (n+per-1)/per)
	lo, hi := min((p-1)*per, n), min(p*per, n)
	var prev, next any
	if p > 1 {
		prev = p - 1
	}
	if p < last {
		next = p + 1
	}
	meta := map[string]any{"pagination": map[string]any{"page": p, "per_page": per, "previous_page": prev,
		"next_page": next, "last_page": last, "total_entries": n}}
	return lo, hi, meta, nil
}

func first(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// filterLabels applies ?label_selector=.
func filterLabels(q map[string][]string) (selector, *Error) {
	raw := first(q, "label_selector")
	if raw == "" {
		return nil, nil
	}
	sel, err := parseSelector(raw)
	if err != nil {
		return nil, invalidInput("label_selector", err.Error())
	}
	return sel, nil
}
