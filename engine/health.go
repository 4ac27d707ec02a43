package engine

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"

	"github.com/stands-engine/stands-reconciler/engine/node"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// HealthOptions tune a health check.
type HealthOptions struct {
	// Hooks runs the post-start hooks apps declare probes (hooks.post_start.probe).
	Hooks bool
	// Wait bounds the wait for each server to answer (defaultHealthWait): a check is cheap or it is
	// not done; a server down is reported, not waited for.
	Wait time.Duration
}

// defaultHealthWait is how long a check waits for a server to answer.
const defaultHealthWait = 20 * time.Second

// Health is the live health check as the reconciler runs it (reconcile.Checker): HealthWith, the
// hooks apps declare probes run.
func (e *Engine) Health(ctx context.Context, ref stands.StackRef) (*stands.Health, error) {
	return e.HealthWith(ctx, ref, HealthOptions{Hooks: true})
}

// HealthWith checks a stand's instances on its servers, over SSH with the host keys pinned at their
// setup, and starts no Pulumi process: the targets come from the stack's state file, read through
// the backend's blob driver and decrypted with the passphrase (the stand's key is a secret there).
// It changes nothing on the servers. A stand without node work in its state (servers-only mode, or
// none applied yet) has nothing to check.
func (e *Engine) HealthWith(ctx context.Context, ref stands.StackRef, o HealthOptions) (_ *stands.Health, err error) {
	defer classify(&err)
	targets, err := e.targets(ctx, ref)
	if err != nil {
		return nil, err
	}
	if o.Wait <= 0 {
		o.Wait = defaultHealthWait
	}
	h := &stands.Health{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			hs, err := probeTarget(ctx, t, o)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				h.Unreachable = append(h.Unreachable, stands.UnreachableNode{Server: t.Server, Error: err.Error()})
				return
			}
			for _, x := range hs {
				h.Instances = append(h.Instances, stands.InstanceHealth{Instance: x.Instance, Server: t.Server, Unit: x.Unit, State: x.State, Restarts: x.Restarts, Problems: x.Problems})
			}
		})
	}
	wg.Wait()
	sortHealth(h)
	return h, ctx.Err()
}

func sortHealth(h *stands.Health) {
	slices.SortFunc(h.Instances, func(a, b stands.InstanceHealth) int {
		return cmp.Or(strings.Compare(a.Server, b.Server), strings.Compare(a.Instance, b.Instance))
	})
	slices.SortFunc(h.Unreachable, func(a, b stands.UnreachableNode) int { return strings.Compare(a.Server, b.Server) })
}

func probeTarget(ctx context.Context, t provider.Target, o HealthOptions) ([]node.InstanceHealth, error) {
	conn, err := t.Dial(ctx, o.Wait)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return node.Probe(ctx, conn, t.App, t.Deployments, node.ProbeOptions{Hooks: o.Hooks})
}

// ErrNoInstance: the stand's state has no such instance.
var ErrNoInstance = errors.New("no such instance in the stand's state")

// Restart restarts one instance's unit on its server (a heal's first step), without Pulumi.
func (e *Engine) Restart(ctx context.Context, ref stands.StackRef, instance string) (err error) {
	defer classify(&err)
	targets, err := e.targets(ctx, ref)
	if err != nil {
		return err
	}
	for _, t := range targets {
		for _, d := range t.Deployments {
			if node.InstanceName(d.Instance) != instance {
				continue
			}
			conn, err := t.Dial(ctx, defaultHealthWait)
			if err != nil {
				return err
			}
			defer conn.Close()
			return node.Restart(ctx, conn, t.App, d)
		}
	}
	return fmt.Errorf("restart %s of %s/%s: %w", instance, ref.Project, ref.Env, ErrNoInstance)
}

// targets reads the stand's servers and instances from its stack file.
func (e *Engine) targets(ctx context.Context, ref stands.StackRef) ([]provider.Target, error) {
	res, err := e.stateOutputs(ctx, ref, provider.NodeType, provider.InstanceType)
	if err != nil {
		return nil, err
	}
	return provider.Targets(res[provider.NodeType], res[provider.InstanceType])
}

// stateOutputs reads the outputs of a stack's resources of the given types from its state file,
// secrets decrypted, without the CLI.
func (e *Engine) stateOutputs(ctx context.Context, ref stands.StackRef, types ...string) (map[string][]resource.PropertyMap, error) {
	data, err := e.stackBytes(ctx, ref)
	if err != nil || data == nil {
		return nil, err
	}
	var cp stackFile
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, fmt.Errorf("parse the state of %s/%s: %w", ref.Project, ref.Env, err)
	}
	latest := cp.Checkpoint.Latest
	if latest == nil {
		return nil, nil
	}
	out := map[string][]resource.PropertyMap{}
	decrypter := e.decrypterFor(latest.Secrets.Type, latest.Secrets.State.Salt)
	for _, r := range latest.Resources {
		if !slices.Contains(types, r.Type) {
			continue
		}
		outs, err := decryptAll(ctx, decrypter, r.Outputs)
		if err != nil {
			return nil, fmt.Errorf("the state of %s/%s: %w", ref.Project, ref.Env, err)
		}
		m, _ := outs.(map[string]any)
		out[r.Type] = append(out[r.Type], resource.NewPropertyMapFromMap(m))
	}
	return out, nil
}

// decrypterFor defers decrypter until a secret needs it: a state without secrets reads under any
// secrets provider. decrypter keeps each salt's, so calling it again costs a lookup.
func (e *Engine) decrypterFor(typ, salt string) func() (config.Decrypter, error) {
	return func() (config.Decrypter, error) { return e.decrypter(typ, salt) }
}

// decrypter is the passphrase secrets provider's crypter for a stack's salt. Deriving its key is
// slow on purpose (PBKDF2), so each salt's is kept.
func (e *Engine) decrypter(typ, salt string) (config.Decrypter, error) {
	if typ != "passphrase" {
		return nil, fmt.Errorf("secrets provider %q: only passphrase is read", typ)
	}
	if d, ok := e.crypters.Load(salt); ok {
		return d.(config.Decrypter), nil
	}
	parts := strings.Split(salt, ":")
	if len(parts) < 2 || parts[0] != "v1" {
		return nil, errors.New("the passphrase secrets provider's salt is unreadable")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("the passphrase secrets provider's salt is unreadable")
	}
	d := config.NewSymmetricCrypterFromPassphrase(e.cfg.Passphrase, raw)
	// The salt's own check message tells a wrong passphrase from a damaged value.
	if len(parts) > 2 {
		if _, err := d.DecryptValue(context.Background(), strings.Join(parts[2:], ":")); err != nil {
			return nil, fmt.Errorf("incorrect passphrase: %w", err)
		}
	}
	e.crypters.Store(salt, d)
	return d, nil
}

// decryptAll returns a checkpoint value with its secrets decrypted, no longer marked as secrets.
func decryptAll(ctx context.Context, decrypter func() (config.Decrypter, error), v any) (any, error) {
	shown, err := revealAll(ctx, decrypter, v)
	if err != nil {
		return nil, err
	}
	plain, _, err := revealed(shown)
	return plain, err
}
