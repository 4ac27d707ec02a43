package manifest

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
)

// StandsDir holds the stands of a repository: every stand.yml under it is a stand.
const (
	StandsDir = "stands"
	StandFile = "stand.yml"
)

// Discover lists every stands/**/stand.yml of a repository, sorted, and every file there named like
// one but not quite (stand.yaml, Stand.yml): those fail their preflight with RuleManifestName instead
// of being skipped, which the reconciler would read as the stand's removal.
func Discover(fsys fs.FS) ([]string, error) {
	var files []string
	err := fs.WalkDir(fsys, StandsDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == StandsDir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != StandsDir {
			return fs.SkipDir
		}
		// A link under stands/ may be a stand (a linked folder or stand.yml): it fails as one, and while
		// it does no stand is destroyed, instead of the stand behind it reading as removed.
		if !d.IsDir() && (looksLikeManifest(d.Name()) || d.Type()&fs.ModeSymlink != 0) {
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

// IsManifest reports whether p is a path Discover lists as a stand's manifest (links aside): its
// folder is the stand's.
func IsManifest(p string) bool {
	return strings.HasPrefix(p, StandsDir+"/") && looksLikeManifest(path.Base(p))
}

// looksLikeManifest reports whether a file name is stand.yml or a near miss of it.
func looksLikeManifest(name string) bool {
	n := strings.ToLower(name)
	return n == StandFile || n == "stand.yaml"
}

// IsBase reports whether p is a base manifest (bases/*.yml): used only through from_dep_manifest.
func IsBase(p string) bool {
	return strings.HasPrefix(p, "bases/") && path.Ext(p) == ".yml"
}

// PreflightOptions configure Preflight.
type PreflightOptions struct {
	LoadOptions
	// Secrets resolves !secret references; validation renders with the real values to catch escaping
	// mistakes, as the Stands Engine did.
	Secrets SecretSource
	// SkipRender leaves templates alone: a caller that renders elsewhere (a pull request's stands,
	// in the render sandbox) adds those diagnostics itself.
	SkipRender bool
	// Now is when the stands are judged: a stand.expires further from it than the repository's
	// maximum is refused (zero: the wall clock).
	Now time.Time
	// Policy, when set, is the lifetime policy the stands are judged under instead of the
	// repository's LifetimeFile: the one in force under the review gate.
	Policy *Policy
	// KeepGoing records a secret source's failure (a Vault that is down) in the stand's Result.SourceErr
	// and goes on with the other stands, instead of stopping the run.
	KeepGoing bool
	// Previous are the results of an earlier run, by file. A stand whose Reads answer the same in
	// fsys is taken from it as it was loaded, resolved and rendered there (Result.Reused), and only
	// the rules that depend on the time, the lifetime policy or other stands are checked again. The
	// caller passes results judged with the same secret source that it still trusts: their secret
	// values are not read again. A result judged with a render stands in for one without only when
	// it had no problem, and never the other way.
	Previous map[string]*Result
}

// Result is the preflight outcome of one stand. A broken stand fails alone: its Err says why, and the
// other stands' results are usable.
type Result struct {
	File     string
	Stand    *Stand    // nil when the manifest could not be read at all
	Rendered *Rendered // nil when the stand has errors
	Secrets  Secrets
	Err      *Report // this stand's problems, nil when there are none
	// SourceErr is the secret source's failure when PreflightOptions.KeepGoing is set: the stand
	// cannot be judged now, which says nothing about it.
	SourceErr error
	// Reads is what judging the stand read of the repository. Whatever reads the stand's files
	// later reads them through Reads.FS, so a later run knows when they change.
	Reads *Reads
	// Reused is set on a result taken from PreflightOptions.Previous: Rendered is nil.
	Reused bool
	own    []Diagnostic // the stand's own problems, before the rules spanning stands added theirs
	judged judgedWith
}

// judgedWith is what a result depends on besides its reads and secret values.
type judgedWith struct {
	owner      string // LoadOptions.DefaultOwner
	skipRender bool
}

// Preflight runs every local check of one stand: load and merge, references, files, secrets, and a
// render with reserved test addresses. It needs no cloud, no SSH and no Pulumi.
func Preflight(ctx context.Context, fsys fs.FS, file string, opts PreflightOptions) (*Result, error) {
	results, err := PreflightAll(ctx, fsys, []string{file}, opts)
	if len(results) == 0 {
		return nil, err
	}
	return results[0], err
}

// PreflightAll checks several stands and the rules that span them (unique ids). It returns one result
// per stand and, when any stand has problems, a *Report of all of them, sorted by place. Any other
// error (a secret source that is down, a cancelled context) is returned as is and stops the run: it
// says nothing about the stands.
func PreflightAll(ctx context.Context, fsys fs.FS, files []string, opts PreflightOptions) ([]*Result, error) {
	red := &redactor{}
	policy, prep := ReadLifetime(fsys)
	if opts.Policy != nil {
		policy, prep = opts.Policy.Lifetime()
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	results, err := preflightEach(ctx, fsys, files, opts)
	if err != nil {
		return results, err
	}
	ids := map[string]*Result{}
	for _, res := range results {
		red.secrets(res.Secrets)
		lifetime(res, policy, prep, now)
		s := res.Stand
		if s == nil || s.Project == "" || s.Env == "" || s.Owner == "" {
			continue
		}
		prev, dup := ids[s.ID]
		if !dup {
			ids[s.ID] = res
			continue
		}
		// Neither stand is applied: which one the repository means is for a human to say.
		for _, pair := range [][2]*Result{{res, prev}, {prev, res}} {
			r, other := pair[0], pair[1]
			if r.Err == nil {
				r.Err = &Report{}
			}
			r.Err.addf(r.Stand.Pos, RuleDuplicateID, "stand id %s is also declared by %s; owner, project and env together must be unique", s.ID, other.Stand.Path)
		}
	}
	uniqueServerNames(results)
	all := &Report{}
	for _, r := range results {
		if r.Err == nil {
			continue
		}
		red.scrubReport(r.Err)
		r.Err.normalize()
		r.Rendered = nil
		all.add(r.Err.Diags...)
	}
	if err := all.err(); err != nil {
		return results, err
	}
	return results, nil
}

// preflightEach runs each stand's own checks, on as many cores as there are, and returns the results
// in the order of files. The first error that stops the run (a cancelled context; a secret source
// that failed without KeepGoing) returns the results before it.
func preflightEach(ctx context.Context, fsys fs.FS, files []string, opts PreflightOptions) ([]*Result, error) {
	if opts.Secrets != nil {
		// A secret source is asked one reference at a time, as it was before the stands were judged
		// side by side: one request in flight, and a source need not be safe for concurrent use.
		opts.Secrets = &serialSource{src: opts.Secrets}
	}
	opts.docs = newDocCache()
	results := make([]*Result, len(files))
	errs := make([]error, len(files))
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(files)) {
		wg.Go(func() {
			// An index once taken is judged: the results before the first error are all there.
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[i] = err
				} else {
					results[i], errs[i] = preflightOne(ctx, fsys, files[i], opts)
				}
				if errs[i] != nil {
					stop.Store(true)
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return results[:i], err
		}
	}
	return results, nil
}

// preflightOne is one stand's own checks, or its previous result when nothing it read changed.
func preflightOne(ctx context.Context, fsys fs.FS, file string, opts PreflightOptions) (*Result, error) {
	with := judgedWith{owner: opts.DefaultOwner, skipRender: opts.SkipRender}
	if prev := opts.Previous[file]; prev.reusableFor(with) {
		if reads, same := prev.Reads.sameIn(fsys); same {
			res := &Result{File: file, Stand: prev.Stand, Secrets: prev.Secrets, Reads: reads, Reused: true, own: prev.own, judged: prev.judged}
			if len(prev.own) > 0 {
				res.Err = &Report{Diags: slices.Clone(prev.own)}
			}
			return res, nil
		}
	}
	reads := &Reads{}
	res, err := preflight(ctx, reads.FS(fsys), file, opts)
	if res != nil {
		res.Reads, res.judged = reads, with
		if res.Err != nil {
			res.own = slices.Clone(res.Err.Diags)
		}
	}
	return res, err
}

// reusableFor reports whether r may stand in for a stand judged with what.
func (r *Result) reusableFor(what judgedWith) bool {
	switch {
	case r == nil || r.Reads == nil || r.SourceErr != nil || r.judged.owner != what.owner:
		return false
	case r.judged.skipRender == what.skipRender:
		return true
	}
	// A render's problems are not found without one: a stand rendered without a problem stands in
	// for one not rendered, never the other way.
	return what.skipRender && len(r.own) == 0
}

// serialSource asks src one reference at a time.
type serialSource struct {
	mu  sync.Mutex
	src SecretSource
}

func (s *serialSource) Secret(ctx context.Context, ref SecretRef) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Secret(ctx, ref)
}

func preflight(ctx context.Context, fsys fs.FS, file string, opts PreflightOptions) (*Result, error) {
	res := &Result{File: file}
	rep := &Report{}
	defer func() {
		if len(rep.Diags) > 0 {
			res.Err = rep
		}
	}()
	if _, err := fs.Stat(fsys, file); errors.Is(err, repofs.ErrSymlink) {
		rep.addf(Pos{File: file, Line: 1, Col: 1}, RuleSymlink, "%v", fsErr(err))
		return res, nil
	}
	if name := path.Base(file); name != StandFile {
		rep.addf(Pos{File: file, Line: 1, Col: 1}, RuleManifestName, "a stand manifest must be named %s, not %s: rename it (until then the stand is neither applied nor destroyed)", StandFile, name)
	}
	s := load(fsys, file, opts.LoadOptions, rep)
	if s == nil {
		return res, nil
	}
	res.Stand = s
	src := opts.Secrets
	if src == nil {
		src = EnvSource{}
	}
	secrets, err := ResolveSecrets(ctx, s, src)
	var srep *Report
	switch {
	case errors.As(err, &srep):
		// The other checks still run, on placeholders: every independent problem in one report.
		rep.add(srep.Diags...)
		secrets = secrets.withPlaceholders(s)
	case err != nil && opts.KeepGoing:
		res.SourceErr = err
		return res, nil
	case err != nil:
		return res, err
	}
	res.Secrets = secrets
	if !opts.SkipRender {
		res.Rendered = render(fsys, s, secrets, PreflightAddresses(s), rep, nil, 0)
		if res.Rendered != nil && rep.err() == nil && hasConnection(res.Rendered) {
			checkBlindConnections(fsys, s, rep)
		}
	}
	return res, nil
}

// lifetime refuses a stand what the repository's lifetime policy forbids; a policy that cannot be
// read refuses every stand with its own problems: neither applied nor destroyed until it is fixed.
func lifetime(res *Result, policy Lifetime, prep *Report, now time.Time) {
	rep := &Report{}
	if prep != nil {
		rep.add(prep.Diags...)
	} else if res.Stand != nil {
		policy.check(res.Stand, now, rep)
	}
	if len(rep.Diags) == 0 {
		return
	}
	if res.Err == nil {
		res.Err = &Report{}
	}
	res.Err.add(rep.Diags...)
}

// uniqueServerNames refuses two nodes of different stands whose server names are the same (env two
// with node node-db, env two-node with node db): Hetzner names are unique in a project, and the second
// apply would fail or, worse, reclaim the first stand's server.
func uniqueServerNames(results []*Result) {
	type owner struct {
		res  *Result
		node *Node
	}
	seen := map[string]owner{}
	for _, r := range results {
		s := r.Stand
		if s == nil || s.Project == "" || s.Env == "" || s.Owner == "" {
			continue
		}
		for _, n := range s.Nodes {
			name := s.ServerName(n)
			prev, ok := seen[name]
			if !ok {
				seen[name] = owner{r, n}
				continue
			}
			if prev.res.Stand.ID == s.ID {
				continue // the same id twice is RuleDuplicateID's
			}
			for _, pair := range [][2]owner{{{r, n}, prev}, {prev, {r, n}}} {
				o, other := pair[0], pair[1]
				if o.res.Err == nil {
					o.res.Err = &Report{}
				}
				o.res.Err.addf(o.node.Pos, RuleServerName, "server name %s is also the name of node %s of stand %s (%s); change a node name or the env",
					name, other.node.Name, other.res.Stand.ID, other.res.Stand.Path)
			}
		}
	}
}
