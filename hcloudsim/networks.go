package hcloudsim

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

func (s *Sim) routeNetworks(m string, parts []string, q map[string][]string, body []byte) (any, *Error) {
	switch {
	case len(parts) == 0 && m == http.MethodGet:
		return s.listNetworks(q)
	case len(parts) == 0 && m == http.MethodPost:
		return s.createNetwork(body)
	}
	id, ok := parseID(parts[0])
	n := s.st.Networks[id]
	if !ok || n == nil {
		return nil, notFound("network", parts[0])
	}
	switch {
	case len(parts) == 1 && m == http.MethodGet:
		return schema.NetworkGetResponse{Network: s.networkSchema(n)}, nil
	case len(parts) == 1 && m == http.MethodPut:
		var req schema.NetworkUpdateRequest
		if e := decode(body, &req); e != nil {
			return nil, e
		}
		if req.Name != "" {
			if other := s.networkByName(req.Name); other != nil && other != n {
				return nil, uniqueness("name", "network name is already used")
			}
			n.Name = req.Name
		}
		if req.Labels != nil {
			if err := validLabels(*req.Labels); err != nil {
				return nil, invalidInput("labels", err.Error())
			}
			n.Labels = *req.Labels
		}
		return schema.NetworkUpdateResponse{Network: s.networkSchema(n)}, nil
	case len(parts) == 1 && m == http.MethodDelete:
		// Deleting a network detaches its servers.
		for _, srv := range s.st.Servers {
			srv.Private = slices.DeleteFunc(srv.Private, func(p privateNet) bool { return p.Network == n.ID })
		}
		delete(s.st.Networks, n.ID)
		return nil, nil
	}
	return nil, apiErr(http.StatusNotFound, "not_found", "not found")
}

func (s *Sim) networkByName(name string) *network {
	for _, n := range s.st.Networks {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func (s *Sim) listNetworks(q map[string][]string) (any, *Error) {
	sel, e := filterLabels(q)
	if e != nil {
		return nil, e
	}
	name := first(q, "name")
	var list []schema.Network
	ids := make([]int64, 0, len(s.st.Networks))
	for id := range s.st.Networks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := s.st.Networks[id]
		if (name != "" && n.Name != name) || !sel.matches(n.Labels) {
			continue
		}
		list = append(list, s.networkSchema(n))
	}
	lo, hi, meta, e := page(q, len(list))
	if e != nil {
		return nil, e
	}
	return map[string]any{"networks": nonNil(list[lo:hi]), "meta": meta}, nil
}

func (s *Sim) networkSchema(n *network) schema.Network {
	out := schema.Network{ID: n.ID, Name: n.Name, Created: n.Created, IPRange: n.IPRange, Subnets: n.Subnets,
		Routes: []schema.NetworkRoute{}, Servers: []int64{}, LoadBalancers: []int64{}, Labels: n.Labels}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for _, srv := range s.sortedServers() {
		if slices.ContainsFunc(srv.Private, func(p privateNet) bool { return p.Network == n.ID }) {
			out.Servers = append(out.Servers, srv.ID)
		}
	}
	return out
}

func (s *Sim) createNetwork(body []byte) (any, *Error) {
	var req schema.NetworkCreateRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	if req.Name == "" {
		return nil, invalidInput("name", "is required")
	}
	if s.networkByName(req.Name) != nil {
		return nil, uniqueness("name", "network name is already used")
	}
	rng, err := netip.ParsePrefix(req.IPRange)
	if err != nil || !rng.Addr().Is4() || !rng.Addr().IsPrivate() || rng.Masked() != rng || rng.Bits() > 24 {
		return nil, invalidInput("ip_range", "must be a private IPv4 network of /24 or larger, e.g. 10.0.0.0/16")
	}
	n := &network{ID: s.st.id(), Name: req.Name, IPRange: rng.String(), Created: s.now(), Labels: map[string]string{}}
	if req.Labels != nil {
		if err := validLabels(*req.Labels); err != nil {
			return nil, invalidInput("labels", err.Error())
		}
		n.Labels = *req.Labels
	}
	gateway := rng.Addr().Next().String()
	for _, sub := range req.Subnets {
		sp, err := netip.ParsePrefix(sub.IPRange)
		if err != nil || sp.Masked() != sp || !rng.Contains(sp.Addr()) || sp.Bits() < rng.Bits() {
			return nil, invalidInput("subnets", fmt.Sprintf("subnet %q must lie inside %s", sub.IPRange, rng))
		}
		if sub.Type == "" {
			sub.Type = "cloud"
		}
		if sub.NetworkZone == "" {
			return nil, invalidInput("subnets", "network_zone is required")
		}
		sub.Gateway = gateway
		n.Subnets = append(n.Subnets, sub)
	}
	s.st.Networks[n.ID] = n
	return schema.NetworkCreateResponse{Network: s.networkSchema(n)}, nil
}

// allocate picks a private IP for a server in a network: the requested one when given (it must be
// free and inside a subnet of the server's network zone), else the first free address of the first
// such subnet. The network's first address is its gateway; subnet network and broadcast addresses are
// never handed out.
func (s *Sim) allocate(n *network, zone, want string) (string, *Error) {
	used := map[string]bool{}
	for _, srv := range s.st.Servers {
		for _, p := range srv.Private {
			if p.Network == n.ID {
				used[p.IP] = true
			}
		}
	}
	rng := netip.MustParsePrefix(n.IPRange)
	gateway := rng.Addr().Next()
	usable := func(sp netip.Prefix, a netip.Addr) bool {
		last := lastAddr(sp)
		return sp.Contains(a) && a != sp.Addr() && a != last && a != gateway
	}
	var subnets []netip.Prefix
	for _, sub := range n.Subnets {
		if sub.NetworkZone == zone {
			subnets = append(subnets, netip.MustParsePrefix(sub.IPRange))
		}
	}
	if len(subnets) == 0 {
		return "", apiErr(http.StatusUnprocessableEntity, "no_subnet_available", fmt.Sprintf("network %s has no subnet in network zone %s", n.Name, zone))
	}
	if want != "" {
		a, err := netip.ParseAddr(want)
		if err != nil {
			return "", invalidInput("ip", "not an IP address")
		}
		if !slices.ContainsFunc(subnets, func(sp netip.Prefix) bool { return usable(sp, a) }) || used[a.String()] {
			return "", apiErr(http.StatusConflict, "ip_not_available", fmt.Sprintf("IP %s is not available", want))
		}
		return a.String(), nil
	}
	for _, sp := range subnets {
		for a := sp.Addr().Next(); sp.Contains(a); a = a.Next() {
			if usable(sp, a) && !used[a.String()] {
				return a.String(), nil
			}
		}
	}
	return "", apiErr(http.StatusConflict, "ip_not_available", "no free IP in the network's subnets")
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
