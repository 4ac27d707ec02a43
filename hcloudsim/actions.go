package hcloudsim

import (
	"net/http"
	"slices"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// newAction starts an action that succeeds after the configured delay (or fails, when a failure was
// queued for its command). then is the status its server gets when it succeeds.
func (s *Sim) newAction(command, then string, resources ...schema.ActionResourceReference) *action {
	now := s.now()
	a := &action{ID: s.st.id(), Command: command, Status: "running", Started: now, Due: now.Add(s.actionDelay), Resources: resources, Then: then}
	if i := slices.IndexFunc(s.failActions, func(f actionFailure) bool { return f.command == command }); i >= 0 {
		f := s.failActions[i]
		s.failActions = slices.Delete(s.failActions, i, i+1)
		a.Error = &schema.ActionError{Code: f.code, Message: f.message}
	}
	s.st.Actions[a.ID] = a
	return a
}

func serverRef(id int64) schema.ActionResourceReference {
	return schema.ActionResourceReference{ID: id, Type: "server"}
}

// advance finishes the actions whose time has come. The mutex is held.
func (s *Sim) advance() {
	now := s.now()
	for _, a := range s.st.Actions {
		if a.Status != "running" || now.Before(a.Due) {
			continue
		}
		fin := a.Due
		a.Finished = &fin
		if a.Error != nil {
			a.Status = "error"
			continue
		}
		a.Status = "success"
		if a.Then == "" {
			continue
		}
		for _, r := range a.Resources {
			if srv := s.st.Servers[r.ID]; r.Type == "server" && srv != nil {
				srv.Status = a.Then
			}
		}
	}
}

// busy reports whether a server has an action running: the API refuses others with "locked".
func (s *Sim) busy(id int64) bool {
	for _, a := range s.st.Actions {
		if a.Status == "running" && slices.ContainsFunc(a.Resources, func(r schema.ActionResourceReference) bool { return r.Type == "server" && r.ID == id }) {
			return true
		}
	}
	return false
}

func (a *action) schema() schema.Action {
	progress := 0
	if a.Status != "running" {
		progress = 100
	}
	return schema.Action{ID: a.ID, Status: a.Status, Command: a.Command, Progress: progress, Started: a.Started,
		Finished: a.Finished, Error: a.Error, Resources: a.Resources}
}

func (s *Sim) routeActions(m string, parts []string, q map[string][]string) (any, *Error) {
	if m != http.MethodGet {
		return nil, apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
	}
	if len(parts) == 1 {
		id, ok := parseID(parts[0])
		a := s.st.Actions[id]
		if !ok || a == nil {
			return nil, notFound("action", parts[0])
		}
		return schema.ActionGetResponse{Action: a.schema()}, nil
	}
	return s.listActions(q, func(*action) bool { return true })
}

// listActions lists actions by ?id= (repeated) and ?status=, sorted by id, paginated.
func (s *Sim) listActions(q map[string][]string, keep func(*action) bool) (any, *Error) {
	var ids []int64
	for _, v := range q["id"] {
		id, ok := parseID(v)
		if !ok {
			return nil, invalidInput("id", "must be an integer")
		}
		ids = append(ids, id)
	}
	var list []schema.Action
	for _, a := range s.st.Actions {
		if !keep(a) || (len(ids) > 0 && !slices.Contains(ids, a.ID)) {
			continue
		}
		if st := q["status"]; len(st) > 0 && !slices.Contains(st, a.Status) {
			continue
		}
		list = append(list, a.schema())
	}
	slices.SortFunc(list, func(a, b schema.Action) int { return int(a.ID - b.ID) })
	lo, hi, meta, e := page(q, len(list))
	if e != nil {
		return nil, e
	}
	return map[string]any{"actions": nonNil(list[lo:hi]), "meta": meta}, nil
}

func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}
