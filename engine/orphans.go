package engine

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optlist"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Orphan is a server carrying the reconciler's labels that no stack of the backend holds. Orphans are
// reported, never deleted: a human decides.
type Orphan struct {
	ServerID int64  `json:"serverId"`
	Name     string `json:"name"`
	Stand    string `json:"stand"`
	Created  string `json:"created"`
}

// Orphans lists the owned servers absent from every stack of the backend.
func (e *Engine) Orphans(ctx context.Context) (_ []Orphan, err error) {
	defer classify(&err)
	ctx, done := e.scoped(ctx)
	defer done()
	_, opts, err := e.workspace(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	stacks, err := ws.ListStacks(ctx, optlist.All())
	if err != nil {
		return nil, fmt.Errorf("list stacks: %w", err)
	}
	known := map[int64]bool{}
	for _, s := range stacks {
		parts := strings.Split(s.Name, "/")
		if len(parts) != 3 {
			continue
		}
		st, err := e.stack(ctx, stands.StackRef{Project: parts[1], Env: parts[2]}, func(*pulumi.Context) error { return nil }, false)
		if err != nil {
			return nil, fmt.Errorf("open stack %s: %w", s.Name, err)
		}
		dep, err := exportDeployment(ctx, st)
		if err != nil {
			return nil, err
		}
		for _, r := range dep.Resources {
			if f, ok := r.Outputs["serverId"].(float64); ok && r.Type == provider.ServerType {
				known[int64(f)] = true
			}
		}
	}
	hc, err := e.hcloud()
	if err != nil {
		return nil, err
	}
	servers, err := hc.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: provider.LabelManagedBy + "=" + provider.ManagedByValue}})
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	var out []Orphan
	for _, s := range servers {
		if !known[s.ID] {
			out = append(out, Orphan{ServerID: s.ID, Name: s.Name, Stand: s.Labels[provider.LabelStand], Created: s.Created.UTC().Format("2006-01-02T15:04:05Z")})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ServerID < out[j].ServerID })
	return out, nil
}
