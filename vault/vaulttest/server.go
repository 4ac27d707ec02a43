// Package vaulttest is a stand-in for the subset of HashiCorp Vault's HTTP API that stands-reconciler
// uses, for tests and the local demo: no Vault server can be built or installed here (see issue 3).
//
// It keeps Vault's real paths, JSON shapes and status codes, so code is driven through the real
// github.com/hashicorp/vault/api client exactly as in production, and contract_test.go runs the same
// cases against a real Vault when VAULT_ADDR and VAULT_TOKEN are set:
//
//   - KV version 2 engines: data read (also ?version=N), write (with check-and-set), soft delete,
//     metadata read, list, metadata delete; mounted with sys/mounts (a "secret/" mount exists at start);
//   - tokens: lookup-self, renew-self (capped by the explicit max TTL), create (child tokens); TTLs
//     really expire, after which the token gets 403 "permission denied";
//   - AppRole: enable with sys/auth, role create, role-id read, secret-id generate, login;
//   - sys/health.
//
// Policies are not enforced: every valid token may do everything.
package vaulttest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is a Vault API stand-in. Create it with New; serve it with Start or as an http.Handler.
type Server struct {
	RootToken string

	now func() time.Time

	mu       sync.Mutex
	tokens   map[string]*token   // by id
	mounts   map[string]*kvMount // by path without slashes
	auths    map[string]string   // auth mount path → type
	roles    map[string]*appRole // by name
	secretID map[string]string   // secret id → role name
}

type token struct {
	id, accessor   string
	policies       []string
	meta           map[string]string
	displayName    string
	path           string
	created        time.Time
	creationTTL    time.Duration
	expires        time.Time // zero: never (root)
	explicitMaxTTL time.Duration
	renewable      bool
	orphan         bool
}

type kvMount struct {
	secrets map[string]*kvSecret
}

type kvSecret struct {
	created  time.Time
	updated  time.Time
	current  int
	versions map[int]*kvVersion
}

type kvVersion struct {
	data    map[string]any
	created time.Time
	deleted time.Time
}

type appRole struct {
	roleID      string
	tokenTTL    time.Duration
	tokenMaxTTL time.Duration
	policies    []string
}

// Option configures a Server.
type Option func(*Server)

// WithRootToken sets the root token (default: a random hvs. token).
func WithRootToken(t string) Option { return func(s *Server) { s.RootToken = t } }

// WithClock replaces time.Now, for tests that move time instead of sleeping.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns a Server with a root token that never expires and a KV v2 engine at "secret/", as a
// Vault dev server has.
func New(opts ...Option) *Server {
	s := &Server{
		now:      time.Now,
		tokens:   map[string]*token{},
		mounts:   map[string]*kvMount{"secret": {secrets: map[string]*kvSecret{}}},
		auths:    map[string]string{"token": "token"},
		roles:    map[string]*appRole{},
		secretID: map[string]string{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.RootToken == "" {
		s.RootToken = "hvs." + randomID(24)
	}
	s.tokens[s.RootToken] = &token{id: s.RootToken, accessor: randomID(12), policies: []string{"root"}, displayName: "root", path: "auth/token/root", created: s.now(), renewable: false, orphan: true}
	return s
}

func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("vaulttest: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

func uuid() string {
	h := randomID(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// apiError is Vault's error envelope.
type apiError struct {
	status int
	msgs   []string
	body   any // a full response body instead of the errors envelope, as for a deleted KV version
}

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, msgs: []string{fmt.Sprintf(format, args...)}}
}

var (
	errPermissionDenied = &apiError{status: http.StatusForbidden, msgs: []string{"permission denied"}}
	errNotFound         = &apiError{status: http.StatusNotFound, msgs: []string{}}
)

// ServeHTTP routes a request like Vault's HTTP layer: /v1/<path>, the token in X-Vault-Token (or
// "Authorization: Bearer"), LIST as a method or as GET ?list=true.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if !ok {
		writeError(w, errorf(http.StatusNotFound, "no handler for route %q", r.URL.Path))
		return
	}
	p = strings.TrimSuffix(p, "/")
	method := r.Method
	if method == http.MethodGet && (r.URL.Query().Get("list") == "true") {
		method = "LIST"
	}
	if method == http.MethodPost {
		method = http.MethodPut // Vault treats POST and PUT alike
	}
	var body map[string]any
	if r.Body != nil && (method == http.MethodPut || method == http.MethodPatch) {
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		if err := dec.Decode(&body); err != nil && err.Error() != "EOF" {
			writeError(w, errorf(http.StatusBadRequest, "failed to parse JSON input: %v", err))
			return
		}
	}
	s.mu.Lock()
	resp, apiErr := s.route(r, method, p, body)
	s.mu.Unlock()
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if resp == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.body != nil {
		writeJSON(w, e.status, e.body)
		return
	}
	writeJSON(w, e.status, map[string]any{"errors": e.msgs})
}

// envelope is the common response shape of Vault's logical API.
func envelope(data any, auth any) map[string]any {
	return map[string]any{
		"request_id": uuid(), "lease_id": "", "renewable": false, "lease_duration": 0,
		"data": data, "wrap_info": nil, "warnings": nil, "auth": auth,
	}
}

func (s *Server) route(r *http.Request, method, p string, body map[string]any) (map[string]any, *apiError) {
	if p == "sys/health" {
		return map[string]any{"initialized": true, "sealed": false, "standby": false, "performance_standby": false,
			"replication_performance_mode": "disabled", "replication_dr_mode": "disabled",
			"server_time_utc": s.now().Unix(), "version": "1.21.0+vaulttest", "cluster_name": "vaulttest", "cluster_id": "vaulttest"}, nil
	}
	if p == "auth/approle/login" && s.auths["approle"] == "approle" && method == http.MethodPut {
		return s.appRoleLogin(body)
	}
	tok, apiErr := s.authenticate(r)
	if apiErr != nil {
		return nil, apiErr
	}
	switch {
	case p == "auth/token/lookup-self":
		return envelope(s.tokenData(tok), nil), nil
	case p == "auth/token/renew-self" && method == http.MethodPut:
		return s.renew(tok, body)
	case p == "auth/token/create" && method == http.MethodPut:
		return s.createToken(tok, body)
	case strings.HasPrefix(p, "sys/mounts/"):
		return s.sysMount(method, strings.TrimPrefix(p, "sys/mounts/"), body)
	case strings.HasPrefix(p, "sys/auth/"):
		return s.sysAuth(method, strings.TrimPrefix(p, "sys/auth/"), body)
	case strings.HasPrefix(p, "auth/approle/role/") && s.auths["approle"] == "approle":
		return s.appRoleAdmin(method, strings.TrimPrefix(p, "auth/approle/role/"), body)
	}
	mount, rest, _ := strings.Cut(p, "/")
	if m := s.mounts[mount]; m != nil {
		return s.kv(m, method, rest, r, body)
	}
	return nil, errorf(http.StatusNotFound, "no handler for route %q. route entry not found.", p)
}

func (s *Server) authenticate(r *http.Request) (*token, *apiError) {
	id := r.Header.Get("X-Vault-Token")
	if id == "" {
		id, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	t := s.tokens[id]
	if id == "" || t == nil {
		return nil, errPermissionDenied
	}
	if !t.expires.IsZero() && !s.now().Before(t.expires) {
		delete(s.tokens, id)
		return nil, errPermissionDenied
	}
	return t, nil
}

func (s *Server) ttl(t *token) int64 {
	if t.expires.IsZero() {
		return 0
	}
	return int64(t.expires.Sub(s.now()).Round(time.Second) / time.Second)
}

func (s *Server) tokenData(t *token) map[string]any {
	var expire any
	if !t.expires.IsZero() {
		expire = t.expires.UTC().Format(time.RFC3339Nano)
	}
	meta := any(nil)
	if len(t.meta) > 0 {
		meta = t.meta
	}
	return map[string]any{
		"accessor": t.accessor, "creation_time": t.created.Unix(), "creation_ttl": int64(t.creationTTL / time.Second),
		"display_name": t.displayName, "entity_id": "", "expire_time": expire,
		"explicit_max_ttl": int64(t.explicitMaxTTL / time.Second), "id": t.id, "issue_time": t.created.UTC().Format(time.RFC3339Nano),
		"meta": meta, "num_uses": 0, "orphan": t.orphan, "path": t.path, "policies": t.policies,
		"renewable": t.renewable, "ttl": s.ttl(t), "type": "service",
	}
}

func (s *Server) authBlock(t *token) map[string]any {
	meta := any(nil)
	if len(t.meta) > 0 {
		meta = t.meta
	}
	return map[string]any{
		"client_token": t.id, "accessor": t.accessor, "policies": t.policies, "token_policies": t.policies,
		"metadata": meta, "lease_duration": s.ttl(t), "renewable": t.renewable, "entity_id": "",
		"token_type": "service", "orphan": t.orphan, "mfa_requirement": nil, "num_uses": 0,
	}
}

// newToken issues a service token. ttl 0 means the default of a month; maxTTL caps renewals.
func (s *Server) newToken(policies []string, ttl, maxTTL time.Duration, path string, meta map[string]string, orphan bool) *token {
	if ttl <= 0 {
		ttl = 768 * time.Hour
	}
	if maxTTL > 0 && ttl > maxTTL {
		ttl = maxTTL
	}
	if len(policies) == 0 {
		policies = []string{"default"}
	}
	now := s.now()
	t := &token{
		id: "hvs." + randomID(24), accessor: randomID(12), policies: policies, meta: meta, displayName: strings.ReplaceAll(path, "/", "-"),
		path: path, created: now, creationTTL: ttl, expires: now.Add(ttl), explicitMaxTTL: maxTTL, renewable: true, orphan: orphan,
	}
	s.tokens[t.id] = t
	return t
}

func (s *Server) renew(t *token, body map[string]any) (map[string]any, *apiError) {
	if !t.renewable || t.expires.IsZero() {
		return nil, errorf(http.StatusBadRequest, "lease is not renewable")
	}
	inc, apiErr := durationField(body, "increment")
	if apiErr != nil {
		return nil, apiErr
	}
	if inc <= 0 {
		inc = t.creationTTL
	}
	expires := s.now().Add(inc)
	if t.explicitMaxTTL > 0 {
		if limit := t.created.Add(t.explicitMaxTTL); expires.After(limit) {
			expires = limit
		}
	}
	t.expires = expires
	return envelope(nil, s.authBlock(t)), nil
}

func (s *Server) createToken(parent *token, body map[string]any) (map[string]any, *apiError) {
	ttl, apiErr := durationField(body, "ttl")
	if apiErr != nil {
		return nil, apiErr
	}
	maxTTL, apiErr := durationField(body, "explicit_max_ttl")
	if apiErr != nil {
		return nil, apiErr
	}
	policies := stringList(body["policies"])
	t := s.newToken(policies, ttl, maxTTL, "auth/token/create", nil, false)
	if r, ok := body["renewable"].(bool); ok {
		t.renewable = r
	}
	if !parent.expires.IsZero() && t.expires.After(parent.expires) {
		t.expires = parent.expires // a child never outlives its parent
	}
	return envelope(nil, s.authBlock(t)), nil
}

func (s *Server) sysMount(method, path string, body map[string]any) (map[string]any, *apiError) {
	path = strings.Trim(path, "/")
	switch method {
	case http.MethodPut:
		if _, used := s.mounts[path]; used || path == "sys" || path == "auth" {
			return nil, errorf(http.StatusBadRequest, "path is already in use at %s/", path)
		}
		typ, _ := body["type"].(string)
		opts, _ := body["options"].(map[string]any)
		version, _ := opts["version"].(string)
		if (typ != "kv" || version != "2") && typ != "kv-v2" {
			return nil, errorf(http.StatusBadRequest, "vaulttest: only KV version 2 engines can be mounted")
		}
		s.mounts[path] = &kvMount{secrets: map[string]*kvSecret{}}
		return nil, nil
	case http.MethodDelete:
		delete(s.mounts, path)
		return nil, nil
	}
	return nil, errorf(http.StatusMethodNotAllowed, "unsupported operation")
}

func (s *Server) sysAuth(method, path string, body map[string]any) (map[string]any, *apiError) {
	path = strings.Trim(path, "/")
	switch method {
	case http.MethodPut:
		if _, used := s.auths[path]; used {
			return nil, errorf(http.StatusBadRequest, "path is already in use at %s/", path)
		}
		typ, _ := body["type"].(string)
		if typ != "approle" || path != "approle" {
			return nil, errorf(http.StatusBadRequest, "vaulttest: only approle at auth/approle can be enabled")
		}
		s.auths[path] = typ
		return nil, nil
	case http.MethodDelete:
		delete(s.auths, path)
		return nil, nil
	}
	return nil, errorf(http.StatusMethodNotAllowed, "unsupported operation")
}

func (s *Server) appRoleAdmin(method, rest string, body map[string]any) (map[string]any, *apiError) {
	name, sub, _ := strings.Cut(rest, "/")
	role := s.roles[name]
	switch {
	case sub == "" && method == http.MethodPut:
		if role == nil {
			role = &appRole{roleID: uuid()}
			s.roles[name] = role
		}
		var apiErr *apiError
		if _, ok := body["token_ttl"]; ok {
			if role.tokenTTL, apiErr = durationField(body, "token_ttl"); apiErr != nil {
				return nil, apiErr
			}
		}
		if _, ok := body["token_max_ttl"]; ok {
			if role.tokenMaxTTL, apiErr = durationField(body, "token_max_ttl"); apiErr != nil {
				return nil, apiErr
			}
		}
		if p, ok := body["token_policies"]; ok {
			role.policies = stringList(p)
		}
		return nil, nil
	case role == nil:
		return nil, errorf(http.StatusBadRequest, "role %q does not exist", name)
	case sub == "role-id" && method == http.MethodGet:
		return envelope(map[string]any{"role_id": role.roleID}, nil), nil
	case sub == "secret-id" && method == http.MethodPut:
		id, acc := uuid(), uuid()
		s.secretID[id] = name
		return envelope(map[string]any{"secret_id": id, "secret_id_accessor": acc, "secret_id_ttl": 0, "secret_id_num_uses": 0}, nil), nil
	case sub == "" && method == http.MethodDelete:
		delete(s.roles, name)
		return nil, nil
	}
	return nil, errorf(http.StatusMethodNotAllowed, "unsupported operation")
}

func (s *Server) appRoleLogin(body map[string]any) (map[string]any, *apiError) {
	roleID, _ := body["role_id"].(string)
	secretID, _ := body["secret_id"].(string)
	if roleID == "" {
		return nil, errorf(http.StatusBadRequest, "missing role_id")
	}
	name, ok := s.secretID[secretID]
	role := s.roles[name]
	if !ok || role == nil || role.roleID != roleID {
		return nil, errorf(http.StatusBadRequest, "invalid role or secret ID")
	}
	t := s.newToken(append([]string{"default"}, role.policies...), role.tokenTTL, role.tokenMaxTTL, "auth/approle/login", map[string]string{"role_name": name}, true)
	return envelope(nil, s.authBlock(t)), nil
}

func (s *Server) kv(m *kvMount, method, rest string, r *http.Request, body map[string]any) (map[string]any, *apiError) {
	kind, key, _ := strings.Cut(rest, "/")
	key = strings.Trim(key, "/")
	switch {
	case kind == "data" && method == http.MethodGet:
		return s.kvRead(m, key, r.URL.Query().Get("version"))
	case kind == "data" && method == http.MethodPut:
		return s.kvWrite(m, key, body)
	case kind == "data" && method == http.MethodDelete:
		if sec := m.secrets[key]; sec != nil {
			if v := sec.versions[sec.current]; v != nil && v.deleted.IsZero() {
				v.deleted = s.now()
			}
		}
		return nil, nil
	case kind == "metadata" && method == http.MethodGet:
		return s.kvMetadata(m, key)
	case kind == "metadata" && method == "LIST":
		return s.kvList(m, key)
	case kind == "metadata" && method == http.MethodDelete:
		delete(m.secrets, key)
		return nil, nil
	}
	return nil, errorf(http.StatusMethodNotAllowed, "unsupported operation")
}

func versionMeta(v *kvVersion, n int) map[string]any {
	deleted := ""
	if !v.deleted.IsZero() {
		deleted = v.deleted.UTC().Format(time.RFC3339Nano)
	}
	return map[string]any{"created_time": v.created.UTC().Format(time.RFC3339Nano), "custom_metadata": nil,
		"deletion_time": deleted, "destroyed": false, "version": n}
}

func (s *Server) kvRead(m *kvMount, key, version string) (map[string]any, *apiError) {
	sec := m.secrets[key]
	if sec == nil {
		return nil, errNotFound
	}
	n := sec.current
	if version != "" && version != "0" {
		var err error
		if n, err = strconv.Atoi(version); err != nil {
			return nil, errorf(http.StatusBadRequest, "invalid version %q", version)
		}
	}
	v := sec.versions[n]
	if v == nil {
		return nil, errNotFound
	}
	if !v.deleted.IsZero() {
		// Vault answers 404 for a deleted version and still shows its metadata.
		return nil, &apiError{status: http.StatusNotFound, body: envelope(map[string]any{"data": nil, "metadata": versionMeta(v, n)}, nil)}
	}
	return envelope(map[string]any{"data": v.data, "metadata": versionMeta(v, n)}, nil), nil
}

func (s *Server) kvWrite(m *kvMount, key string, body map[string]any) (map[string]any, *apiError) {
	if key == "" {
		return nil, errorf(http.StatusBadRequest, "missing path")
	}
	data, ok := body["data"].(map[string]any)
	if !ok {
		return nil, errorf(http.StatusBadRequest, "no data provided")
	}
	sec := m.secrets[key]
	if opts, _ := body["options"].(map[string]any); opts != nil {
		if cas, ok := opts["cas"].(json.Number); ok {
			want, _ := cas.Int64()
			have := 0
			if sec != nil {
				have = sec.current
			}
			if int(want) != have {
				return nil, errorf(http.StatusBadRequest, "check-and-set parameter did not match the current version")
			}
		}
	}
	now := s.now()
	if sec == nil {
		sec = &kvSecret{created: now, versions: map[int]*kvVersion{}}
		m.secrets[key] = sec
	}
	sec.current++
	sec.updated = now
	v := &kvVersion{data: data, created: now}
	sec.versions[sec.current] = v
	return envelope(versionMeta(v, sec.current), nil), nil
}

func (s *Server) kvMetadata(m *kvMount, key string) (map[string]any, *apiError) {
	sec := m.secrets[key]
	if sec == nil {
		return nil, errNotFound
	}
	versions := map[string]any{}
	for n, v := range sec.versions {
		meta := versionMeta(v, n)
		delete(meta, "version")
		delete(meta, "custom_metadata")
		versions[strconv.Itoa(n)] = meta
	}
	// Vault moves oldest_version only when it trims versions past max_versions, which this stand-in
	// never does: until then it is 0, not the lowest version kept (the contract suite found this).
	oldest := 0
	return envelope(map[string]any{
		"cas_required": false, "created_time": sec.created.UTC().Format(time.RFC3339Nano), "current_version": sec.current,
		"custom_metadata": nil, "delete_version_after": "0s", "max_versions": 0, "oldest_version": oldest,
		"updated_time": sec.updated.UTC().Format(time.RFC3339Nano), "versions": versions,
	}, nil), nil
}

func (s *Server) kvList(m *kvMount, prefix string) (map[string]any, *apiError) {
	if prefix != "" {
		prefix += "/"
	}
	seen := map[string]bool{}
	for key := range m.secrets {
		rest, ok := strings.CutPrefix(key, prefix)
		if !ok {
			continue
		}
		if i := strings.Index(rest, "/"); i >= 0 {
			rest = rest[:i+1]
		}
		seen[rest] = true
	}
	if len(seen) == 0 {
		return nil, errNotFound
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return envelope(map[string]any{"keys": keys}, nil), nil
}

// durationField reads a Vault duration: a number of seconds or a Go-style duration string ("90s", "1h").
func durationField(body map[string]any, name string) (time.Duration, *apiError) {
	switch v := body[name].(type) {
	case nil:
		return 0, nil
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			return 0, errorf(http.StatusBadRequest, "invalid %s", name)
		}
		return time.Duration(n) * time.Second, nil
	case string:
		if v == "" {
			return 0, nil
		}
		if n, err := strconv.Atoi(v); err == nil {
			return time.Duration(n) * time.Second, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, errorf(http.StatusBadRequest, "invalid %s: %q", name, v)
		}
		return d, nil
	}
	return 0, errorf(http.StatusBadRequest, "invalid %s", name)
}

func stringList(v any) []string {
	switch l := v.(type) {
	case string:
		var out []string
		for p := range strings.SplitSeq(l, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	case []any:
		var out []string
		for _, it := range l {
			if s, ok := it.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
