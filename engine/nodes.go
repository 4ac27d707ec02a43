package engine

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/engine/node"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/manifest"
)

type nodeRes struct {
	pulumi.CustomResourceState
	HostKey pulumi.StringOutput `pulumi:"hostKey"`
	AppUID  pulumi.IntOutput    `pulumi:"appUid"`
	AppHome pulumi.StringOutput `pulumi:"appHome"`
	Flavour pulumi.StringOutput `pulumi:"flavour"`
}

type plainRes struct{ pulumi.CustomResourceState }

// configHashKey keys the instances' configuration hashes, derived from the passphrase: stable for an
// owner's backend, unknown to whoever reads the state without it.
func (e *Engine) configHashKey() []byte {
	key, err := hkdf.Key(sha256.New, []byte(e.cfg.Passphrase), nil, "stands-reconciler instance config hash", 32)
	if err != nil {
		panic(err) // only for a length sha256 cannot give
	}
	return key
}

// NodesMode is the node mode applies run in: NodesFull, or NodesSkipped for servers only.
func (e *Engine) NodesMode() string {
	if e.cfg.SkipNodes {
		return NodesSkipped
	}
	return NodesFull
}

// sshPolicy tells the provider which servers it may connect to when it deletes: in full mode the
// servers the stand keeps; in servers-only mode none.
func (e *Engine) sshPolicy(st auto.Stack, p *programInputs) {
	ws := st.Workspace()
	if p.mode != NodesFull {
		ws.SetEnvVar(provider.EnvNoSSH, "1")
		return
	}
	var keep []string
	for _, n := range p.rendered.Nodes {
		keep = append(keep, n.ServerName)
	}
	ws.UnsetEnvVar(provider.EnvNoSSH)
	ws.SetEnvVar(provider.EnvKeepServers, strings.Join(keep, ","))
}

// nodeWork registers steps 8–12 of docs/stands-engine.md#create for every server: a Node (cloud-init wait, user systemd,
// Podman, firewalld), then its Images, then the instances one after the other in the top-level apps
// order and each app's instances order, wherever they are placed. It returns the resources' ids.
func (p *programInputs) nodeWork(ctx *pulumi.Context, nodes []stackNode, rendered pulumi.AnyOutput) ([]any, error) {
	privateKey := pulumi.ToSecret(pulumi.String(p.privateKey)).(pulumi.StringOutput)
	byName := map[string]onNode{}
	var ids []any
	for _, n := range nodes {
		on, err := p.setUp(ctx, n, rendered, privateKey)
		if err != nil {
			return nil, err
		}
		byName[n.n.Name] = on
		ids = append(ids, on.setup.ID(), on.images.ID())
	}
	var prev pulumi.Resource
	for _, in := range p.rendered.Instances {
		res, err := p.instance(ctx, in, byName[in.Node], prev, rendered, privateKey)
		if err != nil {
			return nil, err
		}
		prev = res
		ids = append(ids, res.ID())
	}
	return ids, nil
}

// onNode is a server's resources the instances placed on it use.
type onNode struct {
	server *serverRes
	setup  *nodeRes
	images *plainRes
}

// setUp registers a server's Node (its role ports those of the instances placed there) and Images.
func (p *programInputs) setUp(ctx *pulumi.Context, n stackNode, rendered pulumi.AnyOutput, privateKey pulumi.StringOutput) (onNode, error) {
	s, name := p.in.Stand, n.n.Name
	setup := &nodeRes{}
	err := ctx.RegisterResource(provider.NodeType, name, pulumi.Map{
		"host": n.res.PublicIPv4, "user": pulumi.String(s.Users.Sudo), "privateKey": privateKey,
		"appUser": pulumi.String(s.Users.App), "serverId": n.res.ServerID, "serverName": pulumi.String(n.n.ServerName),
		"generatedHostKey": pulumi.String(p.hostKeys[name].public),
		"ports": rendered.ApplyT(func(v any) []string {
			var ports []string
			for _, in := range v.(*manifest.Rendered).Instances {
				if in.Node == name {
					for _, pt := range in.Ports {
						ports = append(ports, provider.PortSpec(pt))
					}
				}
			}
			slices.Sort(ports)
			return slices.Compact(ports)
		}).(pulumi.StringArrayOutput),
	}, setup)
	if err != nil {
		return onNode{}, err
	}
	images := &plainRes{}
	pulls := rendered.ApplyT(func(v any) (string, error) {
		regs, err := pullsFor(v.(*manifest.Rendered), name, p.in.Secrets)
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(regs)
		return string(b), err
	}).(pulumi.StringOutput)
	err = ctx.RegisterResource(provider.ImagesType, name, pulumi.Map{
		"host": n.res.PublicIPv4, "user": pulumi.String(s.Users.Sudo), "privateKey": privateKey, "hostKey": setup.HostKey,
		"appUser": pulumi.String(s.Users.App), "appUid": setup.AppUID, "serverId": n.res.ServerID, "serverName": pulumi.String(n.n.ServerName),
		"images": rendered.ApplyT(func(v any) []string {
			var all []string
			for _, in := range v.(*manifest.Rendered).Instances {
				if in.Node == name {
					all = append(all, in.Images...)
				}
			}
			slices.Sort(all)
			return slices.Compact(all)
		}).(pulumi.StringArrayOutput),
		"registries": pulumi.ToSecret(pulls),
	}, images)
	return onNode{n.res, setup, images}, err
}

// instance registers an app instance on its node, after its node's images and the instance before it.
func (p *programInputs) instance(ctx *pulumi.Context, in *manifest.RenderedInstance, on onNode, prev pulumi.Resource,
	rendered pulumi.AnyOutput, privateKey pulumi.StringOutput) (*plainRes, error) {
	s := p.in.Stand
	app, inst := in.App, in.Instance
	find := func(v any) *manifest.RenderedInstance {
		for _, x := range v.(*manifest.Rendered).Instances {
			if x.App == app && x.Instance == inst {
				return x
			}
		}
		return nil
	}
	spec := rendered.ApplyT(func(v any) (string, error) {
		b, err := json.Marshal(provider.SpecOf(find(v)))
		return string(b), err
	}).(pulumi.StringOutput)
	deps := []pulumi.Resource{on.images}
	if prev != nil {
		deps = append(deps, prev)
	}
	res := &plainRes{}
	err := ctx.RegisterResource(provider.InstanceType, node.InstanceName(in), pulumi.Map{
		"host": on.server.PublicIPv4, "user": pulumi.String(s.Users.Sudo), "privateKey": privateKey, "hostKey": on.setup.HostKey,
		"appUser": pulumi.String(s.Users.App), "appUid": on.setup.AppUID, "appHome": on.setup.AppHome, "flavour": on.setup.Flavour,
		"serverName": pulumi.String(s.ServerName(s.Nodes[indexNode(s, in.Node)])), "serverId": on.server.ServerID,
		"standId": pulumi.String(s.ID), "app": pulumi.String(app), "instance": pulumi.String(inst), "node": pulumi.String(in.Node),
		"configHash": rendered.ApplyT(func(v any) string { return node.ConfigHash(p.hashKey, find(v)) }).(pulumi.StringOutput),
		"spec":       pulumi.ToSecret(spec),
	}, res, pulumi.DependsOn(deps))
	return res, err
}

// pullsFor groups the images of a node's instances by registry, with the registry's credentials.
func pullsFor(r *manifest.Rendered, nodeName string, secrets manifest.Secrets) ([]node.Registry, error) {
	regs := map[string]*manifest.Registry{}
	for _, reg := range r.Stand.Registries {
		regs[reg.Name] = reg
	}
	var out []node.Registry
	index := map[string]int{}
	for _, in := range r.Instances {
		if in.Node != nodeName || len(in.Images) == 0 {
			continue
		}
		i, ok := index[in.Registry]
		if !ok {
			nr := node.Registry{}
			if reg := regs[in.Registry]; reg != nil {
				var ok1, ok2, ok3 bool
				nr.URL, ok1 = reg.URL.Resolve(secrets)
				nr.Username, ok2 = reg.Username.Resolve(secrets)
				nr.Password, ok3 = reg.Password.Resolve(secrets)
				if !ok1 || !ok2 || !ok3 {
					return nil, fmt.Errorf("registry %s: a secret is not resolved", in.Registry)
				}
				nr.Insecure = reg.Insecure
			}
			i = len(out)
			index[in.Registry] = i
			out = append(out, nr)
		}
		for _, img := range in.Images {
			if !slices.Contains(out[i].Images, img) {
				out[i].Images = append(out[i].Images, img)
			}
		}
	}
	return out, nil
}
