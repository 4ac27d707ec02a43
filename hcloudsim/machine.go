package hcloudsim

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
)

// Machine is what a simulated server is. The simulator calls it with its lock held, so Create must
// return quickly (start a VM, do not wait for it to boot).
type Machine interface {
	// Create brings up a server and returns its public IPv4 address ("" when the spec has none).
	Create(ctx context.Context, spec MachineSpec) (publicIPv4 string, err error)
	// Delete removes a server for good.
	Delete(ctx context.Context, id int64) error
	// Power switches a server on, off, or reboots it.
	Power(ctx context.Context, id int64, op PowerOp) error
	// Reattach takes over a server that existed before a simulator restart.
	Reattach(ctx context.Context, spec MachineSpec) error
	// ExposePort makes a port of the server reachable from the host and returns host:port.
	ExposePort(ctx context.Context, id int64, port int) (string, error)
}

// PowerOp is a power action.
type PowerOp string

// Power operations.
const (
	PowerOn  PowerOp = "on"
	PowerOff PowerOp = "off"
	Reboot   PowerOp = "reboot"
)

// MachineSpec is what the backend gets to know about a server.
type MachineSpec struct {
	ID          int64
	Name        string
	ServerType  string
	Image       string
	Location    string
	UserData    string
	Labels      map[string]string
	PublicIPv4  string // set on Reattach
	WantIPv4    bool
	PrivateNets []MachineNet
}

// MachineNet is a private network attachment.
type MachineNet struct {
	NetworkID int64
	IPRange   string
	IP        string
	MAC       string
}

func (srv *server) spec(st state) MachineSpec {
	img := ""
	for _, i := range images {
		if i.id == srv.Image {
			img = i.name
		}
	}
	sp := MachineSpec{ID: srv.ID, Name: srv.Name, ServerType: srv.ServerType, Image: img, Location: srv.Location,
		UserData: srv.UserData, Labels: srv.Labels, PublicIPv4: srv.PublicIPv4, WantIPv4: srv.PublicIPv4 != ""}
	for _, p := range srv.Private {
		rng := ""
		if n := st.Networks[p.Network]; n != nil {
			rng = n.IPRange
		}
		sp.PrivateNets = append(sp.PrivateNets, MachineNet{NetworkID: p.Network, IPRange: rng, IP: p.IP, MAC: p.MAC})
	}
	return sp
}

// RecordMachine is the default backend: servers are records with public addresses from the
// documentation ranges of RFC 5737 (198.51.100.0/24, then 203.0.113.0/24), which route nowhere.
type RecordMachine struct {
	mu      sync.Mutex
	servers map[int64]MachineSpec
	power   map[int64]bool
	used    map[string]bool
}

var recordRanges = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")}

func (m *RecordMachine) init() {
	if m.servers == nil {
		m.servers, m.power, m.used = map[int64]MachineSpec{}, map[int64]bool{}, map[string]bool{}
	}
}

// Create records the server and gives it a free documentation address.
func (m *RecordMachine) Create(_ context.Context, spec MachineSpec) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if spec.WantIPv4 {
		ip, err := m.freeIP()
		if err != nil {
			return "", err
		}
		spec.PublicIPv4 = ip
		m.used[ip] = true
	}
	m.servers[spec.ID] = spec
	m.power[spec.ID] = true
	return spec.PublicIPv4, nil
}

func (m *RecordMachine) freeIP() (string, error) {
	for _, r := range recordRanges {
		for a := r.Addr().Next(); r.Contains(a); a = a.Next() {
			if a.As4()[3] == 255 {
				break
			}
			if !m.used[a.String()] {
				return a.String(), nil
			}
		}
	}
	return "", fmt.Errorf("record machine: no free public address")
}

// Delete forgets the server.
func (m *RecordMachine) Delete(_ context.Context, id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	delete(m.used, m.servers[id].PublicIPv4)
	delete(m.servers, id)
	delete(m.power, id)
	return nil
}

// Power records the power state.
func (m *RecordMachine) Power(_ context.Context, id int64, op PowerOp) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if _, ok := m.servers[id]; !ok {
		return fmt.Errorf("record machine: no server %d", id)
	}
	m.power[id] = op != PowerOff
	return nil
}

// Reattach records a server known from the state file.
func (m *RecordMachine) Reattach(_ context.Context, spec MachineSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	m.servers[spec.ID] = spec
	m.power[spec.ID] = true
	if spec.PublicIPv4 != "" {
		m.used[spec.PublicIPv4] = true
	}
	return nil
}

// ExposePort is not possible for a record: there is nothing to reach.
func (m *RecordMachine) ExposePort(context.Context, int64, int) (string, error) {
	return "", fmt.Errorf("record machine: servers are records, no port can be reached")
}

// Servers returns the recorded servers, for tests.
func (m *RecordMachine) Servers() map[int64]MachineSpec {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int64]MachineSpec{}
	for k, v := range m.servers {
		out[k] = v
	}
	return out
}

// IsOn reports the recorded power state.
func (m *RecordMachine) IsOn(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.power[id]
}
