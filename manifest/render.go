package manifest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// Addresses are the facts only known once servers exist. Preflight renders with reserved test
// addresses (PreflightAddresses); the engine renders again with the real ones.
type Addresses struct {
	NetworkIPRange string                 // CIDR of the Hetzner network
	SSHPublicKey   string                 // public half of the stand's key pair
	Nodes          map[string]NodeAddress // by node name
}

// NodeAddress is a server's addresses.
type NodeAddress struct {
	PublicIPv4 string
	PrivateIP  string
}

// PreflightAddresses gives every node addresses from the documentation ranges of RFC 5737, which
// never route anywhere, so a rendered file that leaks from validation points nowhere real.
func PreflightAddresses(s *Stand) Addresses {
	a := Addresses{
		NetworkIPRange: "192.0.2.0/24",
		SSHPublicKey:   "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPreflightTestKeyNotARealKeyXXXXXXXXXXXXXXXXXX stands-preflight",
		Nodes:          map[string]NodeAddress{},
	}
	for i, n := range s.Nodes {
		a.Nodes[n.Name] = NodeAddress{PublicIPv4: fmt.Sprintf("203.0.113.%d", 10+i), PrivateIP: fmt.Sprintf("192.0.2.%d", 10+i)}
	}
	return a
}

// Rendered is everything a stand deploys, rendered for concrete addresses. It holds secret values:
// never log it or write it anywhere but the node and the 0600 configset.
type Rendered struct {
	Stand     *Stand
	Nodes     []*RenderedNode
	Instances []*RenderedInstance // deploy order: apps order, then instances order
}

// RenderedNode is one server: its profile and cloud-init user data.
type RenderedNode struct {
	Name       string
	ServerName string
	Profile    *Profile
	CloudInit  []byte
}

// RenderedInstance is one app instance ready to deploy.
type RenderedInstance struct {
	App            string
	Instance       string
	Node           string
	ConnectionName string
	Registry       string
	Images         []string
	Ports          []Port // role ports, waited for after start
	HostPorts      []Port // hostPort claims of the Pod YAML
	Files          []RenderedFile
	Pod            []byte
	Connection     json.RawMessage // a JSON object, or nil when the package has no connection template
	PostStart      *RenderedFile
	PostStartHook  *Hook

	podSrc string // template the HostPorts came from
	pos    Pos    // the instance in the manifest, for conflicts between instances
}

// Port is a host port.
type Port struct {
	Number int
	Proto  string // tcp or udp
	Role   string
	Zone   string
}

func (p Port) String() string { return fmt.Sprintf("%d/%s", p.Number, p.Proto) }

// RenderedFile is a file to upload.
type RenderedFile struct {
	Src     string
	Dest    string
	Mode    fs.FileMode
	Content []byte
}

// Render renders every template of the stand for the given addresses and checks what it produced:
// cloud-init is a #cloud-config mapping, Pod YAML is a Pod, connection output is a JSON object,
// destinations are absolute, ports are valid and no two instances on a node claim the same one.
func Render(fsys fs.FS, s *Stand, secrets Secrets, addr Addresses) (*Rendered, error) {
	return RenderObserved(fsys, s, secrets, addr, nil)
}

// Observer sees each template file rendered: its path, the context it was given, the order of each
// mapping in it (as the manifest has it: what a Python dict kept) and what it wrote.
type Observer func(path string, ctx map[string]any, keys func(map[string]any) []string, out []byte)

// RenderObserved is Render, telling observe (when not nil) of every template file it renders: how
// stands-reconciler migrate renders the Stands Engine's template with the same context to prove a
// translation.
func RenderObserved(fsys fs.FS, s *Stand, secrets Secrets, addr Addresses, observe Observer) (*Rendered, error) {
	return RenderVariant(fsys, s, secrets, addr, 0, observe)
}

// Variants is how many variants of a stand's preferences RenderVariant knows besides the stand's own.
const Variants = 2

// VariantNames say what each variant changes.
var VariantNames = [Variants + 1]string{"its own preferences", "preferences varied: booleans negated, numbers plus one, strings with <&'\" added",
	"preferences varied: lists and mappings emptied"}

// RenderVariant is RenderObserved with the stand's preferences varied (variant 1..Variants; 0: as
// written), so that a proof also sees the branches and loops the stand's own values do not take.
// Secrets are not varied.
func RenderVariant(fsys fs.FS, s *Stand, secrets Secrets, addr Addresses, variant int, observe Observer) (*Rendered, error) {
	rep := &Report{}
	out := render(fsys, s, secrets, addr, rep, observe, variant)
	secrets.redactor().scrubReport(rep)
	if err := rep.err(); err != nil {
		return nil, err
	}
	return out, nil
}

type renderer struct {
	fsys    fs.FS
	s       *Stand
	secrets Secrets
	addr    Addresses
	rep     *Report
	cache   map[string]*template.Template
	observe Observer
	order   keyOrder // of the mappings built from the manifest (order.go)
	variant int      // preferences varied for a proof (RenderVariant); 0: as written
}

func render(fsys fs.FS, s *Stand, secrets Secrets, addr Addresses, rep *Report, observe Observer, variant int) *Rendered {
	r := &renderer{fsys: fsys, s: s, secrets: secrets, addr: addr, rep: rep, cache: map[string]*template.Template{}, observe: observe, order: keyOrder{}, variant: variant}
	out := &Rendered{Stand: s}
	base := r.baseContext()
	profiles := map[string]*Profile{}
	for _, p := range s.Profiles {
		profiles[p.Name] = p
	}
	for _, n := range s.Nodes {
		p := profiles[n.Profile]
		rn := &RenderedNode{Name: n.Name, ServerName: s.ServerName(n), Profile: p}
		out.Nodes = append(out.Nodes, rn)
		if p == nil || p.CloudInit == "" {
			continue
		}
		// Cloud-init is rendered before the server exists: no addresses, only names (docs/stands-engine.md#cloud-init).
		ctx := map[string]any{
			"user_admin": base["user_admin"], "user_app": base["user_app"], "ssh_public_key": base["ssh_public_key"],
			"network_ip_range": base["network_ip_range"], "stand": base["stand"],
			"node": map[string]any{"name": n.Name, "server_name": s.ServerName(n)},
		}
		data, ok := r.file(p.CloudInit, ctx)
		if !ok {
			continue
		}
		rn.CloudInit = data
		r.checkCloudInit(p.CloudInit, data)
	}
	for _, a := range s.Apps {
		for _, in := range a.Instances {
			if ri := r.instance(base, a, in); ri != nil {
				out.Instances = append(out.Instances, ri)
			}
		}
	}
	r.checkNodeClaims(out)
	return out
}

func clone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m)+8)
	for k, v := range m {
		c[k] = v
	}
	return c
}

// baseContext holds the Stands Engine's context names and what every template may see about the stand.
func (r *renderer) baseContext() map[string]any {
	s := r.s
	nodes := map[string]any{}
	var nodeNames, appNames []string
	for _, n := range s.Nodes {
		nodes[n.Name] = r.nodeContext(n.Name)
		nodeNames = append(nodeNames, n.Name)
	}
	r.order.remember(nodes, nodeNames)
	instances := map[string]any{}
	for _, a := range s.Apps {
		byName := map[string]any{}
		var names []string
		for _, in := range a.Instances {
			names = append(names, in.Name)
			na := r.addr.Nodes[in.Node]
			byName[in.Name] = map[string]any{
				"node": in.Node, "private_ip": na.PrivateIP, "public_ip": na.PublicIPv4, "connection_name": in.ConnectionName,
				"preferences": r.prefsValue(in.Preferences.node()),
			}
		}
		instances[a.Name] = byName
		r.order.remember(byName, names)
		appNames = append(appNames, a.Name)
	}
	r.order.remember(instances, appNames)
	return map[string]any{
		"user_admin":       s.Users.Sudo,
		"user_app":         s.Users.App,
		"ssh_public_key":   r.addr.SSHPublicKey,
		"network_ip_range": r.addr.NetworkIPRange,
		"stand":            map[string]any{"id": s.ID, "project": s.Project, "env": s.Env, "owner": s.Owner},
		"nodes":            nodes,
		"instances":        instances,
	}
}

func (r *renderer) nodeContext(name string) map[string]any {
	na := r.addr.Nodes[name]
	server := ""
	for _, n := range r.s.Nodes {
		if n.Name == name {
			server = r.s.ServerName(n)
		}
	}
	return map[string]any{"name": name, "server_name": server, "public_ip": na.PublicIPv4, "private_ip": na.PrivateIP}
}

// instanceContext is what an instance's templates see, and the label its problems name it by.
func (r *renderer) instanceContext(base map[string]any, a *App, in *Instance) (map[string]any, string) {
	ctx := clone(base)
	ctx["app"] = a.Name
	ctx["instance"] = in.Name
	ctx["node"] = r.nodeContext(in.Node)
	ctx["preferences"] = r.prefsValue(in.Preferences.node())
	ctx["registry"] = r.registryContext(a.Registry)
	return ctx, fmt.Sprintf("rendered for %s/%s", a.Name, in.Name)
}

// connection renders the instance's connection template, when its package has one.
func (r *renderer) connection(ri *RenderedInstance, pkg *Package, ctx map[string]any, label string) {
	if pkg.Connection == "" {
		return
	}
	if data, ok := r.file(pkg.Connection, ctx); ok {
		ri.Connection = r.checkConnection(pkg.Connection, data, label)
	}
}

// connections renders only the connection templates, of every instance render would make, in its
// order: what the blind record (connection.go) needs, without the rest of a render.
func connections(fsys fs.FS, s *Stand, secrets Secrets, addr Addresses, rep *Report) []*RenderedInstance {
	r := &renderer{fsys: fsys, s: s, secrets: secrets, addr: addr, rep: rep, cache: map[string]*template.Template{}, order: keyOrder{}}
	base := r.baseContext()
	var out []*RenderedInstance
	for _, a := range s.Apps {
		for _, in := range a.Instances {
			if a.Package == nil || a.Package.File == "" {
				continue
			}
			ri := &RenderedInstance{App: a.Name, Instance: in.Name, Node: in.Node, ConnectionName: in.ConnectionName}
			ctx, label := r.instanceContext(base, a, in)
			r.connection(ri, a.Package, ctx, label)
			out = append(out, ri)
		}
	}
	return out
}

func (r *renderer) instance(base map[string]any, a *App, in *Instance) *RenderedInstance {
	pkg := a.Package
	if pkg == nil || pkg.File == "" {
		return nil
	}
	ri := &RenderedInstance{App: a.Name, Instance: in.Name, Node: in.Node, ConnectionName: in.ConnectionName, Registry: a.Registry, PostStartHook: pkg.PostStart, pos: in.Pos}
	ctx, label := r.instanceContext(base, a, in)
	r.images(ri, pkg, ctx, label)
	r.ports(ri, a, in, ctx, label)
	r.files(ri, pkg, ctx, label)
	r.pod(ri, pkg, ctx, label)
	r.connection(ri, pkg, ctx, label)
	if h := pkg.PostStart; h != nil && h.Src != "" {
		if data, ok := r.fileOrRaw(h.Src, ctx); ok {
			ri.PostStart = &RenderedFile{Src: h.Src, Dest: "", Mode: 0o700, Content: data}
		}
	}
	return ri
}

// images renders the package's image references, each checked for its form.
func (r *renderer) images(ri *RenderedInstance, pkg *Package, ctx map[string]any, label string) {
	for _, img := range pkg.Images {
		v, ok := r.inline(img, ctx)
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if !imageRef.MatchString(v) {
			r.rep.addf(img.Pos, RuleImage, "image reference is empty or malformed when %s (a reference is host[:port]/path[:tag|@digest])", label)
			continue
		}
		ri.Images = append(ri.Images, v)
	}
}

// ports renders the ports of the instance's roles: those it names, else every role of its package.
func (r *renderer) ports(ri *RenderedInstance, a *App, in *Instance, ctx map[string]any, label string) {
	pkg := a.Package
	roles := pkg.Roles
	if len(in.Roles) > 0 {
		roles = nil
		for _, name := range in.Roles {
			found := false
			for _, ro := range pkg.Roles {
				if ro.Name == name {
					roles, found = append(roles, ro), true
				}
			}
			if !found {
				r.rep.addf(in.Pos, RuleRefApp, "instance %s/%s: app package %s has no role %q", a.Name, in.Name, Shown(pkg.Dir), name)
			}
		}
	}
	for _, ro := range roles {
		for _, pt := range ro.Ports {
			v, ok := r.inline(pt, ctx)
			if !ok {
				continue
			}
			p, err := parsePort(v)
			if err != nil {
				r.rep.addf(pt.Pos, RulePort, "role %s port %s when %s", ro.Name, err, label)
				continue
			}
			p.Role, p.Zone = ro.Name, ro.Zone
			ri.Ports = append(ri.Ports, p)
		}
	}
}

// files renders the package's files and their destinations, each a clean absolute path used once.
func (r *renderer) files(ri *RenderedInstance, pkg *Package, ctx map[string]any, label string) {
	dests := map[string]bool{}
	for _, f := range pkg.Files {
		dest, ok := r.inline(f.Dest, ctx)
		if !ok || f.Src == "" {
			continue
		}
		dest = strings.TrimSpace(dest)
		switch {
		case !path.IsAbs(dest):
			r.rep.addf(f.Dest.Pos, RuleUploadDest, "files[].dest must be an absolute path on the node when %s", label)
			continue
		case path.Clean(dest) != dest || strings.HasSuffix(dest, "/"):
			r.rep.addf(f.Dest.Pos, RuleUploadDest, "files[].dest %s is not a clean file path when %s", r.shown(dest), label)
			continue
		case dests[dest]:
			r.rep.addf(f.Dest.Pos, RuleUploadDest, "files[].dest %s is used twice when %s", r.shown(dest), label)
			continue
		case len(dest) > maxPath || slices.ContainsFunc(strings.Split(dest, "/"), func(c string) bool { return len(c) > maxUnitName }):
			// The length only: the rendered path may hold a preference's value.
			r.rep.addf(f.Dest.Pos, RuleNameLength, "files[].dest is %d characters, or has a part longer than %d, when %s", len(dest), maxUnitName, label)
			continue
		}
		dests[dest] = true
		content, ok := r.fileOrRaw(f.Src, ctx)
		if !ok {
			continue
		}
		mode, _ := parseMode(f.Mode)
		ri.Files = append(ri.Files, RenderedFile{Src: f.Src, Dest: dest, Mode: mode, Content: content})
	}
}

// pod renders the package's Pod YAML and reads the host ports it claims.
func (r *renderer) pod(ri *RenderedInstance, pkg *Package, ctx map[string]any, label string) {
	if pkg.Pod == "" {
		return
	}
	data, ok := r.file(pkg.Pod, ctx)
	if !ok {
		return
	}
	ri.Pod, ri.podSrc = data, pkg.Pod
	ri.HostPorts = r.checkPod(pkg.Pod, data, label)
	if r.checkRolePortsPublished(pkg.Pod, ri, data, label) {
		// On the host network the role ports are the app's own: claims too, declared or not.
		for _, rp := range ri.Ports {
			if !slices.ContainsFunc(ri.HostPorts, func(h Port) bool { return h.Number == rp.Number && h.Proto == rp.Proto }) {
				ri.HostPorts = append(ri.HostPorts, Port{Number: rp.Number, Proto: rp.Proto})
			}
		}
	}
}

func (r *renderer) registryContext(name string) map[string]any {
	for _, reg := range r.s.Registries {
		if reg.Name == name {
			url, _ := reg.URL.Resolve(r.secrets)
			return map[string]any{"name": reg.Name, "url": url, "insecure": reg.Insecure}
		}
	}
	return map[string]any{"name": "", "url": "", "insecure": false}
}

// prefsValue turns preferences into plain Go values for templates, with secrets resolved. Numbers
// and booleans keep their YAML type so templates can do arithmetic and conditions.
func (r *renderer) prefsValue(n *node) any { return r.value(n, true) }

// value is a preference's value for templates; top is the preferences' own mapping, which a
// variant never empties (every template names its keys).
func (r *renderer) value(n *node, top bool) any {
	if n == nil {
		return nil
	}
	switch n.kind {
	case kindMap:
		m := make(map[string]any, len(n.fields))
		keys := make([]string, 0, len(n.fields))
		if r.variant == 2 && !top {
			r.order.remember(m, keys)
			return m
		}
		for _, f := range n.fields {
			m[f.key] = r.value(f.value, false)
			keys = append(keys, f.key)
		}
		r.order.remember(m, keys)
		return m
	case kindSeq:
		if r.variant == 2 {
			return []any{}
		}
		l := make([]any, len(n.items))
		for i, it := range n.items {
			l[i] = r.value(it, false)
		}
		return l
	case kindSecret:
		v, _ := r.secrets.Value(n.secret)
		return v
	case kindScalar:
		switch n.tag {
		case "!!int":
			if i, err := strconv.ParseInt(strings.ReplaceAll(n.value, "_", ""), 0, 64); err == nil {
				if r.variant == 1 {
					i++
				}
				return i
			}
		case "!!float":
			if f, err := strconv.ParseFloat(n.value, 64); err == nil {
				if r.variant == 1 {
					f++
				}
				return f
			}
		case "!!bool":
			if b, err := strconv.ParseBool(strings.ToLower(n.value)); err == nil {
				return b != (r.variant == 1)
			}
		}
		if r.variant == 1 {
			return n.value + ` <&'">`
		}
		return n.value
	}
	return nil
}

// shown is how a rendered value appears in a message: quoted when the render saw no secret's real
// value (a plan's placeholders, a stand without secrets), else not at all. A message names places;
// it never carries output of a template that saw a secret (the redactor is only a second line: it
// cannot know a secret's hex or its fragments).
func (r *renderer) shown(v any) string {
	if r.secrets.blind() {
		t := fmt.Sprint(v)
		if len(t) > 100 { // a message quotes a value; it does not carry a rendered file
			t = t[:100] + "…"
		}
		return strconv.Quote(t)
	}
	return "(value not shown: the render saw secrets)"
}

// shownMsg is a parser's message about rendered output, which may quote it, under the same rule.
func (r *renderer) shownMsg(msg string) string {
	if r.secrets.blind() {
		return msg
	}
	return "the output does not parse (the parser's words are not shown: they may quote output that saw secrets)"
}

// funcs are the helpers every template gets. None of them puts a value into an error message.
var funcs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("value cannot be written as JSON")
		}
		return string(b), nil
	},
	"shquote": func(v any) string { return "'" + strings.ReplaceAll(fmt.Sprint(v), "'", `'\''`) + "'" },
	"trim":    func(v any) string { return strings.TrimSpace(fmt.Sprint(v)) }, // Mako's trim (stands-reconciler migrate)
	"b64enc":  func(v any) string { return base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(v))) },
	"indent": func(n int, v any) (string, error) {
		if n < 0 || n > 1000 {
			return "", fmt.Errorf("indent by %d: at most 1000", n)
		}
		pad := strings.Repeat(" ", n)
		return pad + strings.ReplaceAll(fmt.Sprint(v), "\n", "\n"+pad), nil
	},
	"default": func(def, v any) any {
		if v == nil || v == "" {
			return def
		}
		return v
	},
}

// NewTemplate is a template as the renderer parses one: missingkey=error and the helpers above (for
// stands-reconciler migrate, which renders a translated template to prove it).
func NewTemplate(name string) *template.Template { return newTemplate(name) }

func newTemplate(name string) *template.Template {
	return template.New(name).Option("missingkey=error").Funcs(funcs).Funcs(keyOrder(nil).funcs())
}

// template is a template of this render: its iteration helpers follow the manifest's order.
func (r *renderer) template(name string) *template.Template {
	return newTemplate(name).Funcs(r.order.funcs())
}

// file renders a repository template file.
func (r *renderer) file(p string, ctx map[string]any) ([]byte, bool) {
	t, ok := r.cache[p]
	if !ok {
		data, err := fs.ReadFile(r.fsys, p)
		if err != nil {
			r.rep.addf(Pos{File: p, Line: 1}, fileRule(err, RuleFileMissing), "read template: %v", fsErr(err))
			r.cache[p] = nil
			return nil, false
		}
		t, err = r.template(p).Parse(string(data))
		if err != nil {
			r.templateErr(Pos{File: p}, err)
			t = nil
		}
		r.cache[p] = t
	}
	if t == nil {
		return nil, false
	}
	buf := &limitedBuffer{max: MaxTemplateOutput}
	if err := t.Execute(buf, ctx); err != nil {
		r.templateErr(Pos{File: p}, err)
		return nil, false
	}
	if r.observe != nil {
		r.observe(p, ctx, r.order.keys, buf.Bytes())
	}
	return buf.Bytes(), true
}

// MaxTemplateOutput bounds what one template may write: a template that writes more fails at
// once instead of growing until memory runs out. (One that loops writing nothing is stopped by the
// render sandbox's CPU limit.)
const MaxTemplateOutput = 1 << 20

// limitedBuffer refuses to grow past max.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

var errOutputLimit = fmt.Errorf("the output is larger than %d KiB", MaxTemplateOutput>>10)

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, errOutputLimit
	}
	return b.Buffer.Write(p)
}

func (b *limitedBuffer) WriteString(s string) (int, error) { return b.Write([]byte(s)) }

// fileOrRaw renders a *.tmpl file and reads any other file as it is.
func (r *renderer) fileOrRaw(p string, ctx map[string]any) ([]byte, bool) {
	if strings.HasSuffix(p, ".tmpl") {
		return r.file(p, ctx)
	}
	data, err := fs.ReadFile(r.fsys, p)
	if err != nil {
		r.rep.addf(Pos{File: p, Line: 1}, fileRule(err, RuleFileMissing), "read file: %v", fsErr(err))
		return nil, false
	}
	return data, true
}

// inline renders a template string from app.yml.
func (r *renderer) inline(t Tmpl, ctx map[string]any) (string, bool) {
	if !strings.Contains(t.Text, "{{") {
		return t.Text, true
	}
	tt, err := r.template(t.Pos.File).Parse(t.Text)
	if err == nil {
		buf := &limitedBuffer{max: MaxTemplateOutput}
		if err = tt.Execute(buf, ctx); err == nil {
			return buf.String(), true
		}
	}
	r.templateErr(t.Pos, err)
	return "", false
}

// imageRef is the shape of a container image reference: [host[:port]/]name[/name...][:tag][@digest].
var imageRef = regexp.MustCompile(`^` +
	`(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

// templateErrRE splits text/template's "template: NAME:LINE[:COL]: MSG" errors.
var templateErrRE = regexp.MustCompile(`^template: (.*?):(\d+)(?::(\d+))?: (?:executing "[^"]*" at <([^>]*)>: )?(.*)$`)

// templateErr reports a parse or execution error at its line. For an inline template (at.Line > 0)
// the line inside the template is added to the line of the YAML value that holds it.
func (r *renderer) templateErr(at Pos, err error) {
	msg := err.Error()
	pos := at
	if m := templateErrRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		if at.Line > 0 {
			pos.Line = at.Line + line - 1
			pos.Col = 0
		} else {
			pos.Line, pos.Col = line, col
		}
		msg = m[5]
		if m[4] != "" {
			msg = "at " + m[4] + ": " + msg
		}
	}
	if pos.Line == 0 {
		pos.Line = 1
	}
	r.rep.addf(pos, RuleRender, "template: %s", msg)
}

// checkCloudInit: cloud-init ignores user data that does not start with #cloud-config, silently.
func (r *renderer) checkCloudInit(p string, data []byte) {
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if string(bytes.TrimRight(first, " \r")) != "#cloud-config" {
		r.rep.addf(Pos{File: p, Line: 1}, RuleCloudInit, "rendered cloud-init must start with the line #cloud-config")
	}
	n, diags := parseYAML(p, data, false)
	for _, d := range diags {
		r.rep.addf(d.Pos, RuleCloudInit, "rendered cloud-init, line %d of the output: %s", d.Pos.Line, r.shownMsg(d.Msg))
	}
	if n != nil && n.kind != kindMap {
		r.rep.addf(Pos{File: p, Line: 1}, RuleCloudInit, "rendered cloud-init must be a YAML mapping")
	}
}

// checkPod checks the Pod YAML shape the engine relies on and returns its hostPort claims.
func (r *renderer) checkPod(p string, data []byte, label string) []Port {
	n, diags := parseYAML(p, data, false)
	for _, d := range diags {
		r.rep.addf(d.Pos, RulePodYAML, "Pod YAML %s, line %d of the output: %s", label, d.Pos.Line, r.shownMsg(d.Msg))
	}
	if n == nil {
		return nil
	}
	bad := func(at *node, format string, args ...any) {
		r.rep.addf(posOf(at, Pos{File: p, Line: 1}), RulePodYAML, "Pod YAML %s: "+format, append([]any{label}, args...)...)
	}
	if k := n.get("kind"); k == nil || k.value != "Pod" {
		bad(k, "kind must be Pod")
	}
	if v := n.get("apiVersion"); v == nil || v.value != "v1" {
		bad(v, "apiVersion must be v1")
	}
	if name := n.get("metadata").get("name"); name == nil || name.kind != kindScalar || name.value == "" {
		bad(n.get("metadata"), "metadata.name is required")
	} else if len(name.value) > maxHostname {
		r.rep.addf(name.pos, RuleNameLength, "Pod YAML %s: metadata.name is %d characters; it is the pod's hostname, at most %d", label, len(name.value), maxHostname)
	}
	containers := n.get("spec").get("containers")
	if containers == nil || containers.kind != kindSeq || len(containers.items) == 0 {
		bad(n.get("spec"), "spec.containers must list at least one container")
		return nil
	}
	// On the host network a container binds the host's ports itself: every port it declares is a
	// claim on the node, whether or not it says hostPort.
	hostNetwork := n.get("spec").get("hostNetwork") != nil && n.get("spec").get("hostNetwork").value == "true"
	var claims []Port
	for _, c := range containers.items {
		if img := c.get("image"); img == nil || img.kind != kindScalar || img.value == "" {
			bad(c, "every container needs an image")
		}
		ports := c.get("ports")
		if ports == nil {
			continue
		}
		if ports.kind != kindSeq {
			bad(ports, "containers[].ports must be a list")
			continue
		}
		for _, pt := range ports.items {
			hp := pt.get("hostPort")
			if hp == nil && hostNetwork {
				hp = pt.get("containerPort")
			}
			if hp == nil {
				continue
			}
			num, err := strconv.Atoi(hp.value)
			if hp.kind != kindScalar || err != nil || num < 1 || num > 65535 {
				bad(hp, "hostPort must be a number from 1 to 65535")
				continue
			}
			proto := "tcp"
			if pr := pt.get("protocol"); pr != nil {
				proto = strings.ToLower(pr.value)
			}
			claims = append(claims, Port{Number: num, Proto: proto})
		}
	}
	return claims
}

// checkRolePortsPublished: the engine waits for role ports to listen on the node, which only happens
// for ports the Pod publishes with hostPort (or a pod on the host network, reported as true).
func (r *renderer) checkRolePortsPublished(p string, ri *RenderedInstance, data []byte, label string) (hostNetwork bool) {
	n, _ := parseYAML(p, data, false)
	if hn := n.get("spec").get("hostNetwork"); hn != nil && hn.value == "true" {
		return true
	}
	for _, rp := range ri.Ports {
		found := false
		for _, hp := range ri.HostPorts {
			if hp.Number == rp.Number && hp.Proto == rp.Proto {
				found = true
			}
		}
		if !found {
			r.rep.addf(Pos{File: p, Line: 1}, RulePort, "role %s port %s is not published as a hostPort by the Pod YAML %s", rp.Role, r.shown(rp), label)
		}
	}
	return false
}

// checkConnection returns the compact JSON object, keeping the template's key order.
func (r *renderer) checkConnection(p string, data []byte, label string) json.RawMessage {
	trimmed := bytes.TrimSpace(data)
	if !json.Valid(trimmed) {
		var v any
		err := json.Unmarshal(trimmed, &v)
		line := 1
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line = 1 + bytes.Count(trimmed[:min(int(se.Offset), len(trimmed))], []byte("\n"))
		}
		r.rep.addf(Pos{File: p, Line: line}, RuleConnection, "connection %s is not valid JSON (line %d of the output); use the json function for values", label, line)
		return nil
	}
	if trimmed[0] != '{' {
		r.rep.addf(Pos{File: p, Line: 1}, RuleConnection, "connection %s must be a JSON object", label)
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil
	}
	return buf.Bytes()
}

// checkNodeClaims refuses two instances on one node that claim the same host port or upload to the
// same path: the second would fail on the node, or silently overwrite the first one's file.
func (r *renderer) checkNodeClaims(out *Rendered) {
	type claim struct{ node, key string }
	ports := map[claim]*RenderedInstance{}
	files := map[claim]*RenderedInstance{}
	for _, ri := range out.Instances {
		if ri.Node == "" {
			continue
		}
		seen := map[string]bool{}
		for _, p := range ri.HostPorts {
			k := claim{ri.Node, p.String()}
			if seen[k.key] {
				continue
			}
			seen[k.key] = true
			if prev, dup := ports[k]; dup {
				r.rep.addf(ri.pos, RulePortConflict, "node %s: host port %s is claimed by %s/%s and %s/%s", ri.Node, r.shown(p), prev.App, prev.Instance, ri.App, ri.Instance)
				continue
			}
			ports[k] = ri
		}
		for _, f := range ri.Files {
			k := claim{ri.Node, f.Dest}
			if prev, dup := files[k]; dup {
				r.rep.addf(ri.pos, RuleUploadDest, "node %s: %s is uploaded by %s/%s and %s/%s", ri.Node, r.shown(f.Dest), prev.App, prev.Instance, ri.App, ri.Instance)
				continue
			}
			files[k] = ri
		}
	}
}

func parsePort(s string) (Port, error) {
	s = strings.TrimSpace(s)
	num, proto, hasProto := strings.Cut(s, "/")
	p := Port{Proto: "tcp"}
	if hasProto {
		p.Proto = strings.ToLower(proto)
		if p.Proto != "tcp" && p.Proto != "udp" {
			return Port{}, fmt.Errorf("protocol must be tcp or udp")
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 65535 {
		return Port{}, fmt.Errorf("must be a number from 1 to 65535, optionally with /tcp or /udp")
	}
	p.Number = n
	return p, nil
}

// PodSrc is the Pod YAML template the instance was rendered from.
func (ri *RenderedInstance) PodSrc() string { return ri.podSrc }
