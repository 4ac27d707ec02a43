package engine

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestStateSecretsReadWithoutTheCLI: what the health check reads of a stack's state (its secrets
// decrypted with the passphrase, no Pulumi process) is what the CLI itself returns; a check of a
// stand without node work finds nothing to check and starts no process; a wrong passphrase is
// named as such.
func TestStateSecretsReadWithoutTheCLI(t *testing.T) {
	var counts string
	f := newFixtureWith(t, func(c *Config) {
		c.SkipNodes = true
		c.PulumiBin, counts = testenv.CountingPulumi(t, c.PulumiBin)
	})
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/two-node/stand.yml")
	res, err := f.eng.Apply(ctx, stand, false)
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, f.logs)
	}
	ref := stands.StackRef{Project: stand.Stand.Project, Env: stand.Stand.Env}
	before := testenv.CountProcesses(counts)

	outs, err := f.eng.stateOutputs(ctx, ref, "pulumi:pulumi:Stack")
	if err != nil {
		t.Fatal(err)
	}
	if len(outs["pulumi:pulumi:Stack"]) != 1 {
		t.Fatalf("stack resources: %d", len(outs["pulumi:pulumi:Stack"]))
	}
	stack := outs["pulumi:pulumi:Stack"][0]
	if got := stack[OutConnection]; !got.IsString() || got.StringValue() != string(res.Connection) {
		t.Errorf("the connection record read from the state differs from the CLI's (%d bytes against %d)", len(got.StringValue()), len(res.Connection))
	}
	if !strings.Contains(stack[OutConnection].StringValue(), exampleSecrets["SECRET_KV_PASSWORD"]) {
		t.Error("the connection record read from the state is not decrypted")
	}
	if key := stack[OutSSHPrivateKey]; !key.IsString() || !strings.HasPrefix(key.StringValue(), "-----BEGIN OPENSSH PRIVATE KEY-----") {
		t.Error("the stand's key read from the state is not a decrypted private key")
	}

	h, err := f.eng.Health(ctx, ref)
	if err != nil || !h.Healthy() || len(h.Instances) != 0 {
		t.Errorf("health of a servers-only stand: %+v, %v; want nothing to check", h, err)
	}
	if n := testenv.CountProcesses(counts) - before; n != 0 {
		t.Errorf("reading the state and checking health started %d Pulumi processes", n)
	}

	wrong := *f.eng
	wrong.cfg.Passphrase = "not-the-passphrase"
	wrong.crypters = &sync.Map{}
	if _, err := wrong.stateOutputs(ctx, ref, "pulumi:pulumi:Stack"); reason.Of(classified(err)) != reason.Passphrase {
		t.Errorf("a wrong passphrase: %v (reason %s)", err, reason.Of(classified(err)))
	}
}

func classified(err error) error {
	classify(&err)
	return err
}
