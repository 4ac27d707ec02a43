// Package provider is the `stands` Pulumi resource provider, written on Pulumi's raw gRPC interface:
// the engine starts our own binary as `pulumi-resource-stands` and calls Check/Diff/Create/Read/
// Update/Delete for each resource. A small typed layer (resource) keeps each resource a Go struct.
//
// Resources: stands:index:Server — a Hetzner Cloud server, through hcloud-go; stands:index:Node,
// stands:index:Images and stands:index:Instance — the work on a server over SSH (package engine/node).
package provider

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil/rpcerror"
	pprovider "github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/engine/cloud/hetzner"
	"github.com/stands-engine/stands-reconciler/internal/version"
	"github.com/stands-engine/stands-reconciler/reason"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Name is the provider's package name; the engine runs it as pulumi-resource-<Name>.
const Name = "stands"

// BinaryName is the executable name the engine looks for in the plugin folder.
const BinaryName = "pulumi-resource-" + Name

// Version is the binary's version as a semantic version, what Pulumi requires of a plugin's
// (internal/version).
var Version = version.Semver()

// Config keys the provider reads (stack config "stands:<key>").
const (
	ConfigToken    = "token"    // the cloud's API token (secret): stacks of earlier versions hold it; EnvTokenFile wins
	ConfigEndpoint = "endpoint" // the cloud's API endpoint: stacks of earlier versions set it; EnvEndpoint wins
)

// Serve runs the provider for the engine; it returns when the engine is done with it.
func Serve(opts ...Option) error {
	if err := dieWithParent(); err != nil {
		return fmt.Errorf("serve the provider: %w", err)
	}
	return pprovider.Main(Name, func(host *pprovider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		p := New(opts...)
		p.host = host
		return p, nil
	})
}

// resource is the typed layer: one implementation per resource type.
type resourceType interface {
	check(ctx context.Context, news resource.PropertyMap) (resource.PropertyMap, []*pulumirpc.CheckFailure)
	diff(ctx context.Context, id string, oldInputs, news resource.PropertyMap) (*pulumirpc.DiffResponse, error)
	create(ctx context.Context, c call, inputs resource.PropertyMap, preview bool) (string, resource.PropertyMap, error)
	read(ctx context.Context, c call, id string, state resource.PropertyMap) (string, resource.PropertyMap, error)
	update(ctx context.Context, c call, id string, olds, news resource.PropertyMap, preview bool) (resource.PropertyMap, error)
	delete(ctx context.Context, c call, id string, state resource.PropertyMap) error
}

// EnvTokenFile is the variable the engine gives the Pulumi CLI, and so this plugin: the file holding
// the cloud's token, in the operation's workspace. Not the token itself: command lines are readable
// by everyone, and an environment by every process of the user and every child. The name is the
// one stacks and workspaces of earlier versions know.
const EnvTokenFile = "STANDS_PROVIDER_HCLOUD_TOKEN_FILE"

// EnvCloud is the variable the engine names the cloud with, in the operation's workspace: a name
// Clouds opens ("" is DefaultCloud).
const EnvCloud = "STANDS_PROVIDER_CLOUD"

// EnvEndpoint is the variable the engine gives the cloud's API endpoint in (e.g. hcloudsim's
// http://127.0.0.1:PORT/v1; unset: the cloud's own): in the workspace's environment rather than the
// stack's config, which would cost a Pulumi process (config set-all) on every operation.
const EnvEndpoint = "STANDS_PROVIDER_ENDPOINT"

// call is what a resource operation may use: the Hetzner client (asked for only when needed, so node
// work runs without a token) and the engine's log, for progress on long work.
type call struct {
	p   *Provider
	urn string
}

func (c call) cloud() (cloud.Cloud, error) { return c.p.cloud() }

// info tells the operator what a long operation is doing; the engine logs it.
func (c call) info(ctx context.Context, msg string) {
	if c.p.host != nil {
		_ = c.p.host.Log(ctx, diag.Info, resource.URN(c.urn), msg)
	}
}

// warn tells the operator what a read found wrong.
func (c call) warn(ctx context.Context, msg string) {
	if c.p.host != nil {
		_ = c.p.host.Log(ctx, diag.Warning, resource.URN(c.urn), msg)
	}
}

// Provider implements pulumirpc.ResourceProviderServer.
type Provider struct {
	pulumirpc.UnimplementedResourceProviderServer

	mu     sync.Mutex
	client cloud.Cloud
	types  map[string]resourceType
	cancel context.CancelFunc
	ctx    context.Context
	clouds Clouds
	host   *pprovider.HostClient
}

// Option tunes a provider.
type Option func(*Provider)

// WithCloud lets the provider open a cloud of another name than the ones this build ships (a test's
// second cloud).
func WithCloud(name string, open cloud.Opener) Option {
	return func(p *Provider) {
		if p.clouds == nil {
			p.clouds = Clouds{}
		}
		p.clouds[name] = open
	}
}

// New returns a provider; Configure gives it its cloud.
func New(opts ...Option) *Provider {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Provider{
		types:  map[string]resourceType{ServerType: serverResource{}, NodeType: nodeResource{}, ImagesType: imagesResource{}, InstanceType: instanceResource{}},
		ctx:    ctx,
		cancel: cancel,
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// DefaultCloud is the cloud a stand's servers live in unless the settings name another.
const DefaultCloud = "hetzner"

// Clouds are the clouds that can be opened beside the ones this build ships, by name.
type Clouds map[string]cloud.Opener

// shipped are the clouds this build ships, by name: a second is a line here
// (docs/architecture.md#where-do-i-add).
var shipped = Clouds{
	DefaultCloud: func(token, endpoint string) cloud.Cloud {
		return hetzner.New(token, hetzner.WithEndpoint(endpoint), hetzner.WithApplication(version.String()))
	},
}

// Names are the clouds Open knows: the shipped ones, then c's.
func (c Clouds) Names() []string {
	return append(slices.Sorted(maps.Keys(shipped)), slices.Sorted(maps.Keys(c))...)
}

// Open opens the cloud project the stands' servers live in, by the cloud's name ("" is
// DefaultCloud), with a token, at an endpoint ("" for the cloud's own): the one place a cloud's
// client is made, for the provider and for the engine's own reads alike.
func (c Clouds) Open(name, token, endpoint string) (cloud.Cloud, error) {
	if name == "" {
		name = DefaultCloud
	}
	open, ok := shipped[name]
	if !ok {
		open, ok = c[name]
	}
	if !ok {
		return nil, fmt.Errorf("no cloud named %q: this build knows %s", name, strings.Join(c.Names(), ", "))
	}
	return open(token, endpoint), nil
}

var marshal = plugin.MarshalOptions{KeepSecrets: true, KeepUnknowns: true, SkipNulls: true}

func unmarshal(s *structpb.Struct) (resource.PropertyMap, error) {
	if s == nil {
		return resource.PropertyMap{}, nil
	}
	return plugin.UnmarshalProperties(s, marshal)
}

func (p *Provider) typ(urn string) (resourceType, error) {
	t := resource.URN(urn).Type().String()
	rt, ok := p.types[t]
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown resource type %q", t)
	}
	return rt, nil
}

// cloud returns the configured cloud or an error saying the provider was not configured.
func (p *Provider) cloud() (cloud.Cloud, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return nil, status.Error(codes.FailedPrecondition, "the stands provider is not configured: set stands:token")
	}
	return p.client, nil
}

// opCtx is cancelled when the engine cancels the provider or the call.
func (p *Provider) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.ctx, cancel)
	return c, func() { stop(); cancel() }
}

func (p *Provider) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: Version}, nil
}

func (p *Provider) Attach(context.Context, *pulumirpc.PluginAttach) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (p *Provider) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	p.cancel()
	return &emptypb.Empty{}, nil
}

func (p *Provider) CheckConfig(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

// DiffConfig: a new token or endpoint never replaces servers.
func (p *Provider) DiffConfig(context.Context, *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
}

func (p *Provider) Configure(_ context.Context, req *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	args, err := unmarshal(req.GetArgs())
	if err != nil {
		return nil, fmt.Errorf("configure: %w", err)
	}
	token := stringProp(args, ConfigToken)
	if f := os.Getenv(EnvTokenFile); f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("configure: read the cloud's token: %w", err)
		}
		token = strings.TrimSpace(string(data))
	}
	endpoint := cmp.Or(os.Getenv(EnvEndpoint), stringProp(args, ConfigEndpoint))
	if token != "" {
		c, err := p.clouds.Open(os.Getenv(EnvCloud), token, endpoint)
		if err != nil {
			return nil, fmt.Errorf("configure: %w", err)
		}
		p.mu.Lock()
		p.client = c
		p.mu.Unlock()
	}
	return &pulumirpc.ConfigureResponse{AcceptSecrets: true, SupportsPreview: true}, nil
}

func (p *Provider) Check(ctx context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	rt, err := p.typ(req.GetUrn())
	if err != nil {
		return nil, err
	}
	news, err := unmarshal(req.GetNews())
	if err != nil {
		return nil, err
	}
	inputs, failures := rt.check(ctx, news)
	out, err := plugin.MarshalProperties(inputs, marshal)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CheckResponse{Inputs: out, Failures: failures}, nil
}

func (p *Provider) Diff(ctx context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	rt, err := p.typ(req.GetUrn())
	if err != nil {
		return nil, err
	}
	// Compare old INPUTS with new inputs: outputs carry server-side values (ids, addresses) that are
	// not in the program.
	olds, err := unmarshal(req.GetOldInputs())
	if err != nil {
		return nil, err
	}
	if len(olds) == 0 {
		if olds, err = unmarshal(req.GetOlds()); err != nil {
			return nil, err
		}
	}
	news, err := unmarshal(req.GetNews())
	if err != nil {
		return nil, err
	}
	return rt.diff(ctx, req.GetId(), olds, news)
}

func (p *Provider) Create(ctx context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	rt, err := p.typ(req.GetUrn())
	if err != nil {
		return nil, err
	}
	inputs, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.opCtx(ctx)
	defer cancel()
	id, outs, err := rt.create(ctx, call{p, req.GetUrn()}, inputs, req.GetPreview())
	err = reason.Mark(err)
	var partial *initFailed
	if errors.As(err, &partial) {
		props, merr := plugin.MarshalProperties(outs, marshal)
		if merr != nil {
			return nil, merr
		}
		return nil, rpcerror.WithDetails(rpcerror.New(codes.Unknown, err.Error()),
			&pulumirpc.ErrorResourceInitFailed{Id: id, Properties: props, Inputs: req.GetProperties(), Reasons: []string{err.Error()}})
	}
	if err != nil {
		return nil, err
	}
	props, err := plugin.MarshalProperties(outs, marshal)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: id, Properties: props}, nil
}

func (p *Provider) Read(ctx context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	rt, err := p.typ(req.GetUrn())
	if err != nil {
		return nil, err
	}
	state, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.opCtx(ctx)
	defer cancel()
	id, outs, err := rt.read(ctx, call{p, req.GetUrn()}, req.GetId(), state)
	if err != nil {
		return nil, reason.Mark(err)
	}
	if id == "" {
		// Deleted out of band: an empty id tells the engine the resource is gone.
		return &pulumirpc.ReadResponse{}, nil
	}
	props, err := plugin.MarshalProperties(outs, marshal)
	if err != nil {
		return nil, err
	}
	inputs, err := driftInputs(req.GetInputs(), outs)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.ReadResponse{Id: id, Properties: props, Inputs: inputs}, nil
}

// driftInputs carries what a read found changed on a node into the resource's inputs: Diff compares
// old inputs with the program's, so the resource then shows as an update, and the update deploys
// it again. Without drift the inputs are the stored ones.
func driftInputs(stored *structpb.Struct, outs resource.PropertyMap) (*structpb.Struct, error) {
	drift, found := outs[pDrift]
	in, err := unmarshal(stored)
	if err != nil {
		return nil, err
	}
	if _, had := in[pDrift]; !found && !had {
		return stored, nil
	}
	delete(in, pDrift)
	if found {
		in[pDrift] = drift
	}
	return plugin.MarshalProperties(in, marshal)
}

func (p *Provider) Update(ctx context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	rt, err := p.typ(req.GetUrn())
	if err != nil {
		return nil, err
	}
	olds, err := unmarshal(req.GetOlds())
	if err != nil {
		return nil, err
	}
	news, err := unmarshal(req.GetNews())
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.opCtx(ctx)
	defer cancel()
	outs, err := rt.update(ctx, call{p, req.GetUrn()}, req.GetId(), olds, news, req.GetPreview())
	err = reason.Mark(err)
	if err != nil {
		return nil, err
	}
	props, err := plugin.MarshalProperties(outs, marshal)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: props}, nil
}

func (p *Provider) Delete(ctx context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	rt, err := p.typ(req.GetUrn())
	if err != nil {
		return nil, err
	}
	state, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.opCtx(ctx)
	defer cancel()
	return &emptypb.Empty{}, reason.Mark(rt.delete(ctx, call{p, req.GetUrn()}, req.GetId(), state))
}

// stringProp reads a string property, looking through secrets.
func stringProp(m resource.PropertyMap, key string) string {
	v, ok := m[resource.PropertyKey(key)]
	if !ok {
		return ""
	}
	if v.IsSecret() {
		v = v.SecretValue().Element
	}
	if v.IsString() {
		return v.StringValue()
	}
	return ""
}

func stringMapProp(m resource.PropertyMap, key string) map[string]string {
	v, ok := m[resource.PropertyKey(key)]
	if !ok || !v.IsObject() {
		return nil
	}
	out := map[string]string{}
	for k, e := range v.ObjectValue() {
		if e.IsString() {
			out[string(k)] = e.StringValue()
		}
	}
	return out
}
