package engine

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// PreviewNew plans a stand that has no stack yet without creating one in the backend: the preview
// runs against a throwaway file:// backend that is removed afterwards (DESIGN.md: previews never
// create stacks or resources in the production backend). Hetzner is only read.
func (e *Engine) PreviewNew(ctx context.Context, in stands.Input) (_ *stands.Result, err error) {
	ctx, done := e.scoped(ctx)
	defer done()
	defer blindError(in, &err)
	defer classify(&err)
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

// Prices reads the server types' prices.
func (e *Engine) Prices(ctx context.Context) (_ stands.Prices, err error) {
	defer classify(&err)
	hc, err := e.hcloud()
	if err != nil {
		return nil, err
	}
	types, err := hc.ServerType.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("list server types: %w", err)
	}
	out := stands.Prices{}
	for _, t := range types {
		out[t.Name] = map[string]stands.Price{}
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
			out[t.Name][p.Location.Name] = stands.Price{Monthly: gross, Currency: cur}
		}
	}
	return out, nil
}

// StandServers lists the servers carrying a stand's labels (a read: plans use it to price a destroy).
func (e *Engine) StandServers(ctx context.Context, standID string) (_ []stands.Server, err error) {
	defer classify(&err)
	hc, err := e.hcloud()
	if err != nil {
		return nil, err
	}
	servers, err := hc.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{
		LabelSelector: provider.LabelManagedBy + "=" + provider.ManagedByValue + "," + provider.LabelStand + "=" + standID}})
	if err != nil {
		return nil, fmt.Errorf("list servers of %s: %w", standID, err)
	}
	var out []stands.Server
	for _, s := range servers {
		srv := stands.Server{Name: s.Name}
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
