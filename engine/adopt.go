package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Taking over a stand whose stack the Stands Engine made: its stack has the same backend, project and
// name as ours, holding servers of the hcloud provider. Adopt checks that each of them is a node of
// the manifest as it stands (name, type, image, location), keeps the old state in an archive file,
// gives the servers the reconciler's ownership labels, drops the hcloud provider's resources from the
// state — from the state only: nothing is deleted in Hetzner — and applies the stand, whose server
// create takes over a server that has the stand's name and labels. The server ids stay.

// hcloudServerTypes are the hcloud provider's server resource types (its own and the foreign-stack
// tests' spellings).
var hcloudServerTypes = []string{"hcloud:index/server:Server", "hcloud:index:Server"}

// ErrNotAdoptable: the stack is not the Stands Engine's, or does not match the manifest.
var ErrNotAdoptable = errors.New("the stack cannot be adopted")

// AdoptedServer is one server Adopt takes over.
type AdoptedServer struct {
	Node string `json:"node"`
	Name string `json:"name"`
	ID   int64  `json:"id"`
}

// Adoption is what Adopt did, or would do.
type Adoption struct {
	StandID string          `json:"id_stand"`
	Servers []AdoptedServer `json:"servers"`
	New     []string        `json:"new_nodes,omitempty"` // nodes without a server in the old stack: created
	Archive string          `json:"archive,omitempty"`
	Result  *stands.Result  `json:"-"`
}

// Adopt takes over the stand's old-engine stack (dryRun: only checks and says what it would do). The
// old state is written to archiveDir.
func (e *Engine) Adopt(ctx context.Context, in stands.Input, archiveDir string, dryRun bool) (*Adoption, error) {
	a, err := e.adoptState(ctx, in, archiveDir, dryRun)
	if err != nil || dryRun {
		return a, err
	}
	res, err := e.Apply(ctx, in, true)
	if err != nil {
		return a, fmt.Errorf("apply the adopted stand (its old state is in %s; apply again to finish): %w", a.Archive, err)
	}
	a.Result = res
	after := map[string]int64{}
	for _, n := range res.Nodes {
		after[n.Name] = n.ServerID
	}
	for _, s := range a.Servers {
		if after[s.Node] != s.ID {
			return a, fmt.Errorf("node %s: server %d after the adoption, %d before", s.Node, after[s.Node], s.ID)
		}
	}
	return a, nil
}

// adoptState checks the old stack against the manifest and, unless dryRun, archives it, labels its
// servers and drops its resources from the state.
func (e *Engine) adoptState(ctx context.Context, in stands.Input, archiveDir string, dryRun bool) (*Adoption, error) {
	ctx, done := e.scoped(ctx)
	defer done()
	s := in.Stand
	ref := stands.StackRef{Project: s.Project, Env: s.Env}
	unlock, err := e.stacks.lock(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, err := e.stack(ctx, ref, func(*pulumi.Context) error { return nil }, false)
	if err != nil {
		return nil, fmt.Errorf("stack %s/%s: %w", s.Project, s.Env, ErrNoStack)
	}
	exported, err := st.Export(ctx)
	if err != nil {
		return nil, fmt.Errorf("export stack %s: %w", st.Name(), err)
	}
	dep := &deployment{}
	if err := json.Unmarshal(exported.Deployment, dep); err != nil {
		return nil, fmt.Errorf("read deployment of %s: %w", st.Name(), err)
	}
	ids, err := oldServers(st.Name(), dep)
	if err != nil {
		return nil, err
	}
	c, err := e.cloud()
	if err != nil {
		return nil, err
	}
	a, servers, err := matchServers(ctx, c, s, ids)
	if err != nil || dryRun {
		return a, err
	}
	if a.Archive, err = archive(archiveDir, s.ID, exported.Deployment); err != nil {
		return nil, err
	}
	for _, srv := range servers {
		labels := maps.Clone(srv.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[provider.LabelManagedBy], labels[provider.LabelStand] = provider.ManagedByValue, s.ID
		if err := c.SetLabels(ctx, srv.ID, labels); err != nil {
			return nil, fmt.Errorf("label server %s (its old state is in %s): %w", srv.Name, a.Archive, err)
		}
	}
	if exported.Deployment, err = withoutForeign(exported.Deployment); err != nil {
		return nil, err
	}
	if err := st.Import(ctx, exported); err != nil {
		return nil, fmt.Errorf("drop the old resources from %s (its old state is in %s): %w", st.Name(), a.Archive, err)
	}
	e.cfg.Log.Info("stack adopted", "stand", s.ID, "servers", len(a.Servers), "archive", a.Archive)
	return a, nil
}

// oldServers are the server ids of a Stands Engine stack: anything but the hcloud provider's servers
// and providers (or a pending operation) and it is not one, and it is not adopted.
func oldServers(name string, dep *deployment) ([]int64, error) {
	if len(dep.Pending) > 0 {
		return nil, fmt.Errorf("%s: %w: %d operations of a run that did not finish are pending", name, ErrNotAdoptable, len(dep.Pending))
	}
	var ids []int64
	var others []string
	for _, r := range dep.Resources {
		switch {
		case r.Type == "pulumi:pulumi:Stack", strings.HasPrefix(r.Type, "pulumi:providers:"):
		case slices.Contains(hcloudServerTypes, r.Type):
			id, err := strconv.ParseInt(r.ID, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %w: server %s has the id %q", name, ErrNotAdoptable, r.URN, r.ID)
			}
			ids = append(ids, id)
		default:
			others = append(others, r.Type)
		}
	}
	switch {
	case len(others) > 0:
		return nil, fmt.Errorf("%s: %w: it holds %s, not only the hcloud provider's servers", name, ErrNotAdoptable, strings.Join(others, ", "))
	case len(ids) == 0:
		return nil, fmt.Errorf("%s: %w: it holds no hcloud server (already ours, or empty: apply it)", name, ErrNotAdoptable)
	}
	return ids, nil
}

// matchServers reads each old server from Hetzner and pairs it with the manifest's node of its
// name: a server no node names, or one whose type, image or location the manifest would change, is
// refused (the first apply would replace it).
func matchServers(ctx context.Context, c cloud.Cloud, s *manifest.Stand, ids []int64) (*Adoption, []*cloud.Server, error) {
	a := &Adoption{StandID: s.ID}
	profiles := map[string]*manifest.Profile{}
	for _, p := range s.Profiles {
		profiles[p.Name] = p
	}
	byName := map[string]*manifest.Node{}
	for _, n := range s.Nodes {
		byName[s.ServerName(n)] = n
	}
	var servers []*cloud.Server
	var problems []string
	for _, id := range ids {
		srv, err := c.Server(ctx, id)
		if err != nil {
			return nil, nil, fmt.Errorf("read server %d: %w", id, err)
		}
		if srv == nil {
			problems = append(problems, fmt.Sprintf("server %d is in the state but not in Hetzner", id))
			continue
		}
		n := byName[srv.Name]
		if n == nil {
			problems = append(problems, fmt.Sprintf("server %s (%d) is no node of the manifest (nodes are named <owner>-<project>-<env>-<node>)", srv.Name, id))
			continue
		}
		if owner := srv.Labels[provider.LabelStand]; owner != "" && owner != s.ID {
			problems = append(problems, fmt.Sprintf("server %s (%d) is labelled for stand %s", srv.Name, id, owner))
		}
		problems = append(problems, serverMismatch(srv, n, profiles[n.Profile])...)
		servers = append(servers, srv)
		a.Servers = append(a.Servers, AdoptedServer{Node: n.Name, Name: srv.Name, ID: srv.ID})
		delete(byName, srv.Name)
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotAdoptable, strings.Join(problems, "; "))
	}
	for _, n := range byName {
		a.New = append(a.New, n.Name)
	}
	slices.Sort(a.New)
	return a, servers, nil
}

// serverMismatch lists what the manifest would change on a server that only a replacement changes
// (the type too: adopting is no time for a resize).
func serverMismatch(srv *cloud.Server, n *manifest.Node, p *manifest.Profile) []string {
	var out []string
	check := func(what, have, want string) {
		if have != want {
			out = append(out, fmt.Sprintf("server %s: %s %s, the manifest's node %s says %s", srv.Name, what, have, n.Name, want))
		}
	}
	for _, c := range []struct{ what, have, want string }{{"type", srv.Type, p.ServerType}, {"image", srv.Image, p.Image}, {"location", srv.Location, p.Location}} {
		if c.have != "" { // what the API did not say is not held against it
			check(c.what, c.have, c.want)
		}
	}
	return out
}

// archive keeps the old state, readable by its owner only (its secrets are encrypted by the stack's
// passphrase, as in the backend).
func archive(dir, id string, deployment json.RawMessage) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("archive the old state: %w", err)
	}
	p := filepath.Join(dir, id+"."+time.Now().UTC().Format("20060102T150405Z")+".json")
	if err := os.WriteFile(p, deployment, 0o600); err != nil {
		return "", fmt.Errorf("archive the old state: %w", err)
	}
	return p, nil
}

// withoutForeign is a deployment without the hcloud provider's resources, every other field kept.
func withoutForeign(raw json.RawMessage) (json.RawMessage, error) {
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	res, _ := d["resources"].([]any)
	var kept []any
	for _, r := range res {
		m, _ := r.(map[string]any)
		t, _ := m["type"].(string)
		if t == "pulumi:pulumi:Stack" || (strings.HasPrefix(t, "pulumi:providers:") && strings.TrimPrefix(t, "pulumi:providers:") == provider.Name) {
			kept = append(kept, r)
		}
	}
	d["resources"] = kept
	return json.Marshal(d)
}
