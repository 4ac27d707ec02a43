package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optlist"
	"gocloud.dev/blob"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Inventory lists every stack of the backend at the cost of one Pulumi CLI process
// (`pulumi stack ls --all --json`), whatever their number: marks, spec hashes and pending operations
// are read from the backend's stack files (file:// or s3://), not by running Pulumi once per stack.
func (e *Engine) Inventory(ctx context.Context) (_ []stands.StackInfo, err error) {
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
	list, err := ws.ListStacks(ctx, optlist.All())
	if err != nil {
		return nil, fmt.Errorf("list stacks: %w", err)
	}
	b, err := e.backendBucket(ctx)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	var out []stands.StackInfo
	for _, s := range list {
		parts := strings.Split(s.Name, "/")
		if len(parts) != 3 {
			continue
		}
		info := stands.StackInfo{Project: parts[1], Env: parts[2], LastUpdate: s.LastUpdate}
		if s.ResourceCount != nil {
			info.Resources = *s.ResourceCount
		}
		if err := readStackFile(ctx, b, &info); err != nil {
			return nil, err
		}
		if !info.Known && s.ResourceCount != nil && *s.ResourceCount == 0 {
			info.Owned = true // created and never updated: there is nothing in it to protect
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Project+"/"+out[i].Env < out[j].Project+"/"+out[j].Env
	})
	return out, nil
}

// readStackFile fills an entry from the diy backend's checkpoint and lock folder.
func readStackFile(ctx context.Context, b *blob.Bucket, info *stands.StackInfo) error {
	key := ".pulumi/stacks/" + info.Project + "/" + info.Env + ".json"
	data, err := readKey(ctx, b, key)
	if err != nil || data == nil {
		return err // nil data: a stack never updated, or a gzip-compressed file (not read)
	}
	var cp struct {
		Checkpoint struct {
			Latest struct {
				Resources []struct {
					Type    string         `json:"type"`
					Outputs map[string]any `json:"outputs"`
				} `json:"resources"`
				Pending []json.RawMessage `json:"pending_operations"`
			} `json:"latest"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return fmt.Errorf("parse stack file %s: %w", key, err)
	}
	info.Known = true
	info.Pending = len(cp.Checkpoint.Latest.Pending)
	// Like checkOwned: a stack holding only our own resource types is ours even without the mark
	// (its first run failed before the outputs were written).
	onlyOurs := true
	for _, r := range cp.Checkpoint.Latest.Resources {
		if r.Type != "pulumi:pulumi:Stack" {
			if r.Type != "pulumi:providers:"+provider.Name && !strings.HasPrefix(r.Type, provider.Name+":") {
				onlyOurs = false
			}
			continue
		}
		owned, _ := r.Outputs[OutOwnedBy].(string)
		info.Owned = owned == provider.ManagedByValue
		info.SpecHash, _ = r.Outputs[OutSpecHash].(string)
		info.StandID, _ = r.Outputs[OutStandID].(string)
		info.Protect, _ = r.Outputs[OutProtect].(bool)
	}
	info.Owned = info.Owned || onlyOurs
	locks, err := listKeys(ctx, b, lockPrefix(stands.StackRef{Project: info.Project, Env: info.Env}))
	if err != nil {
		return err
	}
	info.Locked = len(locks) > 0
	return readLastResult(ctx, b, info)
}

// readLastResult reads the newest .pulumi/history/<project>/<stack>/<stack>-<nanos>.history.json.
func readLastResult(ctx context.Context, b *blob.Bucket, info *stands.StackInfo) error {
	keys, err := listKeys(ctx, b, ".pulumi/history/"+info.Project+"/"+info.Env+"/")
	if err != nil {
		return err
	}
	newest := ""
	for _, k := range keys {
		if strings.HasSuffix(k, ".history.json") && k > newest {
			newest = k
		}
	}
	if newest == "" {
		return nil
	}
	data, err := readKey(ctx, b, newest)
	if err != nil || data == nil {
		return err
	}
	var h struct {
		Kind   string `json:"kind"`
		Result string `json:"result"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return fmt.Errorf("parse history %s: %w", newest, err)
	}
	info.LastOperation, info.LastResult = h.Kind, h.Result
	return nil
}
