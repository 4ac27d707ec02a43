package engine

import (
	"context"
	"fmt"
	"os"
	"sort"

	"github.com/stands-engine/stands-reconciler/stands"
)

// PreviewNew plans a stand that has no stack yet without creating one in the backend: the preview
// runs against a throwaway file:// backend that is removed afterwards (docs/pr-workflow.md: previews never
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
	c, err := e.cloud()
	if err != nil {
		return nil, err
	}
	return c.Prices(ctx)
}

// StandServers lists the servers carrying a stand's labels (a read: plans use it to price a destroy).
func (e *Engine) StandServers(ctx context.Context, standID string) (_ []stands.Server, err error) {
	defer classify(&err)
	c, err := e.cloud()
	if err != nil {
		return nil, err
	}
	servers, err := c.Servers(ctx, standLabels(standID))
	if err != nil {
		return nil, fmt.Errorf("list servers of %s: %w", standID, err)
	}
	var out []stands.Server
	for _, s := range servers {
		out = append(out, stands.Server{Name: s.Name, ServerType: s.Type, Location: s.Location})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
