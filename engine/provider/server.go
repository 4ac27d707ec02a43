package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// ServerType is the Pulumi type token of a stand's server.
const ServerType = "stands:index:Server"

// Ownership labels: every server the reconciler creates carries them, and it adopts or deletes only
// servers that do.
const (
	LabelManagedBy = "stands.dev/managed-by"
	ManagedByValue = "stands-reconciler"
	LabelStand     = "stands.dev/stand"
)

// ServerArgs are a Server's inputs.
type ServerArgs struct {
	Name       string            `json:"name"`
	ServerType string            `json:"serverType"`
	Image      string            `json:"image"`
	Location   string            `json:"location"`
	Network    string            `json:"network"`    // Hetzner network name
	SSHKeyName string            `json:"sshKeyName"` // Hetzner SSH key name (ssh.key_name_admin)
	Labels     map[string]string `json:"labels"`
	UserData   string            `json:"userData"` // secret; changes after create are ignored (seed §4)
}

// Input property names.
const (
	pName, pServerType, pImage, pLocation, pNetwork, pSSHKey, pLabels, pUserData = "name", "serverType", "image", "location", "network", "sshKeyName", "labels", "userData"
	// outputs
	pServerID, pPublicIPv4, pPrivateIP, pNetworkID = "serverId", "publicIPv4", "privateIP", "networkId"
)

// replaceKeys are the inputs a server cannot change in place. Its type can: a resize keeps the
// server, its disk and its addresses (update).
var replaceKeys = []string{pName, pImage, pLocation, pNetwork, pSSHKey}

func decodeServerArgs(m resource.PropertyMap) ServerArgs {
	return ServerArgs{
		Name: stringProp(m, pName), ServerType: stringProp(m, pServerType), Image: stringProp(m, pImage),
		Location: stringProp(m, pLocation), Network: stringProp(m, pNetwork), SSHKeyName: stringProp(m, pSSHKey),
		Labels: stringMapProp(m, pLabels), UserData: stringProp(m, pUserData),
	}
}

// ServerOutputs are what the provider learns from Hetzner.
type ServerOutputs struct {
	ServerID   int64
	PublicIPv4 string
	PrivateIP  string
	NetworkID  int64
}

// state is the full property map: inputs as given (user data stays secret) plus outputs.
func serverState(in resource.PropertyMap, out ServerOutputs) resource.PropertyMap {
	st := resource.PropertyMap{}
	for k, v := range in {
		st[k] = v
	}
	st[pServerID] = resource.NewNumberProperty(float64(out.ServerID))
	st[pPublicIPv4] = resource.NewStringProperty(out.PublicIPv4)
	st[pPrivateIP] = resource.NewStringProperty(out.PrivateIP)
	st[pNetworkID] = resource.NewNumberProperty(float64(out.NetworkID))
	if v, ok := st[pUserData]; ok && !v.IsSecret() {
		st[pUserData] = resource.MakeSecret(v)
	}
	return st
}

type serverResource struct{}

func (serverResource) check(_ context.Context, news resource.PropertyMap) (resource.PropertyMap, []*pulumirpc.CheckFailure) {
	var failures []*pulumirpc.CheckFailure
	for _, k := range []string{pName, pServerType, pImage, pLocation, pNetwork, pSSHKey} {
		v, ok := news[resource.PropertyKey(k)]
		if !ok || (v.IsString() && v.StringValue() == "") {
			failures = append(failures, &pulumirpc.CheckFailure{Property: k, Reason: k + " is required"})
		}
	}
	labels := stringMapProp(news, pLabels)
	if labels[LabelManagedBy] != ManagedByValue || labels[LabelStand] == "" {
		failures = append(failures, &pulumirpc.CheckFailure{Property: pLabels, Reason: "the ownership labels " + LabelManagedBy + " and " + LabelStand + " are required"})
	}
	if v, ok := news[pUserData]; ok && !v.IsSecret() && !v.IsComputed() {
		news = news.Copy()
		news[pUserData] = resource.MakeSecret(v)
	}
	return news, failures
}

func (serverResource) diff(_ context.Context, _ string, olds, news resource.PropertyMap) (*pulumirpc.DiffResponse, error) {
	resp := &pulumirpc.DiffResponse{DeleteBeforeReplace: true, HasDetailedDiff: true, DetailedDiff: map[string]*pulumirpc.PropertyDiff{}}
	for _, k := range replaceKeys {
		o, n := olds[resource.PropertyKey(k)], news[resource.PropertyKey(k)]
		if n.IsComputed() || !o.DeepEquals(n) {
			resp.Replaces = append(resp.Replaces, k)
			resp.Diffs = append(resp.Diffs, k)
			resp.DetailedDiff[k] = &pulumirpc.PropertyDiff{Kind: pulumirpc.PropertyDiff_UPDATE_REPLACE, InputDiff: true}
		}
	}
	for _, k := range []string{pLabels, pServerType} {
		if o, n := olds[resource.PropertyKey(k)], news[resource.PropertyKey(k)]; n.IsComputed() || !o.DeepEquals(n) {
			resp.Diffs = append(resp.Diffs, k)
			resp.DetailedDiff[k] = &pulumirpc.PropertyDiff{Kind: pulumirpc.PropertyDiff_UPDATE, InputDiff: true}
		}
	}
	// userData is deliberately not compared: cloud-init runs once, so a new template applies to new
	// servers only (seed §4), and a change must not replace a running server behind the user's back.
	resp.Changes = pulumirpc.DiffResponse_DIFF_NONE
	if len(resp.Diffs) > 0 {
		resp.Changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	sort.Strings(resp.Diffs)
	return resp, nil
}

// ErrNotOurs is returned when a server with the stand's name exists without our ownership labels.
var ErrNotOurs = errors.New("server exists and is not managed by stands-reconciler")

func (serverResource) create(ctx context.Context, cl call, in resource.PropertyMap, preview bool) (string, resource.PropertyMap, error) {
	if preview {
		return "", computed(in, pServerID, pPublicIPv4, pPrivateIP, pNetworkID), nil
	}
	c, err := cl.hc()
	if err != nil {
		return "", nil, err
	}
	args := decodeServerArgs(in)
	network, _, err := c.Network.GetByName(ctx, args.Network)
	if err != nil {
		return "", nil, fmt.Errorf("look up network %s: %w", args.Network, err)
	}
	if network == nil {
		return "", nil, fmt.Errorf("network %q does not exist in the Hetzner project", args.Network)
	}
	// Adopt a server left by a run that died between the API call and the state write.
	existing, _, err := c.Server.GetByName(ctx, args.Name)
	if err != nil {
		return "", nil, fmt.Errorf("look up server %s: %w", args.Name, err)
	}
	if existing != nil {
		if existing.Labels[LabelManagedBy] != ManagedByValue || existing.Labels[LabelStand] != args.Labels[LabelStand] {
			return "", nil, fmt.Errorf("server %s (id %d): %w", args.Name, existing.ID, ErrNotOurs)
		}
		srv, err := ensureAttached(ctx, c, existing, network)
		if err != nil {
			return "", nil, err
		}
		return strconv.FormatInt(srv.ID, 10), serverState(in, outputsOf(srv, network)), nil
	}
	key, _, err := c.SSHKey.GetByName(ctx, args.SSHKeyName)
	if err != nil {
		return "", nil, fmt.Errorf("look up SSH key %s: %w", args.SSHKeyName, err)
	}
	if key == nil {
		return "", nil, fmt.Errorf("SSH key %q does not exist in the Hetzner project", args.SSHKeyName)
	}
	res, _, err := c.Server.Create(ctx, hcloud.ServerCreateOpts{
		Name: args.Name, ServerType: &hcloud.ServerType{Name: args.ServerType}, Image: &hcloud.Image{Name: args.Image},
		Location: &hcloud.Location{Name: args.Location}, SSHKeys: []*hcloud.SSHKey{key}, UserData: args.UserData,
		Labels: args.Labels, Networks: []*hcloud.Network{network},
	})
	if err != nil {
		return "", nil, fmt.Errorf("create server %s: %w", args.Name, err)
	}
	if err := c.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
		// The server exists: report its id so the engine records it and a later run can fix it.
		return strconv.FormatInt(res.Server.ID, 10), nil, fmt.Errorf("create server %s: %w", args.Name, err)
	}
	srv, _, err := c.Server.GetByID(ctx, res.Server.ID)
	if err != nil || srv == nil {
		return strconv.FormatInt(res.Server.ID, 10), nil, fmt.Errorf("read created server %s: %v", args.Name, err)
	}
	return strconv.FormatInt(srv.ID, 10), serverState(in, outputsOf(srv, network)), nil
}

func ensureAttached(ctx context.Context, c *hcloud.Client, srv *hcloud.Server, network *hcloud.Network) (*hcloud.Server, error) {
	for _, p := range srv.PrivateNet {
		if p.Network != nil && p.Network.ID == network.ID {
			return srv, nil
		}
	}
	a, _, err := c.Server.AttachToNetwork(ctx, srv, hcloud.ServerAttachToNetworkOpts{Network: network})
	if err != nil {
		return nil, fmt.Errorf("attach server %s to network %s: %w", srv.Name, network.Name, err)
	}
	if err := c.Action.WaitFor(ctx, a); err != nil {
		return nil, fmt.Errorf("attach server %s to network %s: %w", srv.Name, network.Name, err)
	}
	got, _, err := c.Server.GetByID(ctx, srv.ID)
	if err != nil || got == nil {
		return nil, fmt.Errorf("read server %s: %v", srv.Name, err)
	}
	return got, nil
}

func outputsOf(srv *hcloud.Server, network *hcloud.Network) ServerOutputs {
	out := ServerOutputs{ServerID: srv.ID}
	if ip := srv.PublicNet.IPv4.IP; ip != nil && !srv.PublicNet.IPv4.IsUnspecified() {
		out.PublicIPv4 = ip.String()
	}
	for _, p := range srv.PrivateNet {
		if p.Network != nil && (network == nil || p.Network.ID == network.ID) {
			out.PrivateIP, out.NetworkID = p.IP.String(), p.Network.ID
		}
	}
	return out
}

func parseServerID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("server id %q is not a number", id)
	}
	return n, nil
}

func (serverResource) read(ctx context.Context, cl call, id string, st resource.PropertyMap) (string, resource.PropertyMap, error) {
	n, err := parseServerID(id)
	if err != nil {
		return "", nil, err
	}
	c, err := cl.hc()
	if err != nil {
		return "", nil, err
	}
	srv, _, err := c.Server.GetByID(ctx, n)
	if err != nil {
		return "", nil, fmt.Errorf("read server %s: %w", id, err)
	}
	if srv == nil {
		return "", nil, nil
	}
	in := st.Copy()
	for _, k := range []string{pServerID, pPublicIPv4, pPrivateIP, pNetworkID} {
		delete(in, resource.PropertyKey(k))
	}
	labels := resource.PropertyMap{}
	for k, v := range srv.Labels {
		labels[resource.PropertyKey(k)] = resource.NewStringProperty(v)
	}
	in[pLabels] = resource.NewObjectProperty(labels)
	return id, serverState(in, outputsOf(srv, nil)), nil
}

func (serverResource) update(ctx context.Context, cl call, id string, olds, news resource.PropertyMap, preview bool) (resource.PropertyMap, error) {
	out := ServerOutputs{}
	out.ServerID, _ = parseServerID(id)
	out.PublicIPv4, out.PrivateIP = stringProp(olds, pPublicIPv4), stringProp(olds, pPrivateIP)
	if v, ok := olds[pNetworkID]; ok && v.IsNumber() {
		out.NetworkID = int64(v.NumberValue())
	}
	if preview {
		return serverState(news, out), nil
	}
	c, err := cl.hc()
	if err != nil {
		return nil, err
	}
	args := decodeServerArgs(news)
	if from := stringProp(olds, pServerType); from != args.ServerType {
		cl.info(ctx, fmt.Sprintf("resizing server %s from %s to %s: shut down, change the type keeping the disk, power on", args.Name, from, args.ServerType))
		if err := resize(ctx, c, out.ServerID, args.ServerType); err != nil {
			return nil, fmt.Errorf("resize server %s from %s to %s: %w", args.Name, from, args.ServerType, err)
		}
	}
	if _, _, err := c.Server.Update(ctx, &hcloud.Server{ID: out.ServerID}, hcloud.ServerUpdateOpts{Labels: args.Labels}); err != nil {
		return nil, fmt.Errorf("update labels of server %s: %w", args.Name, err)
	}
	return serverState(news, out), nil
}

// resize changes a server's type in place: shut down (gracefully, then powered off if it does not
// stop), change the type without upgrading the disk (so a later downgrade stays possible), power on.
func resize(ctx context.Context, c *hcloud.Client, id int64, to string) error {
	srv := &hcloud.Server{ID: id}
	wait := func(a *hcloud.Action, _ *hcloud.Response, err error) error {
		if err != nil {
			return err
		}
		return c.Action.WaitFor(ctx, a)
	}
	if err := wait(c.Server.Shutdown(ctx, srv)); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		s, _, err := c.Server.GetByID(ctx, id)
		if err != nil {
			return fmt.Errorf("read server: %w", err)
		}
		if s != nil && s.Status == hcloud.ServerStatusOff {
			break
		}
		if time.Now().After(deadline) {
			if err := wait(c.Server.Poweroff(ctx, srv)); err != nil {
				return fmt.Errorf("power off after the shutdown did not stop it: %w", err)
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err := wait(c.Server.ChangeType(ctx, srv, hcloud.ServerChangeTypeOpts{ServerType: &hcloud.ServerType{Name: to}, UpgradeDisk: false})); err != nil {
		// Powered on again either way: a refused resize (a disk too large for the type) must not
		// leave the stand's server off.
		_ = wait(c.Server.Poweron(ctx, srv))
		return fmt.Errorf("change type: %w", err)
	}
	if err := wait(c.Server.Poweron(ctx, srv)); err != nil {
		return fmt.Errorf("power on: %w", err)
	}
	return nil
}

func (serverResource) delete(ctx context.Context, cl call, id string, st resource.PropertyMap) error {
	n, err := parseServerID(id)
	if err != nil {
		return err
	}
	c, err := cl.hc()
	if err != nil {
		return err
	}
	res, _, err := c.Server.DeleteWithResult(ctx, &hcloud.Server{ID: n})
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return nil // already gone: the goal is reached
	}
	if err != nil {
		return fmt.Errorf("delete server %s (id %s): %w", stringProp(st, pName), id, err)
	}
	if err := c.Action.WaitFor(ctx, res.Action); err != nil {
		return fmt.Errorf("delete server %s (id %s): %w", stringProp(st, pName), id, err)
	}
	return nil
}
