package manifest

import (
	"context"
	"errors"
	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"io/fs"
	"path"
	"strings"
	"time"
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
	var results []*Result
	policy, prep := ReadLifetime(fsys)
	if opts.Policy != nil {
		policy, prep = opts.Policy.Lifetime()
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	ids := map[string]*Result{}
	for _, file := range files {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		res, err := preflight(ctx, fsys, file, opts, red)
		if err != nil {
			return results, err
		}
		results = append(results, res)
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

func preflight(ctx context.Context, fsys fs.FS, file string, opts PreflightOptions, red *redactor) (*Result, error) {
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
	for ref, v := range secrets.values {
		if !secrets.placeholder[ref] && !ref.Plain {
			red.add(v)
		}
	}
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
