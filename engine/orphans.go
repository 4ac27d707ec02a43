package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

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

// Orphans lists the owned servers absent from every stack of the backend. The stacks are read from
// the backend's storage, as the inventory reads them: no Pulumi process, whatever their number.
func (e *Engine) Orphans(ctx context.Context) (_ []Orphan, err error) {
	defer classify(&err)
	known, err := e.stackServers(ctx)
	if err != nil {
		return nil, err
	}
	c, err := e.cloud()
	if err != nil {
		return nil, err
	}
	servers, err := c.Servers(ctx, map[string]string{provider.LabelManagedBy: provider.ManagedByValue})
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

// stackServers is the id of every server some stack of the backend records.
func (e *Engine) stackServers(ctx context.Context) (map[int64]bool, error) {
	b, done, err := e.openBackend(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	objs, err := listObjects(ctx, b, stacksDir)
	if err != nil {
		return nil, err
	}
	known := map[int64]bool{}
	for _, o := range objs {
		if _, _, ok := stackFileName(o.Key); !ok {
			continue
		}
		data, err := readStackBytes(ctx, b, o.Key)
		if err != nil || data == nil {
			return nil, err
		}
		var cp stackFile
		if err := json.Unmarshal(data, &cp); err != nil {
			return nil, fmt.Errorf("parse stack file %s: %w", o.Key, err)
		}
		if cp.Checkpoint.Latest == nil {
			continue
		}
		for _, r := range cp.Checkpoint.Latest.Resources {
			if f, ok := r.Outputs["serverId"].(float64); ok && r.Type == provider.ServerType {
				known[int64(f)] = true
			}
		}
	}
	return known, nil
}
