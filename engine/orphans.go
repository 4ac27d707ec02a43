package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optlist"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/engine/provider"
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
func (e *Engine) Orphans(ctx context.Context) ([]Orphan, error) {
	ws, err := auto.NewLocalWorkspace(ctx, auto.EnvVars(e.envVars()), auto.Pulumi(e.cmd), auto.PulumiHome(e.home))
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
		st, err := e.stack(ctx, StackRef{Project: parts[1], Env: parts[2]}, func(*pulumi.Context) error { return nil }, false)
		if err != nil {
			return nil, fmt.Errorf("open stack %s: %w", s.Name, err)
		}
		ids, err := serverIDs(ctx, st)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			known[id] = true
		}
	}
	servers, err := e.hcloud().Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: provider.LabelManagedBy + "=" + provider.ManagedByValue}})
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

// serverIDs reads the Hetzner ids of a stack's servers from its deployment.
func serverIDs(ctx context.Context, st auto.Stack) ([]int64, error) {
	dep, err := st.Export(ctx)
	if err != nil {
		return nil, fmt.Errorf("export stack %s: %w", st.Name(), err)
	}
	var d struct {
		Resources []struct {
			Type    string         `json:"type"`
			ID      string         `json:"id"`
			Outputs map[string]any `json:"outputs"`
		} `json:"resources"`
	}
	if len(dep.Deployment) > 0 {
		if err := json.Unmarshal(dep.Deployment, &d); err != nil {
			return nil, fmt.Errorf("read deployment of %s: %w", st.Name(), err)
		}
	}
	var ids []int64
	for _, r := range d.Resources {
		if r.Type != provider.ServerType {
			continue
		}
		if f, ok := r.Outputs["serverId"].(float64); ok {
			ids = append(ids, int64(f))
		}
	}
	return ids, nil
}
