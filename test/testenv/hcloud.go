package testenv

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
)

// Hetzner is a simulated Hetzner project, served on 127.0.0.1.
type Hetzner struct {
	Sim      *hcloudsim.Sim
	Machine  *hcloudsim.RecordMachine
	Endpoint string // for hcloud.WithEndpoint / STANDS_CLOUD_ENDPOINT
	Token    string
	Client   *hcloud.Client
}

// StartHetzner serves hcloudsim with what a project holds before any stand exists, as the example
// stands expect it: the network "stands-net" (10.0.0.0/16, subnet 10.0.1.0/24 in eu-central) and the
// admin SSH key "stands-admin".
// Options are applied after the defaults (token, a 20 ms action delay, a RecordMachine).
func StartHetzner(t testing.TB, token string, opts ...hcloudsim.Option) *Hetzner {
	t.Helper()
	m := &hcloudsim.RecordMachine{}
	opts = append([]hcloudsim.Option{hcloudsim.WithToken(token), hcloudsim.WithActionDelay(20 * time.Millisecond), hcloudsim.WithMachine(m)}, opts...)
	sim, err := hcloudsim.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := hcloudsim.Listen(sim, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	h := &Hetzner{Sim: sim, Machine: m, Endpoint: l.Endpoint, Token: token, Client: hcloud.NewClient(hcloud.WithEndpoint(l.Endpoint), hcloud.WithToken(token))}
	ctx := context.Background()
	_, rng, _ := net.ParseCIDR("10.0.0.0/16")
	_, sub, _ := net.ParseCIDR("10.0.1.0/24")
	if _, _, err := h.Client.Network.Create(ctx, hcloud.NetworkCreateOpts{Name: "stands-net", IPRange: rng,
		Subnets: []hcloud.NetworkSubnet{{Type: hcloud.NetworkSubnetTypeCloud, IPRange: sub, NetworkZone: hcloud.NetworkZoneEUCentral}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Client.SSHKey.Create(ctx, hcloud.SSHKeyCreateOpts{Name: "stands-admin",
		PublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk7bbrL7xNWSKbN5I2aE9UFLcB0dKlYuOXl4d9q0KZb admin"}); err != nil {
		t.Fatal(err)
	}
	return h
}

// Servers returns the project's servers by name.
func (h *Hetzner) Servers(t testing.TB) map[string]*hcloud.Server {
	t.Helper()
	all, err := h.Client.Server.All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*hcloud.Server{}
	for _, s := range all {
		out[s.Name] = s
	}
	return out
}
