// Package judge reads what a snapshot of the stands repository declares and judges it stand by
// stand: each stand's input for the engine, or why it cannot go on (invalid, another owner's, its
// secrets unavailable). A broken stand fails alone. The loop judges the tracked branch with the real
// secrets; a pull request's plan judges both branches with placeholders (package prplan). Judging
// touches no state, so both share it, and the diff of a judgement against the stacks (Decide) is
// computed the same way for a cycle and for a plan.
package judge

import (
	"bufio"
	"cmp"
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

// AllowDestroyFile names, one stand id per line, the stands whose destroy was approved in the
// repository: they pass the mass-deletion and last-stand guards (never protect).
const AllowDestroyFile = ".stands/allow-destroy"

// Verdict is one stand of a snapshot as preflight judged it. Exactly one of Problem and Input is set.
type Verdict struct {
	ID, File string
	Reason   reason.Reason // of the problem: Invalid, VaultUnavailable, OtherOwner
	Problem  string        // why it cannot go on; scrubbed of secret values
	Input    *stands.Input
}

// Evaluation is what a snapshot declares, judged stand by stand.
type Evaluation struct {
	Files      fs.FS
	Verdicts   []Verdict
	SecretsErr error    // the secret store did not answer: the stands that need it are held
	Unreadable []string // manifests whose stand cannot even be named: nothing is destroyed
	Allow      map[string]bool
	Warnings   []manifest.Diagnostic // each once, in manifest order
	// Lifetime is the repository's lifetime policy (manifest.LifetimeFile); the zero policy when it
	// has none or it cannot be read (then every stand is invalid with its problems).
	Lifetime manifest.Lifetime

	// Judged are the manifests judged anew; the others were kept from Options.Previous.
	Judged []string

	judged     map[string]judged // by manifest: what the next judgement may keep (Options.Previous)
	passphrase string
	oldest     time.Time
}

// judged is one stand as a judgement left it for the next.
type judged struct {
	res  *manifest.Result
	hash string    // its spec hash; "" when it had none
	at   time.Time // when its files were read and its secrets resolved
}

// Options are what a judgement depends on besides the files.
type Options struct {
	Owner      string // the reconciler's owner: a stand of another owner is not its to apply
	Passphrase string // keys the spec hash (manifest.SpecHash)
	Secrets    manifest.SecretSource
	// SkipRender leaves the templates for the caller to render (the render sandbox of a pull
	// request's plan).
	SkipRender bool
	// Policy, when set, is the lifetime policy in force, judged under instead of the snapshot's
	// (manifest.PreflightOptions.Policy).
	Policy *manifest.Policy
	// Now is when the snapshot is judged: an expiry beyond the repository's maximum from it is
	// refused (zero: the wall clock).
	Now time.Time
	// Previous is an earlier judgement with the same owner, passphrase and kind of secret source. A
	// stand whose manifest, bases, packages and templates all read the same in files (every read it
	// made: manifest.Reads) is kept from it as it was judged there, its secrets not read and its
	// templates not rendered again, when it was judged less than KeepFor before Now (KeepFor 0:
	// however long ago). The rules spanning stands and the lifetime policy are checked again.
	Previous *Evaluation
	KeepFor  time.Duration
	// Forget names the stands of Previous judged again whatever they read (an operator's retry).
	Forget func(id string) bool
}

// Evaluate judges the snapshot files.
func Evaluate(ctx context.Context, files fs.FS, o Options) (*Evaluation, error) {
	paths, err := manifest.Discover(files)
	if err != nil {
		return nil, fmt.Errorf("list stands: %w", err)
	}
	now := cmp.Or(o.Now, time.Now())
	previous := o.previous(now)
	results, err := manifest.PreflightAll(ctx, files, paths, manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: o.Owner}, Secrets: o.Secrets, KeepGoing: true, SkipRender: o.SkipRender, Now: o.Now, Policy: o.Policy,
		Previous: previous.results})
	var rep *manifest.Report
	if err != nil && !errors.As(err, &rep) {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	ev := &Evaluation{Allow: allowDestroy(files), Files: files, judged: map[string]judged{}, passphrase: o.Passphrase, oldest: now}
	ev.Lifetime, _ = manifest.ReadLifetime(files)
	if o.Policy != nil {
		ev.Lifetime, _ = o.Policy.Lifetime()
	}
	for _, res := range results {
		if !res.Reused {
			ev.Judged = append(ev.Judged, res.File)
		}
		s := res.Stand
		if s == nil || s.ID == "" || s.Project == "" || s.Env == "" || s.Owner == "" {
			msg := res.File + ": the stand's id cannot be read"
			if res.Err != nil {
				msg = res.Err.Error()
			}
			ev.Unreadable = append(ev.Unreadable, msg)
			continue
		}
		for _, w := range s.Warnings {
			if !slices.Contains(ev.Warnings, w) {
				ev.Warnings = append(ev.Warnings, w)
			}
		}
		v := Verdict{ID: s.ID, File: res.File}
		kept := judged{res: res, at: now}
		if res.Reused {
			kept = previous.kept[res.File]
			kept.res = res
		}
		switch {
		case res.Err != nil:
			v.Reason, v.Problem = reason.Invalid, res.Err.Error()
		case res.SourceErr != nil:
			// The message stays the same through an outage (an error's text may carry a port that
			// changes each time) so it is committed once; the error itself goes to the log.
			ev.SecretsErr = res.SourceErr
			v.Reason, v.Problem = reason.VaultUnavailable, reason.VaultUnavailable.Message("")
		case s.Owner != o.Owner:
			v.Reason, v.Problem = reason.OtherOwner, fmt.Sprintf("stand.owner is %q; this reconciler manages owner %q", s.Owner, o.Owner)
		default:
			// Whatever reads the stand's files from here on (the engine, a plan's render) is one
			// of its reads: a commit changing such a file judges it again.
			in := &stands.Input{FS: res.Reads.FS(files), Stand: s, Secrets: res.Secrets, SpecHash: kept.hash}
			var err error
			if in.SpecHash == "" {
				in.SpecHash, err = manifest.SpecHash(in.FS, s, res.Secrets, o.Passphrase)
			}
			if err != nil {
				v.Reason, v.Problem = reason.Invalid, res.Secrets.Scrub(err.Error())
			} else {
				v.Input, kept.hash = in, in.SpecHash
			}
		}
		res.Rendered = nil // a judgement keeps what the next may need, not the render
		if res.SourceErr == nil {
			ev.judged[res.File] = kept
			if kept.at.Before(ev.oldest) {
				ev.oldest = kept.at
			}
		}
		ev.Verdicts = append(ev.Verdicts, v)
	}
	return ev, nil
}

// Oldest is when the stand judged longest ago was judged (its files read, its secrets resolved);
// when it holds none, when the judgement was made.
func (ev *Evaluation) Oldest() time.Time { return ev.oldest }

// kept is what a judgement may take from Options.Previous, by manifest.
type kept struct {
	results map[string]*manifest.Result
	kept    map[string]judged
}

// previous is what of Options.Previous a judgement at now may keep.
func (o Options) previous(now time.Time) kept {
	out := kept{results: map[string]*manifest.Result{}, kept: map[string]judged{}}
	p := o.Previous
	if p == nil || p.passphrase != o.Passphrase {
		return out
	}
	for file, j := range p.judged {
		switch {
		case o.KeepFor > 0 && now.Sub(j.at) >= o.KeepFor:
		case o.Forget != nil && j.res.Stand != nil && o.Forget(j.res.Stand.ID):
		default:
			out.results[file], out.kept[file] = j.res, j
		}
	}
	return out
}

// Desired is the diff's view of the evaluation; skip marks stands to hold as they are (running).
func (ev *Evaluation) Desired(skip func(id string) bool) []diff.Desired {
	var out []diff.Desired
	for _, v := range ev.Verdicts {
		if v.Input == nil || skip(v.ID) {
			out = append(out, diff.Desired{ID: v.ID, Invalid: true, Problem: v.Problem})
			continue
		}
		s := v.Input.Stand
		out = append(out, diff.Desired{ID: v.ID, SpecHash: v.Input.SpecHash, Suspend: s.Suspend, Protect: s.Protect})
	}
	return out
}

// OwnerChanges holds the stacks of stands whose stand.owner was edited: a stack of ours that no
// stand declares by id, while a stand of the same project and env with another owner is declared,
// is Blocked (OwnerChanged), not a removal: editing owner: must never destroy the old stand.
func (ev *Evaluation) OwnerChanges(actual []diff.Actual, owner string) []diff.Desired {
	declared := map[string]bool{}
	byPlace := map[string]string{} // project/env → the id declaring it
	for _, v := range ev.Verdicts {
		declared[v.ID] = true
		if _, project, env, ok := manifest.ParseStandID(v.ID); ok {
			byPlace[project+"/"+env] = v.ID
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

// Guards are the destroy guards of the settings (diff.Input).
type Guards struct {
	Owner            string
	MaxDestroyShare  float64
	AllowMassDestroy bool
}

// Decide is the diff of the evaluation against the stacks behind the guards: what a cycle decides.
// running marks stands held as they are (an operation runs on them; nil: none), hold blocks every
// destroy with its reason (an outside service is down; "" none).
func (ev *Evaluation) Decide(actual []diff.Actual, g Guards, running func(id string) bool, hold reason.Reason) []diff.Action {
	if running == nil {
		running = func(string) bool { return false }
	}
	return diff.Decide(diff.Input{Desired: append(ev.Desired(running), ev.OwnerChanges(actual, g.Owner)...), Actual: actual,
		SourceOK: len(ev.Unreadable) == 0, MaxDestroyShare: g.MaxDestroyShare, AllowDestroy: ev.Allow,
		AllowMassDestroy: g.AllowMassDestroy, Hold: hold})
}

// Input is a declared stand's input, nil when the evaluation holds none for it.
func (ev *Evaluation) Input(id string) *stands.Input {
	for _, v := range ev.Verdicts {
		if v.ID == id {
			return v.Input
		}
	}
	return nil
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

// Once reads each reference of src once per judgement: the stands sharing a secret cost one request,
// and a store that is down is asked once, not once per stand.
func Once(src manifest.SecretSource) manifest.SecretSource { return &onceSecrets{src: src} }

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

// Print is a stand's spec hash with every secret its placeholder (manifest.PlaceholderSecrets): what
// a pull request's plan knows of the stand, and so what a review approves. Two inputs with the same
// print differ in secret values at most.
func Print(in *stands.Input, passphrase string) (string, error) {
	return manifest.SpecHash(in.FS, in.Stand, manifest.PlaceholderSecrets(in.Stand, 0), passphrase)
}
