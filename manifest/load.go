package manifest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
)

// LoadOptions tune Load.
type LoadOptions struct {
	// DefaultOwner is the owner of stands whose manifest names none (the reconciler's --owner); with
	// none, such a stand fails (errNoOwner).
	DefaultOwner string

	docs *docCache // shared by the stands of one PreflightAll
}

// Load reads the stand manifest at file (slash-separated, relative to the root of fsys), merges its
// from_dep_manifest bases, decodes it and loads its app packages. Every independent problem is
// returned in one *Report; the Stand is returned only when there is none.
func Load(fsys fs.FS, file string, opts LoadOptions) (*Stand, error) {
	rep := &Report{}
	s := load(fsys, file, opts, rep)
	if err := rep.err(); err != nil {
		return nil, err
	}
	return s, nil
}

func load(fsys fs.FS, file string, opts LoadOptions, rep *Report) *Stand {
	l := &loader{fsys: guardResources(fsys), rep: rep, docs: map[string]*node{}, shared: opts.docs}
	root, files := l.merged(file, nil, Pos{File: file})
	if root == nil {
		return nil
	}
	d := &decoder{rep: rep}
	s := d.stand(root, file, opts)
	s.Manifests = files
	s.root = root
	s.Warnings = l.warnings
	l.packages(s, d)
	return s
}

type loader struct {
	fsys     fs.FS
	rep      *Report
	docs     map[string]*node
	shared   *docCache // nil: none
	warnings []Diagnostic
}

// legacyKeys are the stand settings an earlier version of this project read at the top level of a
// manifest; the Stands Engine (and now this project) has them under stand:.
var legacyKeys = []string{"users", "ssh"}

// hoistLegacy moves a manifest's top-level users and ssh under stand:, where the Stands Engine's format has
// them, with a deprecation warning; both places at once is an error. It runs per file, before
// from_dep_manifest merges them, so a base in either form merges with a stand in the other.
func hoistLegacy(doc *node, rep *Report) (warnings []Diagnostic) {
	for _, key := range legacyKeys {
		i := slices.IndexFunc(doc.fields, func(f field) bool { return f.key == key })
		if i < 0 {
			continue
		}
		f := doc.fields[i]
		meta := doc.get("stand")
		if meta != nil && meta.get(key) != nil {
			rep.addf(f.keyPos, RuleSyntax, "%s is given twice: at the top level and as stand.%s; keep stand.%s", key, key, key)
			continue
		}
		warnings = append(warnings, Diagnostic{Pos: f.keyPos, Rule: RuleDeprecated,
			Msg: fmt.Sprintf("top-level %s is the old form: move it under stand: (stand.%s), as in the Stands Engine's manifests", key, key)})
		doc.fields = slices.Delete(doc.fields, i, i+1)
		switch {
		case meta == nil:
			doc.fields = append(doc.fields, field{key: "stand", keyPos: f.keyPos, value: &node{kind: kindMap, pos: f.keyPos, fields: []field{f}}})
		case meta.kind == kindMap:
			meta.fields = append(meta.fields, f)
		}
	}
	return warnings
}

// read parses one manifest file once.
func (l *loader) read(file string, from Pos) *node {
	if n, ok := l.docs[file]; ok {
		return n
	}
	data, err := fs.ReadFile(l.fsys, file)
	if err != nil {
		rule := RuleFileMissing
		if from.File != file {
			rule = RuleBase
		}
		l.rep.addf(from, fileRule(err, rule), "read %s: %v", Shown(file), fsErr(err))
		l.docs[file] = nil
		return nil
	}
	doc := l.shared.parse(file, data)
	l.rep.add(doc.diags...)
	l.warnings = append(l.warnings, doc.warnings...)
	l.docs[file] = doc.root
	return doc.root
}

// parsedDoc is a manifest file parsed: its tree, never changed once made, and what parsing it said.
type parsedDoc struct {
	root            *node
	diags, warnings []Diagnostic
}

func parseManifest(file string, data []byte) *parsedDoc {
	rep := &Report{}
	n, diags := parseYAML(file, data, true)
	rep.add(diags...)
	if n != nil && n.kind != kindMap {
		rep.addf(n.pos, RuleSyntax, "a manifest must be a YAML mapping, not a %s", n.kind)
		n = nil
	}
	doc := &parsedDoc{root: n}
	if n != nil {
		doc.warnings = hoistLegacy(n, rep)
	}
	doc.diags = rep.Diags
	return doc
}

// docCache parses each manifest file once for all the stands of a judgement: the bases thousands
// of stands merge are one tree in memory, not one each. Trees are shared, so nothing changes one
// once parsed (mergeNodes and stripPolicy make new nodes).
type docCache struct {
	mu   sync.Mutex
	docs map[docKey]*parsedDoc
	pkgs map[string]loadedPkg // by folder: the stands of one judgement read one tree
}

type docKey struct {
	file string
	sum  [sha256.Size]byte
}

func newDocCache() *docCache {
	return &docCache{docs: map[docKey]*parsedDoc{}, pkgs: map[string]loadedPkg{}}
}

// parse is file's parse, from the cache when the same content was parsed before (c nil: none).
func (c *docCache) parse(file string, data []byte) *parsedDoc {
	if c == nil {
		return parseManifest(file, data)
	}
	k := docKey{file, sha256.Sum256(data)}
	c.mu.Lock()
	doc, ok := c.docs[k]
	c.mu.Unlock()
	if ok {
		return doc
	}
	doc = parseManifest(file, data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.docs[k]; ok {
		return prev // parsed meanwhile on another core: one tree for all
	}
	c.docs[k] = doc
	return doc
}

// merged returns the document at file with its bases merged under it, and the files involved, bases
// first. chain detects cycles.
func (l *loader) merged(file string, chain []string, from Pos) (*node, []string) {
	if slices.Contains(chain, file) {
		l.rep.addf(from, RuleBase, "from_dep_manifest cycle: %s", strings.Join(append(chain, file), " -> "))
		return nil, nil
	}
	doc := l.read(file, from)
	if doc == nil {
		return nil, nil
	}
	chain = append(chain, file)
	var base *node
	var files []string
	if dep := doc.get("from_dep_manifest"); dep != nil {
		var refs []*node
		switch dep.kind {
		case kindScalar:
			refs = []*node{dep}
		case kindSeq:
			refs = dep.items
		default:
			l.rep.addf(dep.pos, RuleType, "from_dep_manifest must be a path or a list of paths")
		}
		for _, r := range refs {
			if r.kind != kindScalar || r.value == "" {
				l.rep.addf(r.pos, RuleType, "from_dep_manifest entries must be paths")
				continue
			}
			p, err := resolveRel(file, r.value)
			if err != nil {
				l.rep.addf(r.pos, RuleBase, "from_dep_manifest %q: %v", r.value, err)
				continue
			}
			b, bf := l.merged(p, chain, r.pos)
			if b == nil {
				continue
			}
			base = mergeNodes(base, b)
			for _, f := range bf {
				if !slices.Contains(files, f) {
					files = append(files, f)
				}
			}
		}
	}
	own := &node{kind: kindMap, pos: doc.pos}
	for _, f := range doc.fields {
		if f.key != "from_dep_manifest" {
			own.fields = append(own.fields, f)
		}
	}
	return mergeNodes(base, own), append(files, file)
}

// resolveRel resolves a path written in file relative to file's folder, refusing absolute paths and
// paths that leave the repository.
// A resource://NAME/PATH reference is a resource root's (resource.go); from a file inside a root,
// a relative path stays in that root, and from the repository it never reaches one.
func resolveRel(file, ref string) (string, error) {
	if strings.HasPrefix(ref, ResourceScheme) {
		return resolveResource(ref)
	}
	if path.IsAbs(ref) || strings.Contains(ref, `\`) {
		return "", errors.New("absolute paths are refused; write a path relative to the manifest")
	}
	p := path.Join(path.Dir(file), ref)
	if !fs.ValidPath(p) {
		return "", errors.New("the path leaves the repository")
	}
	if root, in := ResourceRoot(file); in {
		if !within(p, root) {
			return "", fmt.Errorf("the path leaves the resource root %q", strings.TrimPrefix(root, resourceElem+"/"))
		}
	} else if _, to := ResourceRoot(p); to {
		return "", errors.New("the path leaves the repository (a resource root is reached as " + ResourceScheme + "NAME/PATH)")
	}
	return p, nil
}

// fsErr drops the operation and path that fs errors repeat; the diagnostic already names both. A
// symbolic link keeps its path: it may be a folder on the way, not the file named.
func fsErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		switch {
		case errors.Is(pe.Err, fs.ErrNotExist):
			return errors.New("no such file")
		case errors.Is(pe.Err, ErrNoResource):
			name, _, _ := ResourcePath(pe.Path)
			return fmt.Errorf("%q: %w", name, ErrNoResource)
		case errors.Is(pe.Err, repofs.ErrSymlink), errors.Is(pe.Err, repofs.ErrTooLarge):
			return fmt.Errorf("%s is %w", pe.Path, pe.Err)
		}
		return pe.Err
	}
	return err
}

// fileRule is the rule of a failed read: RuleSymlink for a link, RuleSize for a file over the limit,
// else the caller's.
func fileRule(err error, rule string) string {
	switch {
	case errors.Is(err, repofs.ErrSymlink):
		return RuleSymlink
	case errors.Is(err, repofs.ErrTooLarge):
		return RuleSize
	}
	return rule
}

func (l *loader) exists(declared Pos, p, what string) bool {
	st, err := fs.Stat(l.fsys, p)
	if err != nil {
		l.rep.addf(declared, fileRule(err, RuleFileMissing), "%s %s: %v", what, Shown(p), fsErr(err))
		return false
	}
	if st.IsDir() {
		l.rep.addf(declared, RuleFileMissing, "%s %s is a folder, not a file", what, Shown(p))
		return false
	}
	if path.Ext(p) == ".mako" {
		// Rendered as Go text or sent as it is, it would reach the server with its ${...} in it.
		l.rep.addf(declared, RuleMako, "%s %s is a Stands Engine Mako template, which is not rendered here: convert it with stands-reconciler migrate (docs/migrating.md)", what, Shown(p))
		return false
	}
	return true
}

// packages loads each app's package and checks the files the stand references.
func (l *loader) packages(s *Stand, d *decoder) {
	for _, p := range s.Profiles {
		if p.CloudInit != "" && !l.exists(p.Pos, p.CloudInit, "cloud-init template") {
			p.CloudInit = ""
		}
	}
	loaded := map[string]*Package{}
	for _, a := range s.Apps {
		if a.Package == nil || a.Package.Dir == "" {
			continue
		}
		dir := a.Package.Dir
		if pkg, ok := loaded[dir]; ok {
			a.Package = pkg
			continue
		}
		pkg := l.sharedPkg(dir, a.Package.declared, d)
		loaded[dir] = pkg
		a.Package = pkg
	}
}

// sharedPkg is the app package at dir, loaded once for all the stands of a judgement (they read one
// tree) when loading it found no problem. A stand taking it makes the reads its loading made again,
// so they are the stand's reads too (Reads).
func (l *loader) sharedPkg(dir string, declared Pos, d *decoder) *Package {
	c := l.shared
	if c == nil {
		return l.pkg(dir, declared, d)
	}
	c.mu.Lock()
	got, ok := c.pkgs[dir]
	c.mu.Unlock()
	if ok {
		for _, k := range got.reads {
			k.replay(l.fsys)
		}
		return got.pkg
	}
	fsys, problems := l.fsys, len(l.rep.Diags)
	tracked := &trackingFS{fsys: fsys}
	l.fsys = tracked
	pkg := l.pkg(dir, declared, d)
	l.fsys = fsys
	if len(l.rep.Diags) == problems {
		c.mu.Lock()
		defer c.mu.Unlock()
		if prev, ok := c.pkgs[dir]; ok {
			return prev.pkg // loaded meanwhile on another core, from the same reads: one for all
		}
		c.pkgs[dir] = loadedPkg{pkg: pkg, reads: tracked.reads}
	}
	return pkg
}

// loadedPkg is an app package loaded without a problem, and the reads loading it made.
type loadedPkg struct {
	pkg   *Package
	reads []readKey
}

// Identity is what names a stand's stack: enough to destroy it without the rest of its manifest.
type Identity struct {
	Owner, Project, Env string
}

// ReadIdentity reads owner, project and env from a stand manifest and its bases, without resolving
// secrets, app packages or templates.
func ReadIdentity(fsys fs.FS, file string, opts LoadOptions) (Identity, error) {
	rep := &Report{}
	l := &loader{fsys: guardResources(fsys), rep: rep, docs: map[string]*node{}}
	root, _ := l.merged(file, nil, Pos{File: file})
	if err := rep.err(); err != nil {
		return Identity{}, err
	}
	d := &decoder{rep: rep}
	meta := root.get("stand")
	id := Identity{
		Owner:   d.str(meta.get("owner"), "stand.owner", false, Pos{File: file, Line: 1}),
		Project: d.str(meta.get("project"), "stand.project", true, Pos{File: file, Line: 1}),
		Env:     d.str(meta.get("env"), "stand.env", true, Pos{File: file, Line: 1}),
	}
	if id.Owner == "" {
		id.Owner = opts.DefaultOwner
		if id.Owner == "" {
			rep.addf(posOf(meta, Pos{File: file, Line: 1}), RuleRequired, "%s", errNoOwner)
			return Identity{}, rep.err()
		}
	}
	for _, p := range []string{id.Owner, id.Project, id.Env} {
		d.idPart(p, posOf(meta, Pos{File: file, Line: 1}), "stand id part")
	}
	if err := rep.err(); err != nil {
		return Identity{}, err
	}
	return id, nil
}
