package hcloudsim

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"golang.org/x/crypto/ssh"
)

type env struct {
	sim     *Sim
	l       *Listener
	client  *hcloud.Client
	machine *RecordMachine
}

// start serves a simulator and returns the real hcloud-go client pointed at it, with short backoffs
// so retries and action polling take milliseconds.
func start(t *testing.T, opts ...Option) *env {
	t.Helper()
	m := &RecordMachine{}
	sim, err := New(context.Background(), append([]Option{WithActionDelay(30 * time.Millisecond), WithMachine(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(sim, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return &env{sim: sim, l: l, machine: m, client: newClient(l.Endpoint, "test-token", 5)}
}

func newClient(endpoint, token string, retries int) *hcloud.Client {
	return hcloud.NewClient(hcloud.WithEndpoint(endpoint), hcloud.WithToken(token),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(10 * time.Millisecond)}),
		hcloud.WithRetryOpts(hcloud.RetryOpts{BackoffFunc: hcloud.ConstantBackoff(5 * time.Millisecond), MaxRetries: retries}))
}

// must unwraps a client call in setup steps; a failure panics, which fails the test with the error.
func must[T any](v T, _ *hcloud.Response, err error) T {
	if err != nil {
		panic(fmt.Sprintf("hcloud call failed: %v", err))
	}
	return v
}

func sshPublicKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// fixture creates what a stand needs before its servers: an admin key and a network with a subnet.
func (e *env) fixture(t *testing.T) (*hcloud.SSHKey, *hcloud.Network) {
	t.Helper()
	ctx := context.Background()
	key := must(e.client.SSHKey.Create(ctx, hcloud.SSHKeyCreateOpts{Name: "stands-admin", PublicKey: sshPublicKey(t)}))
	_, rng, _ := net.ParseCIDR("10.0.0.0/16")
	_, sub, _ := net.ParseCIDR("10.0.1.0/24")
	n := must(e.client.Network.Create(ctx, hcloud.NetworkCreateOpts{Name: "stands-net", IPRange: rng,
		Subnets: []hcloud.NetworkSubnet{{Type: hcloud.NetworkSubnetTypeCloud, IPRange: sub, NetworkZone: hcloud.NetworkZoneEUCentral}}}))
	return key, n
}

func (e *env) createServer(t *testing.T, name string, labels map[string]string, nets ...*hcloud.Network) hcloud.ServerCreateResult {
	t.Helper()
	ctx := context.Background()
	st := must(e.client.ServerType.GetByName(ctx, "cx22"))
	img := must(e.client.Image.GetByNameAndArchitecture(ctx, "debian-12", hcloud.ArchitectureX86))
	loc := must(e.client.Location.GetByName(ctx, "hel1"))
	res, _, err := e.client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: name, ServerType: st, Image: img, Location: loc,
		UserData: "#cloud-config\nhostname: " + name + "\n", Labels: labels, Networks: nets})
	if err != nil {
		t.Fatalf("create server %s: %v", name, err)
	}
	return res
}

// TestServerLifecycle: create in a network with user data and labels, wait for the actions, find by
// name and by label selector, delete, and not_found afterwards.
func TestServerLifecycle(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	key, net := e.fixture(t)
	if got := must(e.client.SSHKey.GetByName(ctx, "stands-admin")); got == nil || got.ID != key.ID || got.Fingerprint == "" {
		t.Fatalf("ssh key by name: %+v", got)
	}
	st := must(e.client.ServerType.GetByName(ctx, "cx22"))
	if len(st.Pricings) == 0 || st.Pricings[0].Monthly.Net == "" || st.Pricings[0].Monthly.Gross == "" {
		t.Fatalf("server type without prices: %+v", st.Pricings)
	}
	labels := map[string]string{"stands.dev/owner": "t", "stands.dev/stand": "t_mini_a"}
	res, _, err := e.client.Server.Create(ctx, hcloud.ServerCreateOpts{
		Name: "t-mini-a-n1", ServerType: st, Image: &hcloud.Image{Name: "debian-12"}, Location: &hcloud.Location{Name: "hel1"},
		SSHKeys: []*hcloud.SSHKey{key}, UserData: "#cloud-config\n", Labels: labels, Networks: []*hcloud.Network{net},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Server.Status != hcloud.ServerStatusInitializing || res.Action.Status != hcloud.ActionStatusRunning || res.RootPassword != "" {
		t.Errorf("create result: status %s, action %s, root password %q", res.Server.Status, res.Action.Status, res.RootPassword)
	}
	if err := e.client.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
		t.Fatalf("wait for actions: %v", err)
	}
	srv := must(e.client.Server.GetByName(ctx, "t-mini-a-n1"))
	if srv == nil || srv.Status != hcloud.ServerStatusRunning || srv.Labels["stands.dev/stand"] != "t_mini_a" {
		t.Fatalf("server by name: %+v", srv)
	}
	if srv.PublicNet.IPv4.IP == nil || srv.PublicNet.IPv4.IP.String() == "" || len(srv.PrivateNet) != 1 || srv.PrivateNet[0].IP.String() != "10.0.1.1" {
		t.Fatalf("addresses: public %v private %+v", srv.PublicNet.IPv4.IP, srv.PrivateNet)
	}
	if spec := e.machine.Servers()[srv.ID]; spec.UserData != "#cloud-config\n" || spec.Image != "debian-12" {
		t.Errorf("machine got %+v", spec)
	}
	for sel, want := range map[string]int{
		"stands.dev/owner=t":                        1,
		"stands.dev/owner==t,stands.dev/stand":      1,
		"stands.dev/stand in (t_mini_a,t_mini_b)":   1,
		"stands.dev/owner!=t":                       0,
		"!stands.dev/owner":                         0,
		"stands.dev/stand notin (t_mini_a)":         0,
		"stands.dev/owner=other":                    0,
		"stands.dev/owner,stands.dev/stand=t_other": 0,
	} {
		got, err := e.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: sel}})
		if err != nil || len(got) != want {
			t.Errorf("selector %q: %d servers (%v), want %d", sel, len(got), err, want)
		}
	}
	upd := must(e.client.Server.Update(ctx, srv, hcloud.ServerUpdateOpts{Labels: map[string]string{"stands.dev/owner": "u"}}))
	if upd.Labels["stands.dev/owner"] != "u" {
		t.Errorf("update labels: %v", upd.Labels)
	}
	del := must(e.client.Server.DeleteWithResult(ctx, srv))
	if err := e.client.Action.WaitFor(ctx, del.Action); err != nil {
		t.Fatal(err)
	}
	if got := must(e.client.Server.GetByID(ctx, srv.ID)); got != nil {
		t.Fatalf("server still there after delete: %+v", got)
	}
	_, _, err = e.client.Server.Update(ctx, srv, hcloud.ServerUpdateOpts{Name: "x"})
	if !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		t.Fatalf("update after delete: want not_found, got %v", err)
	}
	if len(e.machine.Servers()) != 0 {
		t.Errorf("machine still has servers: %v", e.machine.Servers())
	}
}

func TestPagination(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	for i := range 60 {
		e.createServer(t, fmt.Sprintf("s%02d", i), map[string]string{"batch": "p"})
	}
	before := len(e.sim.Calls())
	all, err := e.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{PerPage: 25, LabelSelector: "batch=p"}})
	if err != nil || len(all) != 60 {
		t.Fatalf("all servers: %d, %v", len(all), err)
	}
	for i, s := range all {
		if s.Name != fmt.Sprintf("s%02d", i) {
			t.Fatalf("server %d is %s: not sorted by id or pages overlap", i, s.Name)
		}
	}
	if pages := len(e.sim.Calls()) - before; pages != 3 {
		t.Errorf("%d requests for 60 servers at 25 per page, want 3", pages)
	}
	list, resp, err := e.client.Server.List(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{Page: 3, PerPage: 25}})
	if err != nil || len(list) != 10 || resp.Meta.Pagination == nil || resp.Meta.Pagination.TotalEntries != 60 ||
		resp.Meta.Pagination.LastPage != 3 || resp.Meta.Pagination.NextPage != 0 || resp.Meta.Pagination.PreviousPage != 2 {
		t.Fatalf("page 3: %d servers, meta %+v, %v", len(list), resp.Meta.Pagination, err)
	}
}

// TestErrorCodes: every code reaches hcloud-go as its typed hcloud.Error.
func TestErrorCodes(t *testing.T) {
	e := start(t, WithActionDelay(time.Hour)) // actions stay running: the server stays locked
	ctx := context.Background()
	_, nw := e.fixture(t)
	res := e.createServer(t, "locked-one", nil, nw)
	noRetry := newClient(e.l.Endpoint, "test-token", 0)
	st := &hcloud.ServerType{Name: "cx22"}
	img := &hcloud.Image{Name: "debian-12"}
	cases := []struct {
		name string
		code hcloud.ErrorCode
		call func() error
	}{
		{"duplicate name", hcloud.ErrorCodeUniquenessError, func() error {
			_, _, err := noRetry.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "locked-one", ServerType: st, Image: img})
			return err
		}},
		{"bad name", hcloud.ErrorCodeInvalidInput, func() error {
			_, _, err := noRetry.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "bad_name!", ServerType: st, Image: img})
			return err
		}},
		{"unknown server", hcloud.ErrorCodeNotFound, func() error {
			_, _, err := noRetry.Server.DeleteWithResult(ctx, &hcloud.Server{ID: 424242})
			return err
		}},
		{"wrong token", hcloud.ErrorCodeUnauthorized, func() error {
			_, _, err := newClient(e.l.Endpoint, "wrong", 0).Server.List(ctx, hcloud.ServerListOpts{})
			return err
		}},
		{"action while locked", hcloud.ErrorCodeLocked, func() error {
			_, _, err := noRetry.Server.Poweroff(ctx, res.Server)
			return err
		}},
	}
	for _, code := range []hcloud.ErrorCode{hcloud.ErrorCodeRateLimitExceeded, hcloud.ErrorCodeConflict, hcloud.ErrorCodeForbidden,
		hcloud.ErrorCodeResourceLimitExceeded, hcloud.ErrorCodeServiceError, hcloud.ErrorCodeMaintenance} {
		cases = append(cases, struct {
			name string
			code hcloud.ErrorCode
			call func() error
		}{"injected " + string(code), code, func() error {
			e.sim.Inject(Fault{Method: http.MethodGet, Path: "/locations", Code: string(code)})
			_, err := noRetry.Location.All(ctx)
			return err
		}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !hcloud.IsError(err, c.code) {
				t.Fatalf("want hcloud error %s, got %v", c.code, err)
			}
			var he hcloud.Error
			if !errors.As(err, &he) || he.Message == "" {
				t.Errorf("not a typed hcloud.Error with a message: %#v", err)
			}
		})
	}
}

// TestRetries: hcloud-go's own retry handler retries rate_limit_exceeded and conflict, and gives up
// after its maximum.
func TestRetries(t *testing.T) {
	for _, code := range []string{"rate_limit_exceeded", "conflict"} {
		t.Run(code, func(t *testing.T) {
			e := start(t)
			e.sim.Inject(Fault{Method: http.MethodPost, Path: "/servers", Code: code, Times: 2})
			res := e.createServer(t, "retried", nil)
			if res.Server == nil || res.Server.Name != "retried" {
				t.Fatalf("create: %+v", res.Server)
			}
			if n := e.sim.Writes("/servers"); n != 3 {
				t.Errorf("%d POST /servers, want 3 (two failures, one success)", n)
			}
			srvs, err := e.client.Server.All(context.Background())
			if err != nil || len(srvs) != 1 {
				t.Errorf("retries made %d servers: %v", len(srvs), err)
			}
			e.sim.Inject(Fault{Method: http.MethodGet, Path: "/servers", Code: code, Times: -1})
			_, err = e.client.Server.All(context.Background())
			if !hcloud.IsError(err, hcloud.ErrorCode(code)) {
				t.Fatalf("persistent %s: got %v", code, err)
			}
			gets := 0
			for _, c := range e.sim.Calls() {
				if c.Method == http.MethodGet && c.Path == "/servers" && c.Status == statusOf[code] {
					gets++
				}
			}
			if gets != 6 {
				t.Errorf("%d attempts, want 6 (one try and five retries)", gets)
			}
		})
	}
}

func TestActionFailureAndDelay(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	e.sim.FailNextAction("create_server", "server_create_failed", "no capacity")
	res := e.createServer(t, "doomed", nil)
	err := e.client.Action.WaitFor(ctx, res.Action)
	var ae hcloud.ActionError
	if !errors.As(err, &ae) || ae.Code != "server_create_failed" || ae.Message != "no capacity" {
		t.Fatalf("want the action's error, got %#v", err)
	}
	// A delayed call still answers.
	e.sim.Inject(Fault{Method: http.MethodGet, Path: "/servers", Delay: 100 * time.Millisecond})
	t0 := time.Now()
	if _, err := e.client.Server.All(ctx); err != nil || time.Since(t0) < 100*time.Millisecond {
		t.Fatalf("delayed call: %v after %v", err, time.Since(t0))
	}
}

func TestNetworkAttachAndPower(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	_, nw := e.fixture(t)
	res := e.createServer(t, "n1", nil)
	if err := e.client.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP("10.0.1.77")
	a := must(e.client.Server.AttachToNetwork(ctx, res.Server, hcloud.ServerAttachToNetworkOpts{Network: nw, IP: ip}))
	if err := e.client.Action.WaitFor(ctx, a); err != nil {
		t.Fatal(err)
	}
	srv := must(e.client.Server.GetByID(ctx, res.Server.ID))
	if len(srv.PrivateNet) != 1 || srv.PrivateNet[0].IP.String() != "10.0.1.77" {
		t.Fatalf("attached with requested IP: %+v", srv.PrivateNet)
	}
	if _, _, err := e.client.Server.AttachToNetwork(ctx, srv, hcloud.ServerAttachToNetworkOpts{Network: nw}); !hcloud.IsError(err, hcloud.ErrorCodeServerAlreadyAttached) {
		t.Errorf("second attach: want server_already_attached, got %v", err)
	}
	other := e.createServer(t, "n2", nil)
	if err := e.client.Action.WaitFor(ctx, other.Action); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.client.Server.AttachToNetwork(ctx, other.Server, hcloud.ServerAttachToNetworkOpts{Network: nw, IP: ip}); !hcloud.IsError(err, hcloud.ErrorCodeIPNotAvailable) {
		t.Errorf("attach with a taken IP: want ip_not_available, got %v", err)
	}
	n := must(e.client.Network.GetByName(ctx, "stands-net"))
	if len(n.Servers) != 1 || n.Servers[0].ID != srv.ID {
		t.Errorf("network servers: %+v", n.Servers)
	}
	a = must(e.client.Server.DetachFromNetwork(ctx, srv, hcloud.ServerDetachFromNetworkOpts{Network: nw}))
	if err := e.client.Action.WaitFor(ctx, a); err != nil {
		t.Fatal(err)
	}
	off := must(e.client.Server.Poweroff(ctx, srv))
	if err := e.client.Action.WaitFor(ctx, off); err != nil {
		t.Fatal(err)
	}
	if s := must(e.client.Server.GetByID(ctx, srv.ID)); s.Status != hcloud.ServerStatusOff || e.machine.IsOn(srv.ID) || len(s.PrivateNet) != 0 {
		t.Fatalf("after detach and poweroff: status %s, on %v, nets %v", s.Status, e.machine.IsOn(srv.ID), s.PrivateNet)
	}
	on := must(e.client.Server.Poweron(ctx, srv))
	if err := e.client.Action.WaitFor(ctx, on); err != nil {
		t.Fatal(err)
	}
	if s := must(e.client.Server.GetByID(ctx, srv.ID)); s.Status != hcloud.ServerStatusRunning || !e.machine.IsOn(srv.ID) {
		t.Fatalf("after poweron: %s", s.Status)
	}
}

// TestRestartKeepsState: a simulator restarted on its state file keeps servers, networks, keys and IP
// allocations, and hands the servers back to its machine backend.
func TestRestartKeepsState(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	e := start(t, WithStateFile(file))
	ctx := context.Background()
	_, nw := e.fixture(t)
	first := e.createServer(t, "a1", map[string]string{"k": "v"}, nw)
	if err := e.client.Action.WaitFor(ctx, first.Action); err != nil {
		t.Fatal(err)
	}
	before := must(e.client.Server.GetByID(ctx, first.Server.ID))
	if err := e.l.Close(ctx); err != nil {
		t.Fatal(err)
	}

	again := start(t, WithStateFile(file))
	after := must(again.client.Server.GetByName(ctx, "a1"))
	if after == nil || after.ID != before.ID || after.PublicNet.IPv4.IP.String() != before.PublicNet.IPv4.IP.String() ||
		after.PrivateNet[0].IP.String() != before.PrivateNet[0].IP.String() || after.Labels["k"] != "v" || after.Status != hcloud.ServerStatusRunning {
		t.Fatalf("after restart: %+v, before %+v", after, before)
	}
	if spec, ok := again.machine.Servers()[after.ID]; !ok || spec.PublicIPv4 != before.PublicNet.IPv4.IP.String() {
		t.Errorf("machine backend was not handed the server back: %+v", spec)
	}
	if k := must(again.client.SSHKey.GetByName(ctx, "stands-admin")); k == nil {
		t.Error("ssh key lost")
	}
	n := must(again.client.Network.GetByName(ctx, "stands-net"))
	second := again.createServer(t, "a2", nil, n)
	if got := second.Server.PrivateNet[0].IP.String(); got == before.PrivateNet[0].IP.String() || got != "10.0.1.2" {
		t.Errorf("second server got private IP %s (first has %s)", got, before.PrivateNet[0].IP)
	}
	if second.Server.PublicNet.IPv4.IP.String() == before.PublicNet.IPv4.IP.String() {
		t.Errorf("second server reuses the first one's public IP")
	}
	if second.Server.ID <= before.ID {
		t.Errorf("ids restart: %d after %d", second.Server.ID, before.ID)
	}
}

// TestWireFormat checks what hcloud-go does not show: content type, the error envelope, 401.
func TestWireFormat(t *testing.T) {
	e := start(t)
	req, _ := http.NewRequest(http.MethodGet, e.l.Endpoint+"/servers", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 401 || body.Error.Code != "unauthorized" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("unauthenticated: %d %+v %s", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

func TestSelector(t *testing.T) {
	labels := map[string]string{"env": "dev", "team": "a", "stands.dev/owner": "t"}
	cases := []struct {
		sel   string
		match bool
		bad   bool
	}{
		{sel: "env=dev", match: true}, {sel: "env==dev", match: true}, {sel: "env!=prod", match: true},
		{sel: "env!=dev"}, {sel: "env", match: true}, {sel: "missing"}, {sel: "!missing", match: true},
		{sel: "!env"}, {sel: "env in (dev,prod)", match: true}, {sel: "env in (prod)"},
		{sel: "env notin (prod,test)", match: true}, {sel: "env notin (dev)"},
		{sel: "env=dev,team in (a, b),stands.dev/owner", match: true}, {sel: "env=dev,team=b"},
		{sel: "missing!=x", match: true}, {sel: "missing notin (x)", match: true},
		{sel: "env=dev,", bad: true}, {sel: "env in dev", bad: true}, {sel: "bad key!=x", bad: true}, {sel: "=x", bad: true},
	}
	for _, c := range cases {
		s, err := parseSelector(c.sel)
		if (err != nil) != c.bad {
			t.Errorf("%q: err %v, want error %v", c.sel, err, c.bad)
			continue
		}
		if err == nil && s.matches(labels) != c.match {
			t.Errorf("%q matches %v, want %v", c.sel, !c.match, c.match)
		}
	}
}

// TestOtherEndpoints covers the rest of the surface: SSH key lookup, update and delete; network
// update and delete (which detaches servers); catalog and action lookups by id; a server's action
// list; reboot, reset and shutdown.
func TestOtherEndpoints(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	key, nw := e.fixture(t)
	if k := must(e.client.SSHKey.GetByFingerprint(ctx, key.Fingerprint)); k == nil || k.ID != key.ID {
		t.Errorf("key by fingerprint: %+v", k)
	}
	if _, _, err := e.client.SSHKey.Create(ctx, hcloud.SSHKeyCreateOpts{Name: "stands-admin", PublicKey: sshPublicKey(t)}); !hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) {
		t.Errorf("duplicate key name: %v", err)
	}
	if _, _, err := e.client.SSHKey.Create(ctx, hcloud.SSHKeyCreateOpts{Name: "bad", PublicKey: "ssh-ed25519 not-a-key"}); !hcloud.IsError(err, hcloud.ErrorCodeInvalidInput) {
		t.Errorf("invalid key: %v", err)
	}
	if k := must(e.client.SSHKey.Update(ctx, key, hcloud.SSHKeyUpdateOpts{Labels: map[string]string{"a": "b"}})); k.Labels["a"] != "b" {
		t.Errorf("key labels: %v", k.Labels)
	}
	if _, err := e.client.SSHKey.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if k := must(e.client.SSHKey.GetByID(ctx, key.ID)); k != nil {
		t.Errorf("deleted key still there")
	}

	res := e.createServer(t, "n1", nil, nw)
	if err := e.client.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context, *hcloud.Server) (*hcloud.Action, *hcloud.Response, error){
		"reboot_server": e.client.Server.Reboot, "reset_server": e.client.Server.Reset, "shutdown_server": e.client.Server.Shutdown,
	} {
		a := must(call(ctx, res.Server))
		if a.Command != name {
			t.Errorf("action command %q, want %q", a.Command, name)
		}
		if err := e.client.Action.WaitFor(ctx, a); err != nil {
			t.Fatal(err)
		}
		if got := must(e.client.Action.GetByID(ctx, a.ID)); got.Status != hcloud.ActionStatusSuccess || got.Progress != 100 || got.Finished.IsZero() {
			t.Errorf("action by id: %+v", got)
		}
	}
	acts, err := e.client.Server.Action.AllFor(ctx, res.Server, hcloud.ActionListOpts{})
	if err != nil || len(acts) != 6 { // create, start, attach, reboot, reset, shutdown
		t.Errorf("actions of the server: %d, %v", len(acts), err)
	}
	if all, err := e.client.Server.Action.All(ctx, hcloud.ActionListOpts{Status: []hcloud.ActionStatus{hcloud.ActionStatusSuccess}}); err != nil || len(all) != 6 {
		t.Errorf("actions of all servers: %d, %v", len(all), err)
	}
	if a := must(e.client.Server.Action.GetByID(ctx, acts[0].ID)); a == nil || a.Command != "create_server" {
		t.Errorf("server action by id: %+v", a)
	}

	if n := must(e.client.Network.Update(ctx, nw, hcloud.NetworkUpdateOpts{Name: "renamed", Labels: map[string]string{"x": "y"}})); n.Name != "renamed" || n.Labels["x"] != "y" {
		t.Errorf("network update: %+v", n)
	}
	if _, err := e.client.Network.Delete(ctx, nw); err != nil {
		t.Fatal(err)
	}
	if n := must(e.client.Network.GetByID(ctx, nw.ID)); n != nil {
		t.Error("deleted network still there")
	}
	if s := must(e.client.Server.GetByID(ctx, res.Server.ID)); len(s.PrivateNet) != 0 {
		t.Errorf("server still attached to a deleted network: %+v", s.PrivateNet)
	}

	if st := must(e.client.ServerType.GetByID(ctx, 104)); st == nil || st.Name != "cx22" {
		t.Errorf("server type 104: %+v", st)
	}
	if img := must(e.client.Image.GetByID(ctx, 114690387)); img == nil || img.Name != "debian-12" || img.Architecture != hcloud.ArchitectureX86 {
		t.Errorf("image by id: %+v", img)
	}
	if loc := must(e.client.Location.GetByID(ctx, 3)); loc == nil || loc.Name != "hel1" || loc.NetworkZone != hcloud.NetworkZoneEUCentral {
		t.Errorf("location 3: %+v", loc)
	}
	if _, _, err := e.client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "us", ServerType: &hcloud.ServerType{Name: "cx22"},
		Image: &hcloud.Image{Name: "debian-12"}, Location: &hcloud.Location{Name: "ash"}}); !hcloud.IsError(err, hcloud.ErrorCode("unsupported_location_for_server_type")) {
		t.Errorf("cx22 in ash: %v", err)
	}
}

// TestChangeType: a resize keeps the server (id, addresses); it needs the server off; a smaller type
// takes the server only while its disk was not upgraded; another architecture never.
func TestChangeType(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	res := e.createServer(t, "resize", nil)
	if err := e.client.Action.WaitFor(ctx, res.Action); err != nil {
		t.Fatal(err)
	}
	srv := res.Server
	change := func(typ string, upgrade bool) error {
		a, _, err := e.client.Server.ChangeType(ctx, srv, hcloud.ServerChangeTypeOpts{ServerType: &hcloud.ServerType{Name: typ}, UpgradeDisk: upgrade})
		if err != nil {
			return err
		}
		return e.client.Action.WaitFor(ctx, a)
	}
	if err := change("cx32", false); !hcloud.IsError(err, hcloud.ErrorCodeServerNotStopped) {
		t.Errorf("resize of a running server: %v", err)
	}
	off := must(e.client.Server.Poweroff(ctx, srv))
	if err := e.client.Action.WaitFor(ctx, off); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ     string
		upgrade bool
		code    hcloud.ErrorCode // "" succeeds
		disk    int
	}{
		{"cx32", false, "", 40}, // up, disk kept
		{"cx22", false, "", 40}, // and down again
		{"cax11", false, hcloud.ErrorCodeInvalidServerType, 40},
		{"cx32", true, "", 80}, // up with the disk
		{"cx22", false, hcloud.ErrorCodeInvalidServerType, 80},
	} {
		err := change(c.typ, c.upgrade)
		if (c.code == "" && err != nil) || (c.code != "" && !hcloud.IsError(err, c.code)) {
			t.Errorf("to %s (upgrade disk %v): %v, want %q", c.typ, c.upgrade, err, c.code)
		}
		if s := must(e.client.Server.GetByID(ctx, srv.ID)); s.PrimaryDiskSize != c.disk || s.PublicNet.IPv4.IP.String() != srv.PublicNet.IPv4.IP.String() {
			t.Errorf("after %s: disk %d, want %d; address %s", c.typ, s.PrimaryDiskSize, c.disk, s.PublicNet.IPv4.IP)
		}
	}
}
