package engine

import (
	"context"
	"io"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stands-engine/stands-reconciler/stands"
)

// stackWorkspace is the Automation API's local workspace for one stack, with what the engine can
// answer without a Pulumi process answered here: whether the stack exists and its outputs come from
// its state file (readDeployment), and the summary the Automation API reads after every up, refresh
// and destroy, which the engine never uses, is not read at all. Every other call is the local
// workspace's. A create is then two Pulumi processes (stack init, up), an update and a no-op
// re-apply's check of its stack none but the up (TestPulumiProcessesPerOperation).
type stackWorkspace struct {
	auto.Workspace
	e   *Engine
	ref stands.StackRef
}

// exists says whether the stack has a state in the backend; false when it cannot be read, so the
// CLI is asked.
func (w *stackWorkspace) exists(ctx context.Context) bool {
	data, err := w.e.stackBytes(ctx, w.ref)
	return err == nil && data != nil
}

// SelectStack needs no CLI for a stack whose state is there: every command of a stack names it
// (--stack), so the workspace's selection is never read. Otherwise the CLI says why not.
func (w *stackWorkspace) SelectStack(ctx context.Context, name string) error {
	if w.exists(ctx) {
		return nil
	}
	return w.Workspace.SelectStack(ctx, name)
}

// StackOutputs reads the outputs from the state file: what `pulumi stack output --json` and its
// --show-secrets twin print, without those two processes.
func (w *stackWorkspace) StackOutputs(ctx context.Context, _ string) (auto.OutputMap, error) {
	d, err := w.e.readDeployment(ctx, w.ref)
	if err != nil {
		return nil, err
	}
	return d.outputs()
}

func (w *stackWorkspace) PulumiCommand() auto.PulumiCommand {
	return noSummary{w.Workspace.PulumiCommand()}
}

// noSummary answers `pulumi stack history` with no entries: the Automation API runs it after each
// up, refresh and destroy to fill the result's Summary, which the engine does not read.
type noSummary struct{ auto.PulumiCommand }

func (c noSummary) Run(ctx context.Context, workdir string, stdin io.Reader, stdout, stderr []io.Writer, extra []string, args ...string) (string, string, int, error) {
	if len(args) >= 2 && args[0] == "stack" && args[1] == "history" {
		return "[]", "", 0, nil
	}
	return c.PulumiCommand.Run(ctx, workdir, stdin, stdout, stderr, extra, args...)
}
