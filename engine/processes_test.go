package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/stands"
)

// TestPulumiProcessesPerOperation counts, with the engine's own counter of the Pulumi CLI processes it
// starts (stands_pulumi_cli_invocations_total), what each operation costs on the real CLI, and holds
// each to its floor: what the engine can read itself (whether a stack exists, its state and outputs)
// it reads from the backend (stackworkspace.go, readDeployment). On the way it holds that read equal
// to the CLI's own: the outputs `pulumi stack output` gives and the deployment `pulumi stack export`
// gives. On each cloud: the same floors hold on the fake second cloud, so the seam costs no process.
func TestPulumiProcessesPerOperation(t *testing.T) {
	for _, name := range clouds {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			pulumiProcessesPerOperation(t, newFixtureOn(t, name, func(c *Config) { c.Metrics = reg }), reg)
		})
	}
}

func pulumiProcessesPerOperation(t *testing.T, f *fixture, reg *prometheus.Registry) {
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/two-node/stand.yml")
	bigger := load(t, examples(t, ""), "stands/two-node/stand.yml")
	for _, p := range bigger.Stand.Profiles {
		p.ServerType = "cx32"
	}
	bigger.SpecHash += "-bigger"

	counted := map[string]int{}
	ops := []struct {
		name string
		max  int // the floor: what the operation cannot do without
		run  func() error
	}{
		{"create", 2, func() error { _, err := f.eng.Apply(ctx, stand, false); return err }},         // stack init, up
		{"no-op re-apply", 0, func() error { _, err := f.eng.Apply(ctx, stand, false); return err }}, // the spec is the applied one
		{"forced re-apply", 1, func() error { _, err := f.eng.Apply(ctx, stand, true); return err }},
		{"preview", 1, func() error { _, err := f.eng.Preview(ctx, bigger); return err }},
		{"update", 1, func() error { _, err := f.eng.Apply(ctx, bigger, false); return err }},
		{"refresh", 1, func() error { _, err := f.eng.Refresh(ctx, bigger); return err }},
		{"destroy", 2, func() error { // destroy, stack rm
			_, err := f.eng.Destroy(ctx, stands.StackRef{Project: "demo", Env: "two-node", StandID: "demo_demo_two-node"})
			return err
		}},
	}
	var table []string
	for i, op := range ops {
		before := cliRuns(t, reg)
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v\n%s", op.name, err, f.logs)
		}
		after := cliRuns(t, reg)
		n, by := 0, []string{}
		for cmd, c := range after {
			if d := c - before[cmd]; d > 0 {
				n += d
				by = append(by, fmt.Sprintf("%s %d", cmd, d))
			}
		}
		counted[op.name] = n
		table = append(table, fmt.Sprintf("%s: %d (%s)", op.name, n, strings.Join(by, ", ")))
		if n > op.max {
			t.Errorf("%s ran %d Pulumi processes (%s), want at most %d", op.name, n, strings.Join(by, ", "), op.max)
		}
		if i == 0 {
			t.Run("the state read equals the CLI's", func(t *testing.T) { sameAsTheCLI(t, f) })
		}
	}
	t.Logf("Pulumi processes per operation:\n%s", strings.Join(table, "\n"))
}

// sameAsTheCLI compares what the engine reads of the two-node stack's state with what the CLI says
// of it.
func sameAsTheCLI(t *testing.T, f *fixture) {
	ctx := context.Background()
	ref := stands.StackRef{Project: "demo", Env: "two-node"}
	st, err := f.eng.stack(ctx, ref, func(*pulumi.Context) error { return nil }, false)
	if err != nil {
		t.Fatal(err)
	}
	local := st.Workspace().(*stackWorkspace).Workspace // the Automation API's own: every answer a CLI run
	cliOuts, err := local.StackOutputs(ctx, st.Name())
	if err != nil {
		t.Fatal(err)
	}
	outs, err := st.Outputs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) < 5 || !reflect.DeepEqual(outs, cliOuts) {
		t.Errorf("outputs from the state differ from the CLI's:\nstate %v\nCLI   %v", keysAndSecrets(outs), keysAndSecrets(cliOuts))
	}
	secrets := 0
	for _, o := range outs {
		if o.Secret {
			secrets++
		}
	}
	if secrets == 0 {
		t.Error("no secret among the outputs: the comparison proves nothing about them")
	}
	exported, err := local.ExportStack(ctx, st.Name())
	if err != nil {
		t.Fatal(err)
	}
	var cliDep deployment
	if err := json.Unmarshal(exported.Deployment, &cliDep); err != nil {
		t.Fatal(err)
	}
	dep, err := f.eng.readDeployment(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(dep.Resources) < 3 || !reflect.DeepEqual(*dep, cliDep) {
		t.Errorf("the deployment read from the state differs from the CLI's export (%d and %d resources)", len(dep.Resources), len(cliDep.Resources))
	}
}

// keysAndSecrets shows outputs without their values (some are keys): each name and whether secret.
func keysAndSecrets(m auto.OutputMap) map[string]bool {
	out := map[string]bool{}
	for k, v := range m {
		out[k] = v.Secret
	}
	return out
}

// cliRuns reads the engine's counter of CLI processes, by command.
func cliRuns(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "stands_pulumi_cli_invocations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "command" {
					out[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}
