package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/engine/node"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// Type tokens of the work on a server (steps 8–12 of docs/stands-engine.md#create): a Node is the server's setup, Images the
// registry pulls, an Instance one app instance's files, unit and hook.
const (
	NodeType     = "stands:index:Node"
	ImagesType   = "stands:index:Images"
	InstanceType = "stands:index:Instance"
)

// Environment the engine sets for the provider: whether an operation may connect to servers.
const (
	// EnvNoSSH set to 1 makes deletes forget node work without connecting: a whole-stand destroy
	// (the servers go away, reachable or not) and servers-only mode.
	EnvNoSSH = "STANDS_NO_SSH"
	// EnvKeepServers lists (comma-separated) the servers that stay after this operation; an
	// instance's delete removes its unit over SSH only when its server is one of them.
	EnvKeepServers = "STANDS_KEEP_SERVERS"
)

// Property names shared by the node resources.
const (
	pHost, pUser, pPrivateKey, pHostKey, pAppUser, pAppUID, pAppHome, pFlavour = "host", "user", "privateKey", "hostKey", "appUser", "appUid", "appHome", "flavour"
	// pGeneratedHostKey is the host key the engine made for the node and gave its server through
	// cloud-init: pinned before the first connection (no trust on first use). Empty for nodes of
	// earlier versions, whose key was pinned at first contact.
	pGeneratedHostKey                                         = "generatedHostKey"
	pPorts, pPodman, pImages, pRegistries, pSpec, pConfigHash = "ports", "podmanVersion", "images", "registries", "spec", "configHash"
	pStandID, pApp, pInstance, pNode, pServerName             = "standId", "app", "instance", "node", "serverName"
	// pDrift is what a read found changed on the node since the last apply ("unit inactive; port
	// 8080/tcp not listening in the pod"), in a refreshed state only: an apply's outputs never have
	// it. Places, never content.
	pDrift = "drift"
)

// InstanceSpec is everything an instance deploys, carried as one secret input (its files hold
// secrets). The configuration hash, a plain input next to it, is what a plan shows as changed.
type InstanceSpec struct {
	Pod         []byte          `json:"pod"`
	Files       []SpecFile      `json:"files,omitempty"`
	Images      []string        `json:"images,omitempty"`
	Ports       []manifest.Port `json:"ports,omitempty"`
	Hook        *SpecFile       `json:"hook,omitempty"`
	HookTimeout time.Duration   `json:"hookTimeout,omitempty"`
	// HookProbe: the hook may be run again as a health probe (manifest.Hook.Probe).
	HookProbe bool `json:"hookProbe,omitempty"`
}

// SpecFile is a rendered file: where it goes, its mode and content.
type SpecFile struct {
	Src     string `json:"src"`
	Dest    string `json:"dest,omitempty"`
	Mode    uint32 `json:"mode"`
	Content []byte `json:"content"`
}

// SpecOf is the spec of a rendered instance.
func SpecOf(in *manifest.RenderedInstance) InstanceSpec {
	s := InstanceSpec{Pod: in.Pod, Images: in.Images, Ports: in.Ports}
	for _, f := range in.Files {
		s.Files = append(s.Files, SpecFile{Src: f.Src, Dest: f.Dest, Mode: uint32(f.Mode.Perm()), Content: f.Content})
	}
	if in.PostStart != nil {
		s.Hook = &SpecFile{Src: in.PostStart.Src, Mode: 0o700, Content: in.PostStart.Content}
		if in.PostStartHook != nil {
			s.HookTimeout, s.HookProbe = in.PostStartHook.Timeout, in.PostStartHook.Probe
		}
	}
	return s
}

func (s InstanceSpec) rendered(app, instance, nodeName string) *manifest.RenderedInstance {
	in := &manifest.RenderedInstance{App: app, Instance: instance, Node: nodeName, Pod: s.Pod, Images: s.Images, Ports: s.Ports}
	for _, f := range s.Files {
		in.Files = append(in.Files, manifest.RenderedFile{Src: f.Src, Dest: f.Dest, Mode: osMode(f.Mode), Content: f.Content})
	}
	if s.Hook != nil {
		in.PostStart = &manifest.RenderedFile{Src: s.Hook.Src, Mode: 0o700, Content: s.Hook.Content}
		in.PostStartHook = &manifest.Hook{Src: s.Hook.Src, Timeout: s.HookTimeout, Probe: s.HookProbe}
	}
	return in
}

func osMode(m uint32) os.FileMode { return os.FileMode(m).Perm() }

// required checks that every key is a non-empty string (or unknown, during a preview).
func required(news resource.PropertyMap, keys ...string) []*pulumirpc.CheckFailure {
	var failures []*pulumirpc.CheckFailure
	for _, k := range keys {
		v, ok := news[resource.PropertyKey(k)]
		if !ok || v.IsNull() || (v.IsString() && v.StringValue() == "") {
			failures = append(failures, &pulumirpc.CheckFailure{Property: k, Reason: k + " is required"})
		}
	}
	return failures
}

// secretInputs marks the given inputs secret, whatever the program did.
func secretInputs(news resource.PropertyMap, keys ...string) resource.PropertyMap {
	news = news.Copy()
	for _, k := range keys {
		if v, ok := news[resource.PropertyKey(k)]; ok && !v.IsSecret() && !v.IsComputed() {
			news[resource.PropertyKey(k)] = resource.MakeSecret(v)
		}
	}
	return news
}

// inputDiff: every changed input is an update, those in replace a replacement.
func inputDiff(olds, news resource.PropertyMap, replace ...string) *pulumirpc.DiffResponse {
	resp := &pulumirpc.DiffResponse{HasDetailedDiff: true, DetailedDiff: map[string]*pulumirpc.PropertyDiff{}}
	keys := map[resource.PropertyKey]bool{}
	for k := range olds {
		keys[k] = true
	}
	for k := range news {
		keys[k] = true
	}
	for k := range keys {
		o, n := olds[k], news[k]
		if !n.IsComputed() && o.DeepEquals(n) {
			continue
		}
		kind := pulumirpc.PropertyDiff_UPDATE
		if slices.Contains(replace, string(k)) {
			kind = pulumirpc.PropertyDiff_UPDATE_REPLACE
			resp.Replaces = append(resp.Replaces, string(k))
		}
		resp.Diffs = append(resp.Diffs, string(k))
		resp.DetailedDiff[string(k)] = &pulumirpc.PropertyDiff{Kind: kind, InputDiff: true}
	}
	sort.Strings(resp.Diffs)
	sort.Strings(resp.Replaces)
	resp.Changes = pulumirpc.DiffResponse_DIFF_NONE
	if len(resp.Diffs) > 0 {
		resp.Changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	return resp
}

func numberProp(m resource.PropertyMap, key string) int64 {
	v := m[resource.PropertyKey(key)]
	if v.IsSecret() {
		v = v.SecretValue().Element
	}
	if v.IsNumber() {
		return int64(v.NumberValue())
	}
	return 0
}

func stringsProp(m resource.PropertyMap, key string) []string {
	v := m[resource.PropertyKey(key)]
	if !v.IsArray() {
		return nil
	}
	var out []string
	for _, e := range v.ArrayValue() {
		if e.IsString() {
			out = append(out, e.StringValue())
		}
	}
	return out
}

// connect dials a node as its state or inputs describe it: the stand's key, and the host key pinned
// at the node's first contact (none: this is the first contact, and the key offered is returned).
func connect(ctx context.Context, c call, m resource.PropertyMap, pinned string, wait time.Duration) (*node.Conn, ssh.PublicKey, error) {
	progress := func(msg string) { c.info(ctx, msg) }
	return dialNode(ctx, stringProp(m, pHost), stringProp(m, pUser), stringProp(m, pPrivateKey), pinned, wait, progress)
}

// dialNode dials host:22 as user with the stand's private key and the pinned host key ("": a first
// contact); progress, when set, hears about the wait.
func dialNode(ctx context.Context, host, user, privateKey, pinned string, wait time.Duration, progress func(string)) (*node.Conn, ssh.PublicKey, error) {
	signer, err := ssh.ParsePrivateKey([]byte(privateKey))
	if err != nil {
		return nil, nil, fmt.Errorf("the stand's SSH key: %w", err)
	}
	o := node.DialOptions{User: user, Signer: signer, Wait: wait, Progress: progress}
	if pinned != "" {
		if o.HostKey, _, _, _, err = ssh.ParseAuthorizedKey([]byte(pinned)); err != nil {
			return nil, nil, fmt.Errorf("the pinned host key of %s: %w", host, err)
		}
	}
	addr := net.JoinHostPort(host, "22")
	if progress != nil {
		progress("connecting to " + addr)
	}
	return node.Dial(ctx, addr, o)
}

func appUserOf(m resource.PropertyMap) node.AppUser {
	return node.AppUser{Name: stringProp(m, pAppUser), UID: int(numberProp(m, pAppUID)), Home: stringProp(m, pAppHome)}
}

// nodeResource sets a server up for the stand's instances (node.Prepare) and pins its host key.
type nodeResource struct{}

var nodeOutputs = []string{pHostKey, pAppUID, pAppHome, pPodman, pFlavour}

func (nodeResource) check(_ context.Context, news resource.PropertyMap) (resource.PropertyMap, []*pulumirpc.CheckFailure) {
	return secretInputs(news, pPrivateKey), required(news, pHost, pUser, pPrivateKey, pAppUser)
}

func (nodeResource) diff(_ context.Context, _ string, olds, news resource.PropertyMap) (*pulumirpc.DiffResponse, error) {
	// The generated key matters at a first contact only: a server already set up keeps the key it
	// was pinned with, so a node of an earlier version is not set up again for it.
	if numberProp(olds, pServerID) == numberProp(news, pServerID) {
		olds, news = olds.Copy(), news.Copy()
		delete(olds, pGeneratedHostKey)
		delete(news, pGeneratedHostKey)
	}
	return inputDiff(olds, news), nil
}

func parsePorts(specs []string) ([]manifest.Port, error) {
	var out []manifest.Port
	for _, s := range specs {
		// "<number>/<proto>@<zone>"
		num, rest, _ := strings.Cut(s, "/")
		proto, zone, _ := strings.Cut(rest, "@")
		n, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("port %q", s)
		}
		out = append(out, manifest.Port{Number: n, Proto: proto, Zone: zone})
	}
	return out, nil
}

// PortSpec is how a Node takes a role port: "<number>/<proto>@<zone>".
func PortSpec(p manifest.Port) string {
	zone := p.Zone
	if zone == "" {
		zone = "public"
	}
	return p.String() + "@" + zone
}

// setup prepares the node; closed are role ports an earlier setup opened that no instance serves now.
func (r nodeResource) setup(ctx context.Context, c call, in resource.PropertyMap, pinned string, closed []string) (resource.PropertyMap, error) {
	host := stringProp(in, pHost)
	conn, key, err := connect(ctx, c, in, pinned, 15*time.Minute)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ports, err := parsePorts(stringsProp(in, pPorts))
	if err != nil {
		return nil, err
	}
	gone, err := parsePorts(closed)
	if err != nil {
		return nil, err
	}
	if err := node.ClosePorts(ctx, conn, gone); err != nil {
		return nil, fmt.Errorf("set up node %s: %w", host, err)
	}
	c.info(ctx, "setting up "+host+": cloud-init, user systemd, Podman, firewalld")
	prep, err := node.Prepare(ctx, conn, stringProp(in, pAppUser), ports)
	if err != nil {
		return nil, fmt.Errorf("set up node %s: %w", host, err)
	}
	out := in.Copy()
	out[pHostKey] = resource.NewStringProperty(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))))
	out[pAppUID] = resource.NewNumberProperty(float64(prep.AppUID))
	out[pAppHome] = resource.NewStringProperty(prep.AppHome)
	out[pPodman] = resource.NewStringProperty(prep.PodmanVersion)
	out[pFlavour] = resource.NewStringProperty(string(prep.Flavour))
	return out, nil
}

func computed(in resource.PropertyMap, keys ...string) resource.PropertyMap {
	out := in.Copy()
	for _, k := range keys {
		out[resource.PropertyKey(k)] = resource.MakeComputed(resource.NewStringProperty(""))
	}
	return out
}

func (r nodeResource) create(ctx context.Context, c call, in resource.PropertyMap, preview bool) (string, resource.PropertyMap, error) {
	if preview {
		return "", computed(in, nodeOutputs...), nil
	}
	out, err := r.setup(ctx, c, in, stringProp(in, pGeneratedHostKey), nil)
	if err != nil {
		return "", nil, err
	}
	return stringProp(in, pServerName), out, nil
}

// read looks at the node's setup: linger, user systemd, the Podman socket, the network.
func (nodeResource) read(ctx context.Context, c call, id string, st resource.PropertyMap) (string, resource.PropertyMap, error) {
	return readNode(ctx, c, id, st, func(conn *node.Conn) ([]string, error) {
		return node.NodeProblems(ctx, conn, appUserOf(st))
	})
}

// readWait bounds a read's wait for its node: a refresh must not hang for minutes on one that is down.
const readWait = 30 * time.Second

// readNode reads a node resource back from its server. A server that cannot be reached, or answers
// with another host key, leaves the state as it was, with a warning: it is never taken for a
// resource that is gone (which a refresh would forget, and the next apply make again).
func readNode(ctx context.Context, c call, id string, st resource.PropertyMap, look func(*node.Conn) ([]string, error)) (string, resource.PropertyMap, error) {
	if os.Getenv(EnvNoSSH) == "1" || stringProp(st, pHostKey) == "" {
		return id, st, nil
	}
	name := readName(st)
	conn, _, err := connect(ctx, c, st, stringProp(st, pHostKey), readWait)
	if err != nil {
		c.warn(ctx, fmt.Sprintf("%s: not read: node unreachable: %v", name, err))
		return id, st, nil
	}
	defer conn.Close()
	problems, err := look(conn)
	if err != nil {
		c.warn(ctx, fmt.Sprintf("%s: not read: %v", name, err))
		return id, st, nil
	}
	out := st.Copy()
	delete(out, pDrift)
	if len(problems) > 0 {
		msg := strings.Join(problems, "; ")
		out[pDrift] = resource.NewStringProperty(msg)
		c.warn(ctx, name+": "+msg)
	}
	return id, out, nil
}

// readName names a node resource in a read's messages: its instance (web--front), or its server.
func readName(st resource.PropertyMap) string {
	if app := stringProp(st, pApp); app != "" {
		return app + "--" + stringProp(st, pInstance)
	}
	return stringProp(st, pServerName)
}

func (r nodeResource) update(ctx context.Context, c call, _ string, olds, news resource.PropertyMap, preview bool) (resource.PropertyMap, error) {
	// A new server (a replacement) has a new host key: it is a first contact again.
	pinned := stringProp(olds, pHostKey)
	sameServer := numberProp(olds, pServerID) == numberProp(news, pServerID) && stringProp(olds, pHost) == stringProp(news, pHost)
	if !sameServer {
		pinned = stringProp(news, pGeneratedHostKey) // a first contact: "" for a node of an earlier version
	}
	if preview {
		if !sameServer {
			return computed(news, nodeOutputs...), nil
		}
		out := news.Copy()
		for _, k := range nodeOutputs {
			out[resource.PropertyKey(k)] = olds[resource.PropertyKey(k)]
		}
		return out, nil
	}
	var closed []string
	if sameServer {
		for _, p := range stringsProp(olds, pPorts) {
			if !slices.Contains(stringsProp(news, pPorts), p) {
				closed = append(closed, p)
			}
		}
	}
	return r.setup(ctx, c, news, pinned, closed)
}

// delete leaves the server as it is: it goes away with the stand, or keeps a harmless setup.
func (nodeResource) delete(context.Context, call, string, resource.PropertyMap) error { return nil }

// imagesResource pulls a node's images (node.PullImages).
type imagesResource struct{}

func (imagesResource) check(_ context.Context, news resource.PropertyMap) (resource.PropertyMap, []*pulumirpc.CheckFailure) {
	return secretInputs(news, pPrivateKey, pRegistries), required(news, pHost, pUser, pPrivateKey, pHostKey, pAppUser)
}

func (imagesResource) diff(_ context.Context, _ string, olds, news resource.PropertyMap) (*pulumirpc.DiffResponse, error) {
	return inputDiff(olds, news), nil
}

func (imagesResource) pull(ctx context.Context, c call, in resource.PropertyMap) error {
	var regs []node.Registry
	if err := json.Unmarshal([]byte(stringProp(in, pRegistries)), &regs); err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	conn, _, err := connect(ctx, c, in, stringProp(in, pHostKey), 5*time.Minute)
	if err != nil {
		return err
	}
	defer conn.Close()
	c.info(ctx, fmt.Sprintf("pulling %d images on %s", len(stringsProp(in, pImages)), stringProp(in, pHost)))
	return node.PullImages(ctx, conn, appUserOf(in), regs)
}

func (r imagesResource) create(ctx context.Context, c call, in resource.PropertyMap, preview bool) (string, resource.PropertyMap, error) {
	if !preview {
		if err := r.pull(ctx, c, in); err != nil {
			return "", nil, err
		}
	}
	return stringProp(in, pServerName), in, nil
}

// read looks for the node's images in the app user's Podman store.
func (imagesResource) read(ctx context.Context, c call, id string, st resource.PropertyMap) (string, resource.PropertyMap, error) {
	return readNode(ctx, c, id, st, func(conn *node.Conn) ([]string, error) {
		missing, err := node.MissingImages(ctx, conn, appUserOf(st), stringsProp(st, pImages))
		for i, img := range missing {
			missing[i] = "image " + img + " missing"
		}
		return missing, err
	})
}

func (r imagesResource) update(ctx context.Context, c call, _ string, _, news resource.PropertyMap, preview bool) (resource.PropertyMap, error) {
	if !preview {
		if err := r.pull(ctx, c, news); err != nil {
			return nil, err
		}
	}
	return news, nil
}

// delete keeps the images: the node's Podman store is a cache.
func (imagesResource) delete(context.Context, call, string, resource.PropertyMap) error { return nil }

// instanceResource is one app instance (node.Deploy / node.Remove).
type instanceResource struct{}

func (instanceResource) check(_ context.Context, news resource.PropertyMap) (resource.PropertyMap, []*pulumirpc.CheckFailure) {
	return secretInputs(news, pPrivateKey, pSpec), required(news, pHost, pUser, pPrivateKey, pHostKey, pAppUser, pAppHome, pFlavour, pStandID, pApp, pInstance, pNode, pSpec)
}

// diff: a new node is a new instance (made there before the old one is removed); anything else is
// an update, which restarts the unit only when what it runs changed.
func (instanceResource) diff(_ context.Context, _ string, olds, news resource.PropertyMap) (*pulumirpc.DiffResponse, error) {
	return inputDiff(olds, news, pNode), nil
}

func deploymentOf(m resource.PropertyMap) (node.Deployment, node.AppUser, error) {
	var spec InstanceSpec
	if err := json.Unmarshal([]byte(stringProp(m, pSpec)), &spec); err != nil {
		return node.Deployment{}, node.AppUser{}, fmt.Errorf("instance spec: %w", err)
	}
	u := appUserOf(m)
	in := spec.rendered(stringProp(m, pApp), stringProp(m, pInstance), stringProp(m, pNode))
	return node.Layout(stringProp(m, pStandID), in, u, node.Flavour(stringProp(m, pFlavour)), stringProp(m, pConfigHash)), u, nil
}

// deploy deploys an instance; prev is the state it replaces (an update), nil for a create. touched
// reports whether anything may have changed on the node (a failure after connecting).
func (instanceResource) deploy(ctx context.Context, c call, in, prev resource.PropertyMap) (touched bool, err error) {
	d, u, err := deploymentOf(in)
	if err != nil {
		return false, err
	}
	o := node.DeployOptions{Progress: func(msg string) { c.info(ctx, msg) }}
	if prev != nil {
		if p, _, err := deploymentOf(prev); err == nil {
			o.Previous = &p
		}
	}
	conn, _, err := connect(ctx, c, in, stringProp(in, pHostKey), 5*time.Minute)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	_, err = node.Deploy(ctx, conn, u, d, o)
	return true, err
}

func instanceID(in resource.PropertyMap) string {
	return stringProp(in, pStandID) + "/" + stringProp(in, pApp) + "--" + stringProp(in, pInstance)
}

func (r instanceResource) create(ctx context.Context, c call, in resource.PropertyMap, preview bool) (string, resource.PropertyMap, error) {
	if !preview {
		if touched, err := r.deploy(ctx, c, in, nil); err != nil {
			if touched {
				// Files or a unit may be on the node: the state keeps the instance, so the next run
				// retries it (an update) and a delete can remove it.
				return instanceID(in), in, &initFailed{err}
			}
			return "", nil, err
		}
	}
	return instanceID(in), in, nil
}

// read looks at the instance on its node (node.Probe with its files): a stopped or missing unit,
// another configuration running, a port the app does not listen on, a file changed by hand.
func (instanceResource) read(ctx context.Context, c call, id string, st resource.PropertyMap) (string, resource.PropertyMap, error) {
	return readNode(ctx, c, id, st, func(conn *node.Conn) ([]string, error) {
		d, u, err := deploymentOf(st)
		if err != nil {
			return nil, err
		}
		hs, err := node.Probe(ctx, conn, u, []node.Deployment{d}, node.ProbeOptions{Files: true})
		if err != nil {
			return nil, err
		}
		return hs[0].Problems, nil
	})
}

func (r instanceResource) update(ctx context.Context, c call, _ string, olds, news resource.PropertyMap, preview bool) (resource.PropertyMap, error) {
	if !preview {
		if _, err := r.deploy(ctx, c, news, olds); err != nil {
			return nil, err
		}
	}
	return news, nil
}

// delete removes the instance from its server when the server stays (docs/architecture.md#node-work); a server that goes
// away takes the instance with it, and is never connected to. A server that is not the one the
// instance was deployed to (deleted already, or another one under the same name) holds nothing of it.
func (instanceResource) delete(ctx context.Context, c call, _ string, st resource.PropertyMap) error {
	server := stringProp(st, pServerName)
	if os.Getenv(EnvNoSSH) == "1" || !slices.Contains(strings.Split(os.Getenv(EnvKeepServers), ","), server) {
		return nil
	}
	if id := numberProp(st, pServerID); id != 0 {
		if cl, err := c.cloud(); err == nil {
			srv, err := cl.Server(ctx, id)
			if err != nil {
				return fmt.Errorf("look up server %s (id %d): %w", server, id, err)
			}
			if srv == nil {
				c.info(ctx, fmt.Sprintf("server %s (id %d) is gone: nothing to remove", server, id))
				return nil
			}
		}
	}
	d, u, err := deploymentOf(st)
	if err != nil {
		return err
	}
	conn, _, err := connect(ctx, c, st, stringProp(st, pHostKey), 2*time.Minute)
	if errors.Is(err, node.ErrHostKeyChanged) {
		c.info(ctx, server+" is another machine than the instance's: nothing to remove")
		return nil
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	c.info(ctx, "removing "+d.Instance.App+"/"+d.Instance.Instance+" from "+server)
	return node.Remove(ctx, conn, u, d)
}

// initFailed is a create that failed after it changed something: the resource exists, unfinished.
type initFailed struct{ err error }

func (e *initFailed) Error() string { return e.err.Error() }
func (e *initFailed) Unwrap() error { return e.err }
