package manifest

import (
	"io/fs"
	"path"
	"time"
)

// PackageFile is the name of an app package's descriptor inside its folder.
const PackageFile = "app.yml"

// Package is an app package: apps/<app>/app.yml and the templates it names. Every string marked
// "template" is rendered per instance with the instance's context (see Context).
type Package struct {
	Dir        string // folder, relative to the repository root
	File       string // Dir/app.yml
	Images     []Tmpl // image references (template)
	Roles      []*Role
	Files      []*FileSpec
	Pod        string // Pod YAML template path (repository-relative)
	Connection string // connection JSON template path, optional
	PostStart  *Hook  // optional

	declared Pos // where a stand named this package first
}

// Tmpl is a template string from app.yml with its place.
type Tmpl struct {
	Text string
	Pos  Pos
}

// Role is a set of host ports an instance serves, opened in one firewalld zone. The engine waits for
// every role port to listen before it moves on to the next instance.
type Role struct {
	Name  string
	Zone  string // firewalld zone, default "public"
	Ports []Tmpl // "6379", "6379/tcp", "{{ .preferences.port }}/udp" (template)
	Pos   Pos
}

// FileSpec is a file uploaded to the node for each instance.
type FileSpec struct {
	Src  string // repository-relative; a .tmpl file is rendered and its suffix dropped
	Dest Tmpl   // absolute destination on the node (template)
	Mode string // octal, e.g. "0640"; default "0644"
	Pos  Pos
}

// Hook is a script run on the node as the app user after the instance is up.
type Hook struct {
	Src     string
	Timeout time.Duration
	// Probe: the hook is idempotent and reads only, so a health check may run it again to ask the
	// app itself whether it answers (hooks.post_start.probe: true).
	Probe bool
	Pos   Pos
}

const defaultHookTimeout = 5 * time.Minute

// pkg reads and decodes dir/app.yml. The package descriptor cannot hold secrets: values that differ
// between stands come from preferences.
func (l *loader) pkg(dir string, declared Pos, d *decoder) *Package {
	p := &Package{Dir: dir, File: path.Join(dir, PackageFile), declared: declared}
	data, err := fs.ReadFile(l.fsys, p.File)
	if err != nil {
		l.rep.addf(declared, fileRule(err, RuleFileMissing), "app package %s: read %s: %v", Shown(dir), Shown(p.File), fsErr(err))
		return p
	}
	root, diags := parseYAML(p.File, data, false)
	l.rep.add(diags...)
	if root == nil {
		return p
	}
	top := Pos{File: p.File, Line: 1}
	d.fields(root, Shown(p.File), "images", "roles", "files", "pod", "connection", "hooks")

	if imgs := root.get("images"); imgs != nil {
		if imgs.kind != kindSeq {
			d.rep.addf(imgs.pos, RuleType, "images must be a list of image references")
		} else {
			for _, it := range imgs.items {
				p.Images = append(p.Images, Tmpl{Text: d.str(it, "images[]", true, it.pos), Pos: it.pos})
			}
		}
	}
	for _, f := range d.entries(root.get("roles"), "roles") {
		p.Roles = append(p.Roles, pkgRole(d, f))
	}
	if fl := root.get("files"); fl != nil {
		if fl.kind != kindSeq {
			d.rep.addf(fl.pos, RuleType, "files must be a list")
		} else {
			for _, it := range fl.items {
				p.Files = append(p.Files, l.pkgFile(p, d, it))
			}
		}
	}
	if pod := root.get("pod"); pod == nil {
		d.rep.addf(top, RuleRequired, "pod is required (a Pod YAML template)")
	} else if s := d.str(pod, "pod", true, top); s != "" {
		p.Pod = l.pkgPath(p, pod, s)
	}
	if c := root.get("connection"); c != nil {
		if s := d.str(c, "connection", true, top); s != "" {
			p.Connection = l.pkgPath(p, c, s)
		}
	}
	if hooks := root.get("hooks"); hooks != nil {
		d.fields(hooks, "hooks", "post_start")
		if ps := hooks.get("post_start"); ps != nil {
			p.PostStart = l.pkgHook(p, d, ps)
		}
	}
	return p
}

// pkgRole decodes one entry of roles: its zone (public unless named) and its ports.
func pkgRole(d *decoder, f field) *Role {
	where := "roles." + f.key
	d.fields(f.value, where, "zone", "ports")
	r := &Role{Name: f.key, Zone: d.str(f.value.get("zone"), where+".zone", false, f.keyPos), Pos: f.keyPos}
	if r.Zone == "" {
		r.Zone = "public"
	}
	ports := f.value.get("ports")
	if ports == nil || ports.kind != kindSeq || len(ports.items) == 0 {
		d.rep.addf(posOf(ports, f.keyPos), RulePort, "%s.ports must be a non-empty list", where)
		return r
	}
	for _, it := range ports.items {
		r.Ports = append(r.Ports, Tmpl{Text: d.str(it, where+".ports[]", true, it.pos), Pos: it.pos})
	}
	return r
}

// pkgFile decodes one entry of files: its source in the package, its destination and its mode.
func (l *loader) pkgFile(p *Package, d *decoder, it *node) *FileSpec {
	d.fields(it, "files[]", "src", "dest", "mode")
	fsp := &FileSpec{Pos: it.pos, Mode: "0644"}
	if src := d.str(it.get("src"), "files[].src", true, it.pos); src != "" {
		fsp.Src = l.pkgPath(p, it.get("src"), src)
	}
	dest := it.get("dest")
	fsp.Dest = Tmpl{Text: d.str(dest, "files[].dest", true, it.pos), Pos: posOf(dest, it.pos)}
	if m := it.get("mode"); m != nil {
		fsp.Mode = d.str(m, "files[].mode", true, it.pos)
		if !validMode(fsp.Mode) {
			d.rep.addf(m.pos, RuleUploadMode, "files[].mode %q must be an octal permission such as \"0640\" (quote it in YAML)", fsp.Mode)
		}
	}
	return fsp
}

// pkgHook decodes hooks.post_start: its script, timeout and whether the health check runs it.
func (l *loader) pkgHook(p *Package, d *decoder, ps *node) *Hook {
	d.fields(ps, "hooks.post_start", "src", "timeout", "probe")
	h := &Hook{Timeout: defaultHookTimeout, Pos: ps.pos}
	if src := d.str(ps.get("src"), "hooks.post_start.src", true, ps.pos); src != "" {
		h.Src = l.pkgPath(p, ps.get("src"), src)
	}
	if t := ps.get("timeout"); t != nil {
		dur, err := time.ParseDuration(d.str(t, "hooks.post_start.timeout", true, ps.pos))
		if err != nil || dur <= 0 {
			d.rep.addf(t.pos, RuleType, "hooks.post_start.timeout must be a positive duration such as 90s or 5m")
		} else {
			h.Timeout = dur
		}
	}
	if pr := ps.get("probe"); pr != nil {
		h.Probe = d.boolean(pr, "hooks.post_start.probe")
	}
	return h
}

// pkgPath resolves a path written in app.yml and checks the file exists.
func (l *loader) pkgPath(p *Package, n *node, raw string) string {
	rel, err := resolveRel(p.File, raw)
	if err != nil {
		l.rep.addf(n.pos, RuleFileMissing, "%q: %v", raw, err)
		return ""
	}
	if !l.exists(n.pos, rel, "file") {
		return ""
	}
	return rel
}

// validMode accepts octal permissions written as text: "644", "0644", "0o644", "1777".
func validMode(s string) bool {
	_, ok := parseMode(s)
	return ok
}

func parseMode(s string) (fs.FileMode, bool) {
	t := s
	if len(t) > 2 && (t[:2] == "0o" || t[:2] == "0O") {
		t = t[2:]
	}
	if len(t) < 3 || len(t) > 4 {
		return 0, false
	}
	var m uint32
	for _, c := range t {
		if c < '0' || c > '7' {
			return 0, false
		}
		m = m*8 + uint32(c-'0')
	}
	mode := fs.FileMode(m & 0o777)
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	return mode, true
}
