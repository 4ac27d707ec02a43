package engine

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/engine/provider"
)

// PreviewNew plans a stand that has no stack yet without creating one in the backend: the preview
// runs against a throwaway file:// backend that is removed afterwards (DESIGN.md: previews never
// create stacks or resources in the production backend). Hetzner is only read.
func (e *Engine) PreviewNew(ctx context.Context, in Stand) (*Result, error) {
	dir, err := os.MkdirTemp(e.cfg.WorkDir, "preview-")
	if err != nil {
		return nil, fmt.Errorf("throwaway backend: %w", err)
	}
	defer os.RemoveAll(dir)
	sandbox := *e
	sandbox.cfg.BackendURL = "file://" + dir
	sandbox.log = e.log.With("backend", "throwaway")
	res, err := sandbox.preview(ctx, in, "preview-new")
	if res != nil {
		res.Operation = "preview"
		res.Nodes, res.Connection, res.Masked = nil, nil, nil // nothing exists yet
	}
	return res, err
}

// Price is a server type's monthly list price at a location, gross, as the Hetzner API states it.
type Price struct {
	Monthly  float64
	Currency string
}

// Prices maps server type → location → monthly price, from the API's server types.
type Prices map[string]map[string]Price

// Of is the price of a server type at a location (false when unknown).
func (p Prices) Of(serverType, location string) (Price, bool) {
	pr, ok := p[serverType][location]
	return pr, ok
}

// Prices reads the server types' prices.
func (e *Engine) Prices(ctx context.Context) (Prices, error) {
	hc, err := e.hcloud()
	if err != nil {
		return nil, err
	}
	types, err := hc.ServerType.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("list server types: %w", err)
	}
	out := Prices{}
	for _, t := range types {
		out[t.Name] = map[string]Price{}
		for _, p := range t.Pricings {
			if p.Location == nil {
				continue
			}
			gross, err := strconv.ParseFloat(p.Monthly.Gross, 64)
			if err != nil {
				continue
			}
			cur := p.Monthly.Currency
			if cur == "" {
				cur = "EUR" // server type prices carry no currency; Hetzner bills in euros
			}
			out[t.Name][p.Location.Name] = Price{Monthly: gross, Currency: cur}
		}
	}
	return out, nil
}

// Server is a server of a stand as Hetzner has it.
type Server struct {
	Name       string `json:"name"`
	ServerType string `json:"serverType"`
	Location   string `json:"location"`
}

// StandServers lists the servers carrying a stand's labels (a read: plans use it to price a destroy).
func (e *Engine) StandServers(ctx context.Context, standID string) ([]Server, error) {
	hc, err := e.hcloud()
	if err != nil {
		return nil, err
	}
	servers, err := hc.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{
		LabelSelector: provider.LabelManagedBy + "=" + provider.ManagedByValue + "," + provider.LabelStand + "=" + standID}})
	if err != nil {
		return nil, fmt.Errorf("list servers of %s: %w", standID, err)
	}
	var out []Server
	for _, s := range servers {
		srv := Server{Name: s.Name}
		if s.ServerType != nil {
			srv.ServerType = s.ServerType.Name
		}
		if s.Location != nil {
			srv.Location = s.Location.Name
		}
		out = append(out, srv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
