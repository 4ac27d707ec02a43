package reconcile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// verdict is one stand of a snapshot as preflight judged it. Exactly one of problem and input is set.
type verdict struct {
	id, file string
	reason   reason.Reason // of the problem: Invalid, VaultUnavailable, OtherOwner
	problem  string        // why it cannot go on; scrubbed of secret values
	input    *stands.Input
	print    *standPrint // pull request plans only: the stand under placeholders
}

// evaluation is what a snapshot declares, judged stand by stand. It does not touch the reconciler's
// state, so pull request plans use it too.
type evaluation struct {
	files      fs.FS
	verdicts   []verdict
	secretsErr error
	unreadable []string
	allow      map[string]bool
	warnings   []manifest.Diagnostic // each once, in manifest order
}

// evaluate judges a snapshot of the tracked branch. The judgement of the last one is kept for
// SecretRefresh while the branch has no commit but the reconciler's own status commits (which touch
// status files only): a no-op cycle then reads no secret and renders no template, whatever the
// number of stands. A judgement that met an unavailable secret store is never kept.
func (r *Reconciler) evaluate(ctx context.Context, snap *stands.Snapshot) (*evaluation, error) {
	now := r.cfg.Now()
	if c := r.lastEval; c != nil && c.source == snap.Source && now.Sub(c.at) < r.cfg.SecretRefresh {
		return c.ev, nil
	}
	ev, err := r.evaluateWith(ctx, snap.Files, &onceSecrets{src: r.sec}, false)
	if err == nil && ev.secretsErr == nil {
		r.lastEval = &keptEvaluation{source: snap.Source, at: now, ev: ev}
	} else {
		r.lastEval = nil
	}
	return ev, err
}

// keptEvaluation is the last judgement of the tracked branch (evaluate).
type keptEvaluation struct {
	source string // Snapshot.Source
	at     time.Time
	ev     *evaluation
}

// onceSecrets reads each reference once per judgement: the stands sharing a secret cost one request,
// and a store that is down is asked once, not once per stand.
type onceSecrets struct {
	src manifest.SecretSource
	mu  sync.Mutex
	got map[manifest.SecretRef]onceSecret
}

type onceSecret struct {
	value string
	err   error
}

func (o *onceSecrets) Secret(ctx context.Context, ref manifest.SecretRef) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if v, ok := o.got[ref]; ok {
		return v.value, v.err
	}
	v, err := o.src.Secret(ctx, ref)
	if o.got == nil {
		o.got = map[manifest.SecretRef]onceSecret{}
	}
	o.got[ref] = onceSecret{v, err}
	return v, err
}

// evaluateWith judges with the given secrets; skipRender leaves the templates for the caller to
// render (in the sandbox).
func (r *Reconciler) evaluateWith(ctx context.Context, files fs.FS, src manifest.SecretSource, skipRender bool) (*evaluation, error) {
	paths, err := manifest.Discover(files)
	if err != nil {
		return nil, fmt.Errorf("list stands: %w", err)
	}
	results, err := manifest.PreflightAll(ctx, files, paths, manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: r.cfg.Owner}, Secrets: src, KeepGoing: true, SkipRender: skipRender})
	var rep *manifest.Report
	if err != nil && !errors.As(err, &rep) {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	ev := &evaluation{allow: allowDestroy(files), files: files}
	for _, res := range results {
		s := res.Stand
		if s == nil || s.ID == "" || s.Project == "" || s.Env == "" || s.Owner == "" {
			msg := res.File + ": the stand's id cannot be read"
			if res.Err != nil {
				msg = res.Err.Error()
			}
			ev.unreadable = append(ev.unreadable, msg)
			continue
		}
		for _, w := range s.Warnings {
			if !slices.Contains(ev.warnings, w) {
				ev.warnings = append(ev.warnings, w)
			}
		}
		v := verdict{id: s.ID, file: res.File}
		switch {
		case res.Err != nil:
			v.reason, v.problem = reason.Invalid, res.Err.Error()
		case res.SourceErr != nil:
			// The message stays the same through an outage (an error's text may carry a port that
			// changes each time) so it is committed once; the error itself goes to the log.
			ev.secretsErr = res.SourceErr
			v.reason, v.problem = reason.VaultUnavailable, reason.VaultUnavailable.Message("")
		case s.Owner != r.cfg.Owner:
			v.reason, v.problem = reason.OtherOwner, fmt.Sprintf("stand.owner is %q; this reconciler manages owner %q", s.Owner, r.cfg.Owner)
		default:
			hash, err := manifest.SpecHash(files, s, res.Secrets, r.cfg.Passphrase)
			if err != nil {
				v.reason, v.problem = reason.Invalid, res.Secrets.Scrub(err.Error())
			} else {
				v.input = &stands.Input{FS: files, Stand: s, Secrets: res.Secrets, SpecHash: hash}
			}
		}
		ev.verdicts = append(ev.verdicts, v)
	}
	return ev, nil
}

// desired is the diff's view of the evaluation; skip marks stands to hold as they are (running).
func (ev *evaluation) desired(skip func(id string) bool) []diff.Desired {
	var out []diff.Desired
	for _, v := range ev.verdicts {
		if v.input == nil || skip(v.id) {
			out = append(out, diff.Desired{ID: v.id, Invalid: true, Problem: v.problem})
			continue
		}
		s := v.input.Stand
		out = append(out, diff.Desired{ID: v.id, SpecHash: v.input.SpecHash, Suspend: s.Suspend, Protect: s.Protect})
	}
	return out
}

// ownerChanges holds the stacks of stands whose stand.owner was edited: a stack of ours that no
// stand declares by id, while a stand of the same project and env with another owner is declared,
// is Blocked (OwnerChanged), not a removal: editing owner: must never destroy the old stand.
func (ev *evaluation) ownerChanges(actual []diff.Actual, owner string) []diff.Desired {
	declared := map[string]bool{}
	byPlace := map[string]string{} // project_env → the id declaring it
	for _, v := range ev.verdicts {
		declared[v.id] = true
		if _, project, env, ok := manifest.ParseStandID(v.id); ok {
			byPlace[project+"/"+env] = v.id
		}
	}
	var out []diff.Desired
	for _, a := range actual {
		was, project, env, ok := manifest.ParseStandID(a.ID)
		if declared[a.ID] || !a.Owned || !ok || was != owner {
			continue
		}
		if now, ok := byPlace[project+"/"+env]; ok {
			out = append(out, diff.Desired{ID: a.ID, Invalid: true, Reason: reason.OwnerChanged,
				Problem: fmt.Sprintf("stand.owner changed: the repository declares %s where %s was; the stack stays as it is. Change owner back, or destroy %s first", now, a.ID, a.ID)})
		}
	}
	return out
}

// outcome is what the evaluation says about a stand before any diff: declared, or why it cannot go on.
func (v verdict) outcome(commit string) outcome {
	switch {
	case v.input != nil:
		return outcome{kind: outDeclared, file: v.file}
	case v.reason == reason.Invalid:
		return outcome{kind: outInvalid, detail: v.problem, commit: commit, file: v.file}
	case v.reason == reason.VaultUnavailable:
		return outcome{kind: outHeld, file: v.file}
	}
	return outcome{kind: outBlocked, reason: v.reason, detail: v.problem, file: v.file}
}

// allowDestroy reads the committed override: one stand id per line, # comments.
func allowDestroy(files fs.FS) map[string]bool {
	out := map[string]bool{}
	f, err := files.Open(AllowDestroyFile)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if id := strings.TrimSpace(line); id != "" {
			out[id] = true
		}
	}
	return out
}
