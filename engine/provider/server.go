package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/reason"
)

// ServerType is the Pulumi type token of a stand's server.
const ServerType = "stands:index:Server"

// Ownership labels: every server the reconciler creates carries them, and it reclaims or deletes only
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
	UserData   string            `json:"userData"` // secret; changes after create are ignored (docs/stands-engine.md#cloud-init)
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

// Inputs are the args as a program declares them, by the property names the provider reads back
// (decodeServerArgs): a string or a map of strings each. Secret names those a program must declare
// as Pulumi secrets.
func (a ServerArgs) Inputs() map[string]any {
	return map[string]any{
		pName: a.Name, pServerType: a.ServerType, pImage: a.Image, pLocation: a.Location, pNetwork: a.Network,
		pSSHKey: a.SSHKeyName, pLabels: a.Labels, pUserData: a.UserData,
	}
}

// SecretServerInputs are the server inputs kept secret in the state: user data may hold anything.
var SecretServerInputs = []string{pUserData}

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
	// servers only (docs/stands-engine.md#cloud-init), and a change must not replace a running server behind the user's back.
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
	c, err := cl.cloud()
	if err != nil {
		return "", nil, err
	}
	args := decodeServerArgs(in)
	network, err := c.Network(ctx, args.Network)
	if err != nil {
		return "", nil, fmt.Errorf("look up network %s: %w", args.Network, err)
	}
	if network == nil {
		return "", nil, reason.Wrap(reason.MissingPrereq, fmt.Errorf("network %q does not exist in the cloud project", args.Network))
	}
	// Reclaim a server left by a run that died between the API call and the state write.
	if id, state, found, err := reclaim(ctx, c, in, args, network); found || err != nil {
		return id, state, err
	}
	key, err := c.SSHKey(ctx, args.SSHKeyName)
	if err != nil {
		return "", nil, fmt.Errorf("look up SSH key %s: %w", args.SSHKeyName, err)
	}
	if key == nil {
		return "", nil, reason.Wrap(reason.MissingPrereq, fmt.Errorf("SSH key %q does not exist in the cloud project", args.SSHKeyName))
	}
	srv, err := c.CreateServer(ctx, cloud.CreateOptions{Name: args.Name, Type: args.ServerType, Image: args.Image, Location: args.Location,
		SSHKey: key, UserData: args.UserData, Labels: args.Labels, Network: network})
	if errors.Is(err, cloud.ErrNameTaken) {
		// A dead run's create the cloud finished after the look-up above: it is the stand's server.
		if id, state, found, rerr := reclaim(ctx, c, in, args, network); found || rerr != nil {
			return id, state, rerr
		}
	}
	if err != nil {
		if srv != nil {
			// The server exists: report its id so the engine records it and a later run can fix it.
			return strconv.FormatInt(srv.ID, 10), nil, err
		}
		return "", nil, err
	}
	return strconv.FormatInt(srv.ID, 10), serverState(in, outputsOf(srv, network)), nil
}

// reclaim takes over the server of the stand's name when it carries the stand's labels (found),
// refuses one that does not (ErrNotOurs); not found when there is none.
func reclaim(ctx context.Context, c cloud.Cloud, in resource.PropertyMap, args ServerArgs, network *cloud.Network) (string, resource.PropertyMap, bool, error) {
	existing, err := c.ServerByName(ctx, args.Name)
	if err != nil {
		return "", nil, false, fmt.Errorf("look up server %s: %w", args.Name, err)
	}
	if existing == nil {
		return "", nil, false, nil
	}
	if existing.Labels[LabelManagedBy] != ManagedByValue || existing.Labels[LabelStand] != args.Labels[LabelStand] {
		return "", nil, true, fmt.Errorf("server %s (id %d): %w", args.Name, existing.ID, ErrNotOurs)
	}
	srv, err := ensureAttached(ctx, c, existing, network)
	if err != nil {
		return "", nil, true, err
	}
	return strconv.FormatInt(srv.ID, 10), serverState(in, outputsOf(srv, network)), true, nil
}

func ensureAttached(ctx context.Context, c cloud.Cloud, srv *cloud.Server, network *cloud.Network) (*cloud.Server, error) {
	if _, ok := srv.PrivateIP(network.ID); ok {
		return srv, nil
	}
	return c.Attach(ctx, srv, network)
}

func outputsOf(srv *cloud.Server, network *cloud.Network) ServerOutputs {
	out := ServerOutputs{ServerID: srv.ID, PublicIPv4: srv.PublicIPv4}
	var id int64
	if network != nil {
		id = network.ID
	}
	// The last attachment of the network, as the engine always read it.
	for _, a := range srv.Private {
		if id == 0 || a.NetworkID == id {
			out.PrivateIP, out.NetworkID = a.IP, a.NetworkID
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
	c, err := cl.cloud()
	if err != nil {
		return "", nil, err
	}
	srv, err := c.Server(ctx, n)
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
	c, err := cl.cloud()
	if err != nil {
		return nil, err
	}
	args := decodeServerArgs(news)
	if from := stringProp(olds, pServerType); from != args.ServerType {
		cl.info(ctx, fmt.Sprintf("resizing server %s from %s to %s: shut down, change the type keeping the disk, power on", args.Name, from, args.ServerType))
		if err := c.Resize(ctx, out.ServerID, args.ServerType); err != nil {
			return nil, fmt.Errorf("resize server %s from %s to %s: %w", args.Name, from, args.ServerType, err)
		}
	}
	if err := c.SetLabels(ctx, out.ServerID, args.Labels); err != nil {
		return nil, fmt.Errorf("update labels of server %s: %w", args.Name, err)
	}
	return serverState(news, out), nil
}

func (serverResource) delete(ctx context.Context, cl call, id string, st resource.PropertyMap) error {
	n, err := parseServerID(id)
	if err != nil {
		return err
	}
	c, err := cl.cloud()
	if err != nil {
		return err
	}
	if err := c.DeleteServer(ctx, n); err != nil {
		return fmt.Errorf("delete server %s (id %s): %w", stringProp(st, pName), id, err)
	}
	return nil
}
