package provider

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/stands-engine/stands-reconciler/engine/node"
)

// Target is one server of a stand as a health check reaches it, from the stand's state: how to
// connect (the stand's key, the host key pinned at its setup) and what runs there.
type Target struct {
	Server      string // the server's name
	App         node.AppUser
	Deployments []node.Deployment

	host, user, privateKey, hostKey string
}

// Dial connects to the target's server as its apply did, the host key pinned; wait bounds the wait
// for it to answer.
func (t Target) Dial(ctx context.Context, wait time.Duration) (*node.Conn, error) {
	if t.hostKey == "" {
		return nil, fmt.Errorf("reach %s: no pinned host key in the state", t.Server)
	}
	conn, _, err := dialNode(ctx, t.host, t.user, t.privateKey, t.hostKey, wait, nil)
	if err != nil {
		return nil, fmt.Errorf("reach %s: %w", t.Server, err)
	}
	return conn, nil
}

// Targets gathers a stand's servers and their instances from the outputs of its Node and Instance
// resources (secrets decrypted). A node set up but running no instance is a target too: its setup
// is what a check finds unreachable.
func Targets(nodes, instances []resource.PropertyMap) ([]Target, error) {
	byServer := map[string]*Target{}
	for _, n := range nodes {
		if stringProp(n, pHostKey) == "" {
			continue // never set up: nothing to check there yet
		}
		t := &Target{Server: stringProp(n, pServerName), App: appUserOf(n), host: stringProp(n, pHost), user: stringProp(n, pUser),
			privateKey: stringProp(n, pPrivateKey), hostKey: stringProp(n, pHostKey)}
		byServer[t.Server] = t
	}
	for _, in := range instances {
		d, _, err := deploymentOf(in)
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", instanceID(in), err)
		}
		t, ok := byServer[stringProp(in, pServerName)]
		if !ok {
			continue // its node's setup is not in the state: an unfinished first apply
		}
		t.Deployments = append(t.Deployments, d)
	}
	var out []Target
	for _, t := range byServer {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out, nil
}
