package hcloudsim

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// hostname is what the API accepts as a server name (RFC 1123, at most 63 characters per label).
var hostname = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)

const maxUserData = 32 * 1024

func (s *Sim) routeServers(m string, parts []string, q map[string][]string, body []byte) (any, *Error) {
	switch {
	case len(parts) == 0 && m == http.MethodGet:
		return s.listServers(q)
	case len(parts) == 0 && m == http.MethodPost:
		return s.createServer(body)
	}
	if parts[0] == "actions" && m == http.MethodGet {
		// /servers/actions[/{id}]: actions of any server.
		isServer := func(a *action) bool {
			return slices.ContainsFunc(a.Resources, func(r schema.ActionResourceReference) bool { return r.Type == "server" })
		}
		if len(parts) == 2 {
			aid, ok := parseID(parts[1])
			if a := s.st.Actions[aid]; ok && a != nil && isServer(a) {
				return schema.ActionGetResponse{Action: a.schema()}, nil
			}
			return nil, notFound("action", parts[1])
		}
		return s.listActions(q, isServer)
	}
	id, ok := parseID(parts[0])
	srv := s.st.Servers[id]
	if !ok || srv == nil {
		return nil, notFound("server", parts[0])
	}
	switch {
	case len(parts) == 1 && m == http.MethodGet:
		return schema.ServerGetResponse{Server: s.serverSchema(srv)}, nil
	case len(parts) == 1 && m == http.MethodPut:
		return s.updateServer(srv, body)
	case len(parts) == 1 && m == http.MethodDelete:
		return s.deleteServer(srv)
	case len(parts) == 2 && parts[1] == "actions" && m == http.MethodGet:
		return s.listActions(q, func(a *action) bool {
			return slices.ContainsFunc(a.Resources, func(r schema.ActionResourceReference) bool { return r.Type == "server" && r.ID == id })
		})
	case len(parts) == 3 && parts[1] == "actions" && m == http.MethodPost:
		return s.serverAction(srv, parts[2], body)
	}
	return nil, apiErr(http.StatusNotFound, "not_found", "not found")
}

func (s *Sim) listServers(q map[string][]string) (any, *Error) {
	sel, e := filterLabels(q)
	if e != nil {
		return nil, e
	}
	name, statuses := first(q, "name"), q["status"]
	var list []schema.Server
	for _, srv := range s.sortedServers() {
		if (name != "" && srv.Name != name) || !sel.matches(srv.Labels) || (len(statuses) > 0 && !slices.Contains(statuses, srv.Status)) {
			continue
		}
		list = append(list, s.serverSchema(srv))
	}
	lo, hi, meta, e := page(q, len(list))
	if e != nil {
		return nil, e
	}
	return map[string]any{"servers": nonNil(list[lo:hi]), "meta": meta}, nil
}

func (s *Sim) sortedServers() []*server {
	l := make([]*server, 0, len(s.st.Servers))
	for _, srv := range s.st.Servers {
		l = append(l, srv)
	}
	slices.SortFunc(l, func(a, b *server) int { return int(a.ID - b.ID) })
	return l
}

func (s *Sim) serverSchema(srv *server) schema.Server {
	var st serverTypeInfo
	for _, t := range serverTypes {
		if t.name == srv.ServerType {
			st = t
		}
	}
	var loc locationInfo
	for _, l := range locations {
		if l.name == srv.Location {
			loc = l
		}
	}
	out := schema.Server{
		ID: srv.ID, Name: srv.Name, Status: srv.Status, Created: srv.Created, ServerType: st.schema(),
		IncludedTraffic: 21990232555520, Location: loc.schema(), Labels: srv.Labels, Volumes: []int64{},
		LoadBalancers: []int64{}, PrimaryDiskSize: cmp.Or(srv.Disk, st.disk), Locked: s.busy(srv.ID), PrivateNet: []schema.ServerPrivateNet{},
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for _, img := range images {
		if img.id == srv.Image {
			i := img.schema()
			out.Image = &i
		}
	}
	out.PublicNet.FloatingIPs = []int64{}
	out.PublicNet.Firewalls = []schema.ServerFirewall{}
	if srv.PublicIPv4 != "" {
		out.PublicNet.IPv4 = schema.ServerPublicNetIPv4{ID: srv.PublicIPv4ID, IP: srv.PublicIPv4, DNSPtr: "static." + srv.PublicIPv4 + ".clients.your-server.de"}
	}
	for _, p := range srv.Private {
		out.PrivateNet = append(out.PrivateNet, schema.ServerPrivateNet{Network: p.Network, IP: p.IP, AliasIPs: []string{}, MACAddress: p.MAC})
	}
	return out
}

func (s *Sim) createServer(body []byte) (any, *Error) {
	var req schema.ServerCreateRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	srv, e := s.checkCreate(req)
	if e != nil {
		return nil, e
	}
	zone := zoneOf(srv.Location)
	for _, nid := range req.Networks {
		n := s.st.Networks[nid]
		if n == nil {
			return nil, invalidInput("networks", fmt.Sprintf("network %d not found", nid))
		}
		ip, e := s.allocate(n, zone, "")
		if e != nil {
			return nil, e
		}
		srv.Private = append(srv.Private, privateNet{Network: nid, IP: ip, MAC: mac()})
	}
	spec := srv.spec(s.st)
	spec.WantIPv4 = req.PublicNet == nil || req.PublicNet.EnableIPv4
	ip, err := s.machine.Create(context.Background(), spec)
	if err != nil {
		return nil, apiErr(http.StatusInternalServerError, "server_error", "create server: "+err.Error())
	}
	srv.PublicIPv4 = ip
	if ip != "" {
		srv.PublicIPv4ID = s.st.id()
	}
	s.st.Servers[srv.ID] = srv
	start := req.StartAfterCreate == nil || *req.StartAfterCreate
	then := "off"
	if start {
		then = "running"
	}
	create := s.newAction("create_server", then, serverRef(srv.ID))
	resp := schema.ServerCreateResponse{Server: s.serverSchema(srv), Action: create.schema(), NextActions: []schema.Action{}}
	if start {
		resp.NextActions = append(resp.NextActions, s.newAction("start_server", "", serverRef(srv.ID)).schema())
	}
	for _, p := range srv.Private {
		resp.NextActions = append(resp.NextActions, s.newAction("attach_to_network", "", serverRef(srv.ID), schema.ActionResourceReference{ID: p.Network, Type: "network"}).schema())
	}
	if len(req.SSHKeys) == 0 {
		pw := randomHex(10)
		resp.RootPassword = &pw
	}
	return resp, nil
}

// checkCreate applies Hetzner's rules to a create request (name, type, location, image, user data,
// labels, SSH keys) and returns the server it would make, without its networks and address.
func (s *Sim) checkCreate(req schema.ServerCreateRequest) (*server, *Error) {
	if req.Name == "" || !hostname.MatchString(req.Name) {
		return nil, invalidInput("name", "must be a valid hostname")
	}
	for _, srv := range s.st.Servers {
		if srv.Name == req.Name {
			return nil, uniqueness("name", "server name is already used")
		}
	}
	st, ok := lookupServerType(req.ServerType)
	if !ok {
		return nil, invalidInput("server_type", "server type not found")
	}
	loc := cmp.Or(req.Location, "fsn1")
	// The location is sent by name or, as hcloud-go does when it knows it, by id.
	li := slices.IndexFunc(locations, func(l locationInfo) bool { return l.name == loc || strconv.FormatInt(l.id, 10) == loc })
	if li < 0 {
		return nil, invalidInput("location", "location not found")
	}
	loc = locations[li].name
	if !st.availableIn(loc) {
		return nil, apiErr(http.StatusPreconditionFailed, "unsupported_location_for_server_type", fmt.Sprintf("server type %s is not available in %s", st.name, loc))
	}
	img, ok := lookupImage(req.Image, st.arch)
	if !ok {
		return nil, invalidInput("image", "image not found")
	}
	if len(req.UserData) > maxUserData {
		return nil, invalidInput("user_data", "user data is limited to 32 KiB")
	}
	labels := map[string]string{}
	if req.Labels != nil {
		labels = *req.Labels
		if err := validLabels(labels); err != nil {
			return nil, invalidInput("labels", err.Error())
		}
	}
	for _, k := range req.SSHKeys {
		if s.st.SSHKeys[k] == nil {
			return nil, invalidInput("ssh_keys", fmt.Sprintf("ssh key %d not found", k))
		}
	}
	return &server{ID: s.st.id(), Name: req.Name, Status: "initializing", Created: s.now(), ServerType: st.name,
		Image: img.id, Location: loc, UserData: req.UserData, Labels: labels, SSHKeys: req.SSHKeys}, nil
}

func (s *Sim) updateServer(srv *server, body []byte) (any, *Error) {
	var req schema.ServerUpdateRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	if req.Name != "" && req.Name != srv.Name {
		if !hostname.MatchString(req.Name) {
			return nil, invalidInput("name", "must be a valid hostname")
		}
		for _, o := range s.st.Servers {
			if o.Name == req.Name {
				return nil, uniqueness("name", "server name is already used")
			}
		}
		srv.Name = req.Name
	}
	if req.Labels != nil {
		if err := validLabels(*req.Labels); err != nil {
			return nil, invalidInput("labels", err.Error())
		}
		srv.Labels = *req.Labels
	}
	return schema.ServerUpdateResponse{Server: s.serverSchema(srv)}, nil
}

// changeType is Hetzner's resize with its rules: the server must be off; the type must exist and have
// the server's architecture; the disk is kept (upgrade_disk false, so a downgrade stays possible) or
// grown to the type's; a type whose disk is smaller than the server's cannot take it.
func (s *Sim) changeType(srv *server, body []byte) (any, *Error) {
	var req schema.ServerActionChangeTypeRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	var to, from *serverTypeInfo
	for i, t := range serverTypes {
		if t.name == req.ServerType.Name || (req.ServerType.ID != 0 && t.id == req.ServerType.ID) {
			to = &serverTypes[i]
		}
		if t.name == srv.ServerType {
			from = &serverTypes[i]
		}
	}
	switch {
	case to == nil:
		return nil, invalidInput("server_type", "server type not found")
	case srv.Status != "off":
		return nil, apiErr(http.StatusConflict, "server_not_stopped", "the server must be stopped to change its type")
	case from != nil && from.arch != to.arch:
		return nil, apiErr(http.StatusUnprocessableEntity, "invalid_server_type", "the server type has another architecture")
	}
	disk := srv.Disk
	if disk == 0 && from != nil {
		disk = from.disk
	}
	if to.disk < disk {
		return nil, apiErr(http.StatusUnprocessableEntity, "invalid_server_type",
			fmt.Sprintf("the server's disk (%d GB) is larger than the type's (%d GB): a downgrade is possible only when the disk was not upgraded", disk, to.disk))
	}
	srv.ServerType, srv.Disk = to.name, disk
	if req.UpgradeDisk {
		srv.Disk = to.disk
	}
	a := s.newAction("change_server_type", "", serverRef(srv.ID))
	return schema.ServerActionChangeTypeResponse{Action: a.schema()}, nil
}

func (s *Sim) deleteServer(srv *server) (any, *Error) {
	if err := s.machine.Delete(context.Background(), srv.ID); err != nil {
		return nil, apiErr(http.StatusInternalServerError, "server_error", "delete server: "+err.Error())
	}
	a := s.newAction("delete_server", "", serverRef(srv.ID))
	delete(s.st.Servers, srv.ID)
	return schema.ServerDeleteResponse{Action: a.schema()}, nil
}

func (s *Sim) serverAction(srv *server, name string, body []byte) (any, *Error) {
	power := map[string]struct {
		op      PowerOp
		command string
		then    string
	}{
		"poweron":  {PowerOn, "start_server", "running"},
		"poweroff": {PowerOff, "stop_server", "off"},
		"shutdown": {PowerOff, "shutdown_server", "off"},
		"reboot":   {Reboot, "reboot_server", "running"},
		"reset":    {Reboot, "reset_server", "running"},
	}
	if s.busy(srv.ID) {
		return nil, apiErr(http.StatusLocked, "locked", "server is locked by a running action")
	}
	if p, ok := power[name]; ok {
		if err := s.machine.Power(context.Background(), srv.ID, p.op); err != nil {
			return nil, apiErr(http.StatusInternalServerError, "server_error", name+": "+err.Error())
		}
		switch name {
		case "poweroff", "shutdown":
			srv.Status = "stopping"
		case "poweron":
			srv.Status = "starting"
		}
		return map[string]any{"action": s.newAction(p.command, p.then, serverRef(srv.ID)).schema()}, nil
	}
	switch name {
	case "change_type":
		return s.changeType(srv, body)
	case "attach_to_network":
		var req schema.ServerActionAttachToNetworkRequest
		if e := decode(body, &req); e != nil {
			return nil, e
		}
		n := s.st.Networks[req.Network]
		if n == nil {
			return nil, notFound("network", req.Network)
		}
		if slices.ContainsFunc(srv.Private, func(p privateNet) bool { return p.Network == n.ID }) {
			return nil, apiErr(http.StatusConflict, "server_already_attached", "server is already attached to this network")
		}
		want := ""
		if req.IP != nil {
			want = *req.IP
		}
		ip, e := s.allocate(n, zoneOf(srv.Location), want)
		if e != nil {
			return nil, e
		}
		srv.Private = append(srv.Private, privateNet{Network: n.ID, IP: ip, MAC: mac()})
		a := s.newAction("attach_to_network", "", serverRef(srv.ID), schema.ActionResourceReference{ID: n.ID, Type: "network"})
		return schema.ServerActionAttachToNetworkResponse{Action: a.schema()}, nil
	case "detach_from_network":
		var req schema.ServerActionDetachFromNetworkRequest
		if e := decode(body, &req); e != nil {
			return nil, e
		}
		i := slices.IndexFunc(srv.Private, func(p privateNet) bool { return p.Network == req.Network })
		if i < 0 {
			return nil, apiErr(http.StatusConflict, "server_not_attached_to_network", "server is not attached to this network")
		}
		srv.Private = slices.Delete(srv.Private, i, i+1)
		a := s.newAction("detach_from_network", "", serverRef(srv.ID), schema.ActionResourceReference{ID: req.Network, Type: "network"})
		return schema.ServerActionDetachFromNetworkResponse{Action: a.schema()}, nil
	}
	return nil, apiErr(http.StatusNotFound, "not_found", "action "+name+" not found")
}

func lookupServerType(v schema.IDOrName) (serverTypeInfo, bool) {
	for _, t := range serverTypes {
		if (v.Name != "" && t.name == v.Name) || (v.ID != 0 && t.id == v.ID) {
			return t, true
		}
	}
	return serverTypeInfo{}, false
}

func lookupImage(v schema.IDOrName, arch string) (imageInfo, bool) {
	for _, i := range images {
		if (v.ID != 0 && i.id == v.ID) || (v.Name != "" && i.name == v.Name && i.arch == arch) {
			return i, true
		}
	}
	return imageInfo{}, false
}

func zoneOf(loc string) string {
	for _, l := range locations {
		if l.name == loc {
			return l.zone
		}
	}
	return ""
}

// mac is a locally administered unicast MAC address, as Hetzner gives private interfaces.
func mac() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	b[0] = 0x86
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
