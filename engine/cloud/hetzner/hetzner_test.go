package hetzner

import (
	"context"
	"testing"

	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestServerLifecycle drives the cloud through hcloudsim as the provider does: create a server on
// the network with the key, find it by name and labels, label it, resize it, delete it (twice: a
// server already gone is no error).
func TestServerLifecycle(t *testing.T) {
	h := testenv.StartHetzner(t, "cloud-test-token")
	c, ctx := New(h.Token, WithEndpoint(h.Endpoint)), context.Background()
	network, err := c.Network(ctx, "stands-net")
	if err != nil || network == nil || network.IPRange != "10.0.0.0/16" {
		t.Fatalf("network: %+v, %v", network, err)
	}
	if n, err := c.Network(ctx, "no-such-net"); n != nil || err != nil {
		t.Errorf("a network that does not exist: %+v, %v", n, err)
	}
	key, err := c.SSHKey(ctx, "stands-admin")
	if err != nil || key == nil {
		t.Fatalf("key: %+v, %v", key, err)
	}
	labels := map[string]string{"stands.dev/stand": "local_p_dev"}
	srv, err := c.CreateServer(ctx, cloud.CreateOptions{Name: "local-p-dev-main", Type: "cx22", Image: "debian-12", Location: "hel1",
		SSHKey: key, Labels: labels, Network: network})
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := srv.PrivateIP(network.ID); !ok || a.IP == "" || srv.PublicIPv4 == "" || srv.Type != "cx22" || srv.Location != "hel1" {
		t.Errorf("created: %+v", srv)
	}
	if got, err := c.ServerByName(ctx, "local-p-dev-main"); err != nil || got == nil || got.ID != srv.ID {
		t.Errorf("by name: %+v, %v", got, err)
	}
	if got, err := c.Servers(ctx, labels); err != nil || len(got) != 1 {
		t.Errorf("by labels: %v, %v", got, err)
	}
	if err := c.SetLabels(ctx, srv.ID, map[string]string{"stands.dev/stand": "other"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Servers(ctx, labels); len(got) != 0 {
		t.Errorf("relabelled, still found by its old labels: %v", got)
	}
	if err := c.Resize(ctx, srv.ID, "cx32"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Server(ctx, srv.ID); got == nil || got.Type != "cx32" {
		t.Errorf("after the resize: %+v", got)
	}
	if prices, err := c.Prices(ctx); err != nil || len(prices) == 0 {
		t.Errorf("prices: %v, %v", prices, err)
	}
	for range 2 {
		if err := c.DeleteServer(ctx, srv.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := c.Server(ctx, srv.ID); got != nil || err != nil {
		t.Errorf("after the delete: %+v, %v", got, err)
	}
}

// TestErrorsCarryTheirReason: the API's refusal of a token is ProviderAuth for the engine, without
// the engine knowing Hetzner's error codes.
func TestErrorsCarryTheirReason(t *testing.T) {
	h := testenv.StartHetzner(t, "cloud-test-token")
	_, err := New("not-the-token", WithEndpoint(h.Endpoint)).Servers(context.Background(), nil)
	if err == nil || reason.Of(err) != reason.ProviderAuth {
		t.Fatalf("a refused token: %v (%s)", err, reason.Of(err))
	}
}
