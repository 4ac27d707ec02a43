package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/engine/configset"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// ErrProtected marks a destroy of a stand whose last apply had stand.protect: true. The guard holds
// in the engine too, whatever the caller believed.
var ErrProtected = errors.New("the stand is protected (stand.protect: true at its last apply); apply it with protect: false first")

// ErrNoStack marks a stand that has no stack yet.
var ErrNoStack = errors.New("the stand has no stack")

// ErrNotOwned marks a stack without the reconciler's ownership mark: it is never changed or destroyed.
var ErrNotOwned = errors.New("stack is not owned by stands-reconciler")

// Node modes (Result.NodesMode, the stack's nodesMode output).
const (
	NodesFull    = "full"    // servers, then node setup, images and instances over SSH
	NodesSkipped = "skipped" // servers only: everything is rendered, nothing is done over SSH
)

type serverRes struct {
	pulumi.CustomResourceState
	ServerID   pulumi.IntOutput    `pulumi:"serverId"`
	PublicIPv4 pulumi.StringOutput `pulumi:"publicIPv4"`
	PrivateIP  pulumi.StringOutput `pulumi:"privateIP"`
}

// programInputs is what the stand's inline program needs; it is filled in after the stack is opened (the key pair and the
// network's range come from the stack and from Hetzner).
type programInputs struct {
	in         stands.Input
	mode       string // NodesFull or NodesSkipped
	configsets string // folder for configsets; empty: none
	hashKey    []byte // keys the instances' configuration hashes
	rendered   *manifest.Rendered
	ipRange    string
	privateKey string
	publicKey  string
	hostKeys   map[string]hostKey // by node
}

func (p *programInputs) program(ctx *pulumi.Context) error {
	s := p.in.Stand
	nodes, err := p.servers(ctx)
	if err != nil {
		return err
	}
	out := pulumi.Map{}
	var addrs []any
	done := []any{}
	for _, n := range nodes {
		out[n.n.Name] = pulumi.Map{"serverName": pulumi.String(n.n.ServerName), "serverId": n.res.ServerID,
			"publicIPv4": n.res.PublicIPv4, "privateIP": n.res.PrivateIP}
		addrs = append(addrs, n.res.PublicIPv4, n.res.PrivateIP)
		done = append(done, n.res.ID())
	}
	// Everything on the nodes is rendered once the servers' addresses are known.
	addresses := func(vals []any) manifest.Addresses {
		a := manifest.Addresses{NetworkIPRange: p.ipRange, SSHPublicKey: p.publicKey, Nodes: map[string]manifest.NodeAddress{}}
		for i, n := range nodes {
			a.Nodes[n.n.Name] = manifest.NodeAddress{PublicIPv4: vals[2*i].(string), PrivateIP: vals[2*i+1].(string)}
		}
		if p.in.Untrusted {
			a = manifest.PreflightAddresses(s) // as the sandbox rendered it, so it ends as it did there
		}
		return a
	}
	rendered := pulumi.All(addrs...).ApplyT(func(vals []any) (any, error) {
		a := addresses(vals)
		r, err := manifest.Render(p.in.FS, s, p.in.Secrets, a)
		if err != nil {
			return nil, fmt.Errorf("render %s for its servers: %w", s.ID, err)
		}
		if p.configsets != "" && !ctx.DryRun() {
			if _, err := configset.Write(p.configsets, r); err != nil {
				return nil, err
			}
		}
		return r, nil
	}).(pulumi.AnyOutput)
	if p.mode == NodesFull {
		ids, err := p.nodeWork(ctx, nodes, rendered)
		if err != nil {
			return err
		}
		done = append(done, ids...)
	}
	ctx.Export(OutNodes, out)
	p.export(ctx, done, rendered)
	// What a status file may show of it: rendered under placeholders only (PublicConnection).
	public := pulumi.All(addrs...).ApplyT(func(vals []any) (string, error) {
		rec, err := PublicConnection(p.in.FS, s, addresses(vals))
		return string(rec), err
	}).(pulumi.StringOutput)
	ctx.Export(OutConnectionPublic, public)
	return nil
}

// servers registers a server for each node, its inputs the provider's own ServerArgs.
func (p *programInputs) servers(ctx *pulumi.Context) ([]stackNode, error) {
	s := p.in.Stand
	profiles := map[string]*manifest.Profile{}
	for _, pr := range s.Profiles {
		profiles[pr.Name] = pr
	}
	var nodes []stackNode
	for _, n := range p.rendered.Nodes {
		pr := profiles[s.Nodes[indexNode(s, n.Name)].Profile]
		args := provider.ServerArgs{Name: n.ServerName, ServerType: pr.ServerType, Image: pr.Image, Location: pr.Location,
			Network: pr.Network, SSHKeyName: s.SSH.KeyNameAdmin, UserData: userData(p.hostKeys[n.Name], n.CloudInit),
			Labels: map[string]string{
				provider.LabelManagedBy: provider.ManagedByValue, provider.LabelStand: s.ID,
				"stands.dev/owner": s.Owner, "stands.dev/node": n.Name,
			}}
		res := &serverRes{}
		if err := ctx.RegisterResource(provider.ServerType, n.Name, serverInputs(args), res); err != nil {
			return nil, err
		}
		nodes = append(nodes, stackNode{n, res})
	}
	return nodes, nil
}

// serverInputs declares a server's args to Pulumi, its secret inputs as secrets.
func serverInputs(args provider.ServerArgs) pulumi.Map {
	m := pulumi.Map{}
	for name, v := range args.Inputs() {
		var in pulumi.Input
		switch v := v.(type) {
		case string:
			in = pulumi.String(v)
		case map[string]string:
			in = pulumi.ToStringMap(v)
		default:
			panic(fmt.Sprintf("server input %s: %T", name, v)) // ServerArgs.Inputs holds strings and maps of them
		}
		if slices.Contains(provider.SecretServerInputs, name) {
			in = pulumi.ToSecret(in)
		}
		m[name] = in
	}
	return m
}

// export records the stack's outputs: the spec hash (and print) only once every resource is done.
func (p *programInputs) export(ctx *pulumi.Context, done []any, rendered pulumi.AnyOutput) {
	s := p.in.Stand
	ctx.Export(OutOwnedBy, pulumi.String(provider.ManagedByValue))
	ctx.Export(OutStandID, pulumi.String(s.ID))
	// The spec hash is what tells the next cycle there is nothing to do: it is recorded only once every
	// resource is done.
	ctx.Export(OutSpecHash, pulumi.All(done...).ApplyT(func([]any) string { return p.in.SpecHash }))
	if p.in.Print != "" {
		ctx.Export(OutPrint, pulumi.All(done...).ApplyT(func([]any) string { return p.in.Print }))
	}
	ctx.Export(OutNodesMode, pulumi.String(p.mode))
	ctx.Export(OutProtect, pulumi.Bool(s.Protect))
	ctx.Export(OutSSHPrivateKey, pulumi.ToSecret(pulumi.String(p.privateKey)))
	ctx.Export(OutSSHPublicKey, pulumi.String(p.publicKey))
	keys := pulumi.StringMap{}
	for name, k := range p.hostKeys {
		keys[name] = pulumi.String(k.private)
	}
	ctx.Export(OutHostKeys, pulumi.ToSecret(keys))
	conn := rendered.ApplyT(func(v any) (string, error) {
		rec, err := ConnectionRecord(s.ID, v.(*manifest.Rendered))
		return string(rec), err
	}).(pulumi.StringOutput)
	ctx.Export(OutConnection, pulumi.ToSecret(conn))
}

type stackNode struct {
	n   *manifest.RenderedNode
	res *serverRes
}

// isChange reports whether any step changes something: "same" and the reads of a refresh do not.
func isChange(changes map[string]int) bool {
	for op, n := range changes {
		if op != "same" && op != "refresh" && n > 0 {
			return true
		}
	}
	return false
}

func indexNode(s *manifest.Stand, name string) int {
	for i, n := range s.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// cloud is the cloud project, opened as the provider opens it (provider.Clouds) with the token as
// it is now (a rotated credential file needs no restart).
func (e *Engine) cloud() (cloud.Cloud, error) {
	token, err := e.cloudToken()
	if err != nil {
		return nil, err
	}
	return e.cfg.Clouds.Open(e.cfg.Cloud, token, e.cfg.CloudEndpoint)
}

// standLabels select a stand's servers: ours, and labelled with its id.
func standLabels(standID string) map[string]string {
	return map[string]string{provider.LabelManagedBy: provider.ManagedByValue, provider.LabelStand: standID}
}

// sweep deletes what Hetzner still holds with the destroyed stand's labels. A create interrupted
// before the provider recorded its server (a kill, a timeout, a request Hetzner finished after its
// caller gave up) leaves a server outside the stack: an apply reclaims it by name, but a destroy
// never sees it, and nothing else would ever delete it. The labels name this stand alone.
func (e *Engine) sweep(ctx context.Context, standID string, log *slog.Logger) error {
	if standID == "" {
		return nil
	}
	c, err := e.cloud()
	if err != nil {
		return err
	}
	left, err := c.Servers(ctx, standLabels(standID))
	if err != nil {
		return fmt.Errorf("list the servers left of %s: %w", standID, err)
	}
	for _, srv := range left {
		if err := c.DeleteServer(ctx, srv.ID); err != nil {
			return fmt.Errorf("delete server %s left outside the stack of %s: %w", srv.Name, standID, err)
		}
		log.Warn("deleted a server an interrupted create had left outside the stack", "server", srv.Name, "server_id", srv.ID)
	}
	return nil
}

// prepare opens the stand's stack (creating it when create is set), checks ownership, and fills the
// program's inputs.
func (e *Engine) prepare(ctx context.Context, in stands.Input, create, readOnly bool) (auto.Stack, *programInputs, auto.OutputMap, error) {
	s := in.Stand
	p := &programInputs{in: in, mode: e.NodesMode(), configsets: e.cfg.ConfigsetDir, hashKey: e.configHashKey()}
	st, err := e.stack(ctx, stands.StackRef{Project: s.Project, Env: s.Env}, p.program, create)
	if !create && auto.IsSelectStack404Error(err) {
		return auto.Stack{}, nil, nil, fmt.Errorf("stack %s/%s: %w", s.Project, s.Env, ErrNoStack)
	}
	if err != nil {
		return auto.Stack{}, nil, nil, fmt.Errorf("open stack %s/%s: %w", s.Project, s.Env, err)
	}
	dep, err := e.readDeployment(ctx, stands.StackRef{Project: s.Project, Env: s.Env})
	if err != nil {
		return auto.Stack{}, nil, nil, err
	}
	outs, err := dep.outputs()
	if err != nil {
		return auto.Stack{}, nil, nil, fmt.Errorf("read outputs of %s/%s: %w", s.Project, s.Env, err)
	}
	if err := checkOwned(st, outs, dep); err != nil {
		return auto.Stack{}, nil, nil, err
	}
	if err := checkStandID(s.Project+"/"+s.Env, outs, s.ID); err != nil {
		return auto.Stack{}, nil, nil, err
	}
	// A preview only reads (docs/pr-workflow.md): what a killed run left behind is undone by the next apply,
	// never by a plan a pull request asked for.
	if !readOnly {
		if err := e.recoverStack(ctx, st, stands.StackRef{Project: s.Project, Env: s.Env}, dep, e.standLog(in)); err != nil {
			return auto.Stack{}, nil, nil, err
		}
	}
	if p.hostKeys, err = hostKeys(outs, s.Nodes); err != nil {
		return auto.Stack{}, nil, nil, err
	}
	if p.privateKey, p.publicKey, err = e.keyPair(outs, readOnly); err != nil {
		return auto.Stack{}, nil, nil, err
	}
	c, err := e.cloud()
	if err != nil {
		return auto.Stack{}, nil, nil, err
	}
	net, err := c.Network(ctx, s.Profiles[0].Network)
	if err != nil {
		return auto.Stack{}, nil, nil, fmt.Errorf("look up network %s: %w", s.Profiles[0].Network, err)
	}
	if net == nil {
		return auto.Stack{}, nil, nil, reason.Wrap(reason.MissingPrereq, fmt.Errorf("network %q does not exist in the cloud project", s.Profiles[0].Network))
	}
	p.ipRange = net.IPRange
	// Cloud-init is all the program takes from this render; addresses are not known yet.
	addr := manifest.Addresses{NetworkIPRange: p.ipRange, SSHPublicKey: p.publicKey}
	if in.Untrusted {
		addr = manifest.PreflightAddresses(s)
	}
	p.rendered, err = manifest.Render(in.FS, s, in.Secrets, addr)
	if err != nil {
		return auto.Stack{}, nil, nil, fmt.Errorf("render %s: %w", s.ID, err)
	}
	return st, p, outs, nil
}

// protectedChanges previews the stack and says which of its servers the update would replace or
// delete, and why; "" when none.
func (e *Engine) protectedChanges(ctx context.Context, st auto.Stack, log *slog.Logger) (string, error) {
	ch, wait := e.progressSteps(log)
	_, err := st.Preview(ctx, optpreview.SuppressProgress(), optpreview.EventStreams(ch))
	_, steps := wait()
	if err != nil {
		return "", fmt.Errorf("pulumi preview %s before a protected apply: %w", st.Name(), err)
	}
	return protectedServers(steps), nil
}

// protectedServers names the server steps a protected stand refuses: replacements (with the inputs
// that force them) and deletions.
func protectedServers(steps []stands.Step) string {
	var why []string
	for _, s := range steps {
		switch {
		case s.Kind != "":
		case s.Op == "replace":
			why = append(why, fmt.Sprintf("server %s would be replaced (%s changed)", s.ServerName, cmp.Or(s.Changed, "an input")))
		case s.Op == "delete":
			why = append(why, fmt.Sprintf("server %s would be deleted (its node left the manifest or was renamed)", s.ServerName))
		}
	}
	return strings.Join(why, "; ")
}

// checkStandID refuses a stack that records another stand than the one expected: stack names are
// project/env, so two owners' stands of one project and env on one backend meet in one stack, and
// one must never apply over or destroy the other's.
func checkStandID(stack string, outs auto.OutputMap, want string) error {
	got, _ := outs[OutStandID].Value.(string)
	if want == "" || got == "" || got == want {
		return nil
	}
	return fmt.Errorf("stack %s holds stand %s, not %s: %w", stack, got, want, ErrNotOwned)
}

// checkOwned refuses a stack made by another tool (e.g. the old engine under the same backend): one
// without our mark that holds resources other than the stack itself and our own provider's. A stack
// whose first run of ours failed before its outputs were written is still ours.
func checkOwned(st auto.Stack, outs auto.OutputMap, dep *deployment) error {
	if v, ok := outs[OutOwnedBy]; ok && v.Value == provider.ManagedByValue {
		return nil
	}
	for _, r := range dep.Resources {
		switch {
		case r.Type == "pulumi:pulumi:Stack", r.Type == "pulumi:providers:"+provider.Name, strings.HasPrefix(r.Type, provider.Name+":"):
		default:
			return fmt.Errorf("%s: %w (it holds a %s and no %q output)", st.Name(), ErrNotOwned, r.Type, OutOwnedBy)
		}
	}
	return nil
}

// Apply makes the stand's servers match its manifest. When the stack's recorded spec hash equals
// in.SpecHash and force is false, nothing runs: the result says so.
func (e *Engine) Apply(ctx context.Context, in stands.Input, force bool) (_ *stands.Result, err error) {
	ctx, done := e.scoped(ctx)
	defer done()
	defer classify(&err)
	unlock, err := e.stacks.lock(ctx, stands.StackRef{Project: in.Stand.Project, Env: in.Stand.Env})
	if err != nil {
		return nil, err
	}
	defer unlock()
	log := e.standLog(in)
	st, p, outs, err := e.prepare(ctx, in, true, false)
	if err != nil {
		return nil, err
	}
	if v, ok := outs[OutSpecHash]; ok && v.Value == in.SpecHash && outs[OutProtect].Value == in.Stand.Protect && outs[OutNodesMode].Value == p.mode && !force {
		log.Info("stand is up to date", "spec_hash", in.SpecHash)
		return e.withDigest(ctx, in, log)(e.result(in, "apply", false, nil, outs, p))
	}
	e.sshPolicy(st, p)
	if outs[OutProtect].Value == true {
		// Protected at its last apply: no server of it is replaced or deleted, whatever the manifest
		// says now (protect: false must be applied first, as for a destroy). Planned first, so
		// Pulumi never starts on a change it would have to refuse half-way.
		if why, err := e.protectedChanges(ctx, st, log); err != nil || why != "" {
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%s: %s: %w", in.Stand.ID, why, ErrProtected)
		}
	}
	ch, wait := e.progress(log)
	log.Info("applying stand", "spec_hash", in.SpecHash, "nodes", len(in.Stand.Nodes), "nodes_mode", p.mode, "repair", in.Repair && force)
	opts := []optup.Option{optup.EventStreams(ch), optup.SuppressProgress()}
	if in.Repair && force {
		opts = append(opts, optup.Refresh())
	}
	res, err := st.Up(ctx, opts...)
	changes := wait()
	if err != nil {
		return nil, e.savedElsewhere(ctx, stands.StackRef{Project: in.Stand.Project, Env: in.Stand.Env}, fmt.Errorf("pulumi up %s: %w", in.Stand.ID, err))
	}
	log.Info("stand applied", "changes", changes)
	return e.withDigest(ctx, in, log)(e.result(in, "apply", isChange(changes), changes, res.Outputs, p))
}

// withDigest adds the digest of the state an apply left to its result. Unread, the result goes
// without one: the reconciler then reads the stand again at its next cycle rather than trust it.
func (e *Engine) withDigest(ctx context.Context, in stands.Input, log *slog.Logger) func(*stands.Result, error) (*stands.Result, error) {
	return func(r *stands.Result, err error) (*stands.Result, error) {
		if err != nil {
			return r, err
		}
		d, derr := e.StateDigest(ctx, stands.StackRef{Project: in.Stand.Project, Env: in.Stand.Env})
		if derr != nil {
			log.Warn("state file not read after the apply; the stand is read again next cycle", "err", derr)
		}
		r.StateDigest = d
		return r, nil
	}
}

// Refresh reads the stand's servers back from Hetzner into its stack: a server deleted out of band
// leaves the state, so the next apply creates it again.
func (e *Engine) Refresh(ctx context.Context, in stands.Input) (_ *stands.Result, err error) {
	ctx, done := e.scoped(ctx)
	defer done()
	defer classify(&err)
	unlock, err := e.stacks.lock(ctx, stands.StackRef{Project: in.Stand.Project, Env: in.Stand.Env})
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, p, _, err := e.prepare(ctx, in, false, false)
	if err != nil {
		return nil, err
	}
	ch, wait := e.progress(e.standLog(in, "refresh", true))
	_, err = st.Refresh(ctx, optrefresh.EventStreams(ch), optrefresh.SuppressProgress())
	changes := wait()
	if err != nil {
		return nil, fmt.Errorf("pulumi refresh %s: %w", in.Stand.ID, err)
	}
	dep, err := e.readDeployment(ctx, stands.StackRef{Project: in.Stand.Project, Env: in.Stand.Env})
	if err != nil {
		return nil, err
	}
	outs, err := dep.outputs()
	if err != nil {
		return nil, fmt.Errorf("read outputs of %s: %w", in.Stand.ID, err)
	}
	return e.result(in, "refresh", isChange(changes), changes, outs, p)
}

// Preview reports what Apply would change, without changing anything: the servers or the stack. A
// stand without a stack is ErrNoStack (PreviewNew plans one without creating its stack).
func (e *Engine) Preview(ctx context.Context, in stands.Input) (_ *stands.Result, err error) {
	ctx, done := e.scoped(ctx)
	defer done()
	defer blindError(in, &err) // after classify, which reads the CLI's output
	defer classify(&err)
	return e.preview(ctx, in, "preview")
}

// blindError replaces an untrusted input's error by its reason alone: the CLI's output, which the
// error carries, lists Pulumi's verdict on every resource it got to, secret-fed ones included.
func blindError(in stands.Input, err *error) {
	if *err == nil || !in.Untrusted {
		return
	}
	r := reason.Of(*err)
	*err = reason.Wrap(r, fmt.Errorf("preview of %s failed (%s); a pull request's plan shows no output of the Pulumi CLI", in.Stand.ID, r))
}

// Drift reads the stand's servers back from Hetzner and reports what an apply would change to put
// them back (`pulumi preview --refresh`): Changed means the servers drifted from the stack. It
// changes nothing, neither the servers nor the stack.
func (e *Engine) Drift(ctx context.Context, in stands.Input) (_ *stands.Result, err error) {
	ctx, done := e.scoped(ctx)
	defer done()
	defer classify(&err)
	return e.preview(ctx, in, "drift")
}

func (e *Engine) preview(ctx context.Context, in stands.Input, op string) (*stands.Result, error) {
	st, p, outs, err := e.prepare(ctx, in, op == "preview-new", true)
	if err != nil {
		return nil, err
	}
	opts := []optpreview.Option{optpreview.SuppressProgress()}
	if op == "drift" {
		opts = append(opts, optpreview.Refresh())
	}
	log := e.standLog(in, op, true)
	if in.Untrusted {
		log = slog.New(slog.DiscardHandler) // Pulumi's steps and messages: its verdict on secret-fed inputs
	}
	ch, wait := e.progressSteps(log)
	_, err = st.Preview(ctx, append(opts, optpreview.EventStreams(ch))...)
	changes, steps := wait()
	if err != nil {
		return nil, fmt.Errorf("pulumi preview %s: %w", in.Stand.ID, err)
	}
	res, err := e.result(in, op, isChange(changes), changes, outs, p)
	if res != nil {
		res.Steps = steps
		if outs[OutProtect].Value == true {
			res.Protected = protectedServers(steps)
		}
	}
	return res, err
}

func (e *Engine) result(in stands.Input, op string, changed bool, changes map[string]int, outs auto.OutputMap, p *programInputs) (*stands.Result, error) {
	r := &stands.Result{StandID: in.Stand.ID, Operation: op, Changed: changed, Changes: changes, SpecHash: in.SpecHash, NodesMode: p.mode}
	r.Nodes = nodesFrom(outs)
	if v, ok := outs[OutConnection]; ok {
		if s, ok := v.Value.(string); ok && s != "" {
			r.Connection = stands.SecretJSON(s)
			// The status shows the record made without the secrets' values; a stack applied
			// before there was one shows the real record masked, as then.
			shown := json.RawMessage(r.Connection)
			if pub, ok := outs[OutConnectionPublic].Value.(string); ok && pub != "" {
				shown = json.RawMessage(pub)
			}
			masked, err := MaskConnection(shown, in.Secrets.Values())
			if err != nil {
				return nil, err
			}
			r.Masked = masked
		}
	}
	return r, nil
}

func nodesFrom(outs auto.OutputMap) []stands.Node {
	raw, ok := outs[OutNodes].Value.(map[string]any)
	if !ok {
		return nil
	}
	var nodes []stands.Node
	for name, v := range raw {
		m, _ := v.(map[string]any)
		n := stands.Node{Name: name}
		n.ServerName, _ = m["serverName"].(string)
		n.PublicIPv4, _ = m["publicIPv4"].(string)
		n.PrivateIP, _ = m["privateIP"].(string)
		if f, ok := m["serverId"].(float64); ok {
			n.ServerID = int64(f)
		}
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes
}

// Destroy deletes a stand's servers and removes its stack. It needs only the stack's name — never the
// manifest, never SSH (docs/stands-engine.md#destroy). A stack that does not exist is already destroyed.
func (e *Engine) Destroy(ctx context.Context, ref stands.StackRef) (_ *stands.Result, err error) {
	ctx, done := e.scoped(ctx)
	defer done()
	defer classify(&err)
	unlock, err := e.stacks.lock(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	id := ref.Project + "/" + ref.Env
	log := e.log.With("stack", id)
	st, err := e.stack(ctx, ref, func(*pulumi.Context) error { return nil }, false)
	if auto.IsSelectStack404Error(err) {
		log.Info("stack does not exist: nothing to destroy")
		return &stands.Result{Operation: "destroy"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open stack %s: %w", id, err)
	}
	dep, err := e.readDeployment(ctx, ref)
	if err != nil {
		return nil, err
	}
	outs, err := dep.outputs()
	if err != nil {
		return nil, fmt.Errorf("read outputs of %s: %w", id, err)
	}
	if err := checkOwned(st, outs, dep); err != nil {
		return nil, err
	}
	if err := checkStandID(id, outs, ref.StandID); err != nil {
		return nil, err
	}
	if outs[OutProtect].Value == true {
		return nil, fmt.Errorf("%s: %w", id, ErrProtected)
	}
	if err := e.recoverStack(ctx, st, ref, dep, log); err != nil {
		return nil, err
	}
	standID, _ := outs[OutStandID].Value.(string)
	// The servers go away: nothing is removed from them first, and none is connected to (docs/stands-engine.md#destroy),
	// so an unreachable server cannot hold the destroy up.
	st.Workspace().SetEnvVar(provider.EnvNoSSH, "1")
	ch, wait := e.progress(log)
	_, err = st.Destroy(ctx, optdestroy.EventStreams(ch), optdestroy.SuppressProgress())
	changes := wait()
	if err != nil {
		return nil, e.savedElsewhere(ctx, ref, fmt.Errorf("pulumi destroy %s: %w", id, err))
	}
	if err := e.sweep(ctx, cmp.Or(standID, ref.StandID), log); err != nil {
		return nil, err
	}
	if err := st.Workspace().RemoveStack(ctx, st.Name()); err != nil {
		return nil, fmt.Errorf("remove stack %s: %w", id, err)
	}
	log.Info("stand destroyed", "changes", changes)
	return &stands.Result{StandID: standID, Operation: "destroy", Changed: true, Changes: changes}, nil
}
