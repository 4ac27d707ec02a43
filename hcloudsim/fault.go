package hcloudsim

import (
	"net/http"
	"strings"
	"time"
)

// Fault makes matching calls fail or slow down, for tests of retries and error handling.
type Fault struct {
	Method string // "" matches every method
	Path   string // prefix of the path after /v1, e.g. "/servers"; "" matches every path
	Nth    int    // the first matching call that fails (1-based); 0 means the first
	Times  int    // how many consecutive matching calls fail from the Nth on; 0 means one, -1 all
	Code   string // API error code, e.g. "rate_limit_exceeded"; "" only delays
	Status int    // HTTP status; 0 takes the code's usual one
	Delay  time.Duration

	seen, failed int
}

// statusOf is the HTTP status the API sends with each error code.
var statusOf = map[string]int{
	"unauthorized": 401, "forbidden": 403, "resource_limit_exceeded": 403, "not_found": 404,
	"invalid_input": 400, "json_error": 400, "uniqueness_error": 409, "conflict": 409,
	"locked": 423, "rate_limit_exceeded": 429, "service_error": 503, "server_error": 500,
	"unavailable": 503, "maintenance": 503, "timeout": 504, "protected": 403,
}

func (f *Fault) err() *Error {
	st := f.Status
	if st == 0 {
		st = statusOf[f.Code]
	}
	if st == 0 {
		st = http.StatusInternalServerError
	}
	return apiErr(st, f.Code, "injected fault: "+f.Code)
}

// Inject adds a fault.
func (s *Sim) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Nth < 1 {
		f.Nth = 1
	}
	if f.Times == 0 {
		f.Times = 1
	}
	s.faults = append(s.faults, &f)
}

// matchFault returns the fault that applies to this call, if any. The mutex is held.
func (s *Sim) matchFault(method, path string) *Fault {
	for _, f := range s.faults {
		if (f.Method != "" && f.Method != method) || !strings.HasPrefix(path, f.Path) {
			continue
		}
		f.seen++
		if f.seen < f.Nth || (f.Times >= 0 && f.failed >= f.Times) {
			continue
		}
		f.failed++
		return f
	}
	return nil
}

// FailNextAction makes the next action with the given command (e.g. "create_server") finish with
// status "error" and this error.
func (s *Sim) FailNextAction(command, code, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failActions = append(s.failActions, actionFailure{command, code, message})
}

type actionFailure struct{ command, code, message string }

// Call is one request in the call log.
type Call struct {
	Method string
	Path   string
	Query  string
	Status int
	Time   time.Time
}

// Calls returns the call log.
func (s *Sim) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Writes counts the calls that were not GET (creates, updates, deletes, actions), whatever their
// outcome, optionally only those whose path starts with prefix.
func (s *Sim) Writes(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.Method != http.MethodGet && strings.HasPrefix(c.Path, prefix) {
			n++
		}
	}
	return n
}
