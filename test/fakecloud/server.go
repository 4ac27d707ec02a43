// Package fakecloud is a second cloud, for tests only: an API of its own (nothing like Hetzner's) served
// on 127.0.0.1, and its client implementing engine/cloud's Cloud. It exists to prove the seam: the
// engine and its provider run on it through provider.WithCloud and engine.Config.Clouds, without a
// line of production code knowing it (docs/architecture.md#where-do-i-add). Never shipped: it is under
// test/, outside the product's import graph (test/archtest).
package fakecloud

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Name is the cloud's name in engine.Config.Cloud and provider.WithCloud.
const Name = "fakecloud"

// Server is the cloud's API: servers, networks, SSH keys and prices of one project, in memory.
type Server struct {
	URL   string // the API's endpoint, for Open
	Token string

	mu       sync.Mutex
	next     int64
	servers  map[int64]*server
	networks map[string]*network
	keys     map[string]int64
	writes   int
	deletes  int
	down     bool
}

// server is a server as the fake keeps it: what its API shows, and its user data, which it does not.
type server struct {
	wireServer
	userData string
}

type network struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	IPRange string `json:"ip_range"`
	hosts   int
}

// Start serves a project with the network and SSH key the example stands name (stands-net,
// stands-admin), until the test ends.
func Start(t testing.TB, token string) *Server {
	t.Helper()
	s := &Server{Token: token, servers: map[int64]*server{}, networks: map[string]*network{}, keys: map[string]int64{}, next: 100}
	s.networks["stands-net"] = &network{ID: 1, Name: "stands-net", IPRange: "10.0.0.0/16"}
	s.keys["stands-admin"] = 2
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.URL = "http://" + l.Addr().String() + "/v0"
	return s
}

// SetDown makes every request fail as an outage does (503), or stops that.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// Writes counts the requests that changed something.
func (s *Server) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Deletes counts the servers deleted.
func (s *Server) Deletes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deletes
}

// UserData is a server's user data, which the API never shows.
func (s *Server) UserData(id int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv := s.servers[id]; srv != nil {
		return srv.userData
	}
	return ""
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v0/servers", s.list)
	mux.HandleFunc("GET /v0/servers/{id}", s.withServer(func(w http.ResponseWriter, r *http.Request, srv *server) { reply(w, http.StatusOK, srv.wireServer) }))
	mux.HandleFunc("POST /v0/servers", s.create)
	mux.HandleFunc("POST /v0/servers/{id}/networks", s.withServer(s.attach))
	mux.HandleFunc("PUT /v0/servers/{id}/labels", s.withServer(s.label))
	mux.HandleFunc("POST /v0/servers/{id}/type", s.withServer(s.resize))
	mux.HandleFunc("DELETE /v0/servers/{id}", s.withServer(s.delete))
	mux.HandleFunc("GET /v0/networks/{name}", s.network)
	mux.HandleFunc("GET /v0/keys/{name}", s.key)
	mux.HandleFunc("GET /v0/prices", s.prices)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		down := s.down
		s.mu.Unlock()
		switch {
		case down:
			fail(w, http.StatusServiceUnavailable, "unavailable")
		case r.Header.Get(tokenHeader) != s.Token:
			fail(w, http.StatusUnauthorized, "unauthorized")
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

const tokenHeader = "X-Fake-Token"

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	name, selector := r.URL.Query().Get("name"), r.URL.Query().Get("selector")
	want := map[string]string{}
	for kv := range strings.SplitSeq(selector, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
	s.mu.Lock()
	out := []wireServer{}
	for _, srv := range s.servers {
		if name != "" && srv.Name != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && srv.Labels[k] == v
		}
		if match {
			out = append(out, srv.wireServer)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b wireServer) int { return int(a.ID - b.ID) })
	reply(w, http.StatusOK, map[string]any{"servers": out})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var in wireCreate
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Name == "" || in.Type == "" || in.Location == "" {
		fail(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.servers {
		if srv.Name == in.Name {
			fail(w, http.StatusConflict, "name_taken")
			return
		}
	}
	s.next++
	s.writes++
	srv := &server{wireServer: wireServer{ID: s.next, Name: in.Name, Type: in.Type, Image: in.Image, Location: in.Location,
		Labels: in.Labels, IPv4: fmt.Sprintf("127.0.1.%d", s.next%250+1), Status: "on", Created: time.Now().UTC()}, userData: in.UserData}
	if n := s.networks[in.Network]; in.Network != "" && n != nil {
		n.hosts++
		srv.Private = []wireAttachment{{Network: n.ID, IP: fmt.Sprintf("10.0.1.%d", n.hosts+1)}}
	}
	s.servers[srv.ID] = srv
	reply(w, http.StatusCreated, srv.wireServer)
}

// withServer runs h on the server the path names; 404 when there is none.
func (s *Server) withServer(h func(http.ResponseWriter, *http.Request, *server)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		s.mu.Lock()
		srv := s.servers[id]
		if srv == nil {
			s.mu.Unlock()
			fail(w, http.StatusNotFound, "no_such_server")
			return
		}
		if r.Method != http.MethodGet {
			s.writes++
		}
		s.mu.Unlock()
		h(w, r, srv)
	}
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request, srv *server) {
	var in struct {
		Network int64 `json:"network"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.networks {
		if n.ID == in.Network && !slices.ContainsFunc(srv.Private, func(a wireAttachment) bool { return a.Network == n.ID }) {
			n.hosts++
			srv.Private = append(srv.Private, wireAttachment{Network: n.ID, IP: fmt.Sprintf("10.0.1.%d", n.hosts+1)})
		}
	}
	reply(w, http.StatusOK, srv.wireServer)
}

func (s *Server) label(w http.ResponseWriter, r *http.Request, srv *server) {
	var labels map[string]string
	if err := json.NewDecoder(r.Body).Decode(&labels); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	srv.Labels = labels
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// resize changes the type in place, as the cloud.Cloud contract says: the server keeps its id, disk
// and addresses, and is on again afterwards.
func (s *Server) resize(w http.ResponseWriter, r *http.Request, srv *server) {
	var in struct {
		Type string `json:"type"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Type == "" {
		fail(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	srv.Type, srv.Status = in.Type, "on"
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) delete(w http.ResponseWriter, _ *http.Request, srv *server) {
	s.mu.Lock()
	delete(s.servers, srv.ID)
	s.deletes++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) network(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := s.networks[r.PathValue("name")]
	s.mu.Unlock()
	if n == nil {
		fail(w, http.StatusNotFound, "no_such_network")
		return
	}
	reply(w, http.StatusOK, n)
}

func (s *Server) key(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	id, ok := s.keys[r.PathValue("name")]
	s.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, "no_such_key")
		return
	}
	reply(w, http.StatusOK, map[string]any{"id": id, "name": r.PathValue("name")})
}

// prices are the fake's list prices: every type the examples use, in every location they use.
func (s *Server) prices(w http.ResponseWriter, _ *http.Request) {
	var out []wirePrice
	for i, typ := range []string{"cx22", "cx32", "cx42"} {
		for _, loc := range []string{"fsn1", "nbg1", "hel1"} {
			out = append(out, wirePrice{Type: typ, Location: loc, Cents: 500 * (i + 1), Currency: "USD"})
		}
	}
	reply(w, http.StatusOK, map[string]any{"prices": out})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code string) {
	reply(w, status, wireError{Code: code})
}

// The API's documents.
type (
	wireServer struct {
		ID       int64             `json:"id"`
		Name     string            `json:"name"`
		Type     string            `json:"type"`
		Image    string            `json:"image"`
		Location string            `json:"location"`
		Labels   map[string]string `json:"labels"`
		IPv4     string            `json:"ipv4"`
		Private  []wireAttachment  `json:"private"`
		Status   string            `json:"status"`
		Created  time.Time         `json:"created"`
	}
	wireAttachment struct {
		Network int64  `json:"network"`
		IP      string `json:"ip"`
	}
	wireCreate struct {
		Name     string            `json:"name"`
		Type     string            `json:"type"`
		Image    string            `json:"image"`
		Location string            `json:"location"`
		Labels   map[string]string `json:"labels"`
		UserData string            `json:"user_data"`
		Network  string            `json:"network"`
		SSHKey   int64             `json:"ssh_key"`
	}
	wirePrice struct {
		Type     string `json:"type"`
		Location string `json:"location"`
		Cents    int    `json:"cents"`
		Currency string `json:"currency"`
	}
	wireError struct {
		Code string `json:"error"`
	}
)

var errNotFound = errors.New("not found")

// On says whether the server exists and is on.
func (s *Server) On(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.servers[id]
	return srv != nil && srv.Status == "on"
}
