package manifest

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// errNoOwner: a stand whose manifest names no owner takes the command's (the Stands Engine's
// STAND__USER is one); with none, its id and its state's place are unknown, and no default is
// assumed for them.
const errNoOwner = "stand.owner is required: the manifest names none and no owner is set ($STAND__USER as for the Stands Engine, or --owner, $STANDS_OWNER)"

// decoder turns node trees into typed values, recording every problem with its place.
type decoder struct {
	rep *Report
}

// fields checks n is a mapping whose keys are all known, reporting unknown keys (typos) with
// their place. A missing (nil) node is fine: required fields are checked by the caller.
func (d *decoder) fields(n *node, where string, known ...string) bool {
	if n == nil {
		return false
	}
	if n.kind != kindMap {
		d.rep.addf(n.pos, RuleType, "%s must be a mapping, not a %s", where, n.kind)
		return false
	}
	for _, f := range n.fields {
		if !slices.Contains(known, f.key) {
			d.rep.addf(f.keyPos, RuleSyntax, "unknown key %q in %s (known: %s)", f.key, where, strings.Join(known, ", "))
		}
	}
	return true
}

// str decodes a plain string; numbers and booleans are taken as written. Secrets are refused.
func (d *decoder) str(n *node, where string, required bool, at Pos) string {
	if n == nil || (n.kind == kindScalar && n.value == "") {
		if required {
			if n != nil {
				at = n.pos
			}
			d.rep.addf(at, RuleRequired, "%s is required", where)
		}
		return ""
	}
	switch n.kind {
	case kindScalar:
		return n.value
	case kindSecret:
		d.rep.addf(n.pos, RuleSecret, "%s cannot be a secret", where)
	default:
		d.rep.addf(n.pos, RuleType, "%s must be a string, not a %s", where, n.kind)
	}
	return ""
}

func (d *decoder) boolean(n *node, where string) bool {
	if n == nil {
		return false
	}
	if n.kind == kindScalar && n.tag == "!!bool" {
		b, _ := strconv.ParseBool(strings.ToLower(n.value))
		return b
	}
	d.rep.addf(n.pos, RuleType, "%s must be true or false", where)
	return false
}

// value decodes a string that may be a secret.
func (d *decoder) value(n *node, where string, required bool, at Pos) Value {
	if n != nil && n.kind == kindSecret {
		ref := n.secret
		return Value{Secret: &ref, Pos: n.pos}
	}
	v := Value{Text: d.str(n, where, required, at), Pos: at}
	if n != nil {
		v.Pos = n.pos
	}
	return v
}

// strList decodes a list of strings.
func (d *decoder) strList(n *node, where string) []string {
	if n == nil {
		return nil
	}
	if n.kind != kindSeq {
		d.rep.addf(n.pos, RuleType, "%s must be a list", where)
		return nil
	}
	out := make([]string, 0, len(n.items))
	for i, it := range n.items {
		if s := d.str(it, fmt.Sprintf("%s[%d]", where, i), true, it.pos); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// entries returns the fields of a named-map section (node_profiles, nodes, apps…).
func (d *decoder) entries(n *node, where string) []field {
	if n == nil {
		return nil
	}
	if n.kind != kindMap {
		d.rep.addf(n.pos, RuleType, "%s must be a mapping of names", where)
		return nil
	}
	return n.fields
}

func (d *decoder) idPart(v string, pos Pos, what string) {
	if v != "" && !idPart.MatchString(v) {
		d.rep.addf(pos, RuleIDPart, "%s %q must match [a-z0-9-]+ (lower case letters, digits and inner dashes)", what, v)
	}
}

// noDoubleDash refuses "--" in app and instance names: <app>--<instance> names the instance's unit,
// resource and folders, and must name one instance only (app a--b's c would be app a's b--c).
func (d *decoder) noDoubleDash(v string, pos Pos, what string) {
	if strings.Contains(v, "--") {
		d.rep.addf(pos, RuleIDPart, "%s %q must not hold \"--\": it separates the app from the instance in <app>--<instance>", what, v)
	}
}

func posOf(n *node, fallback Pos) Pos {
	if n == nil {
		return fallback
	}
	return n.pos
}

func (d *decoder) stand(root *node, file string, opts LoadOptions) *Stand {
	s := &Stand{Path: file, Pos: Pos{File: file, Line: 1}}
	d.fields(root, "the manifest", "stand", "node_profiles", "nodes", "apps", "registries")

	meta := root.get("stand")
	if meta == nil {
		d.rep.addf(s.Pos, RuleRequired, "stand is required (project, env)")
	} else {
		s.Pos = meta.pos
	}
	d.fields(meta, "stand", "project", "env", "owner", "protect", "suspend", "expires", "users", "ssh")
	s.Project = d.str(meta.get("project"), "stand.project", true, s.Pos)
	s.Env = d.str(meta.get("env"), "stand.env", true, s.Pos)
	s.Owner = d.str(meta.get("owner"), "stand.owner", false, s.Pos)
	ownerPos := posOf(meta.get("owner"), s.Pos)
	if s.Owner == "" {
		s.Owner = opts.DefaultOwner
		if s.Owner == "" {
			d.rep.addf(s.Pos, RuleRequired, "%s", errNoOwner)
		}
	}
	s.Protect = d.boolean(meta.get("protect"), "stand.protect")
	s.Suspend = d.boolean(meta.get("suspend"), "stand.suspend")
	d.expires(meta.get("expires"), s)
	d.idPart(s.Owner, ownerPos, "stand.owner")
	d.idPart(s.Project, posOf(meta.get("project"), s.Pos), "stand.project")
	d.idPart(s.Env, posOf(meta.get("env"), s.Pos), "stand.env")
	s.ID = StandID(s.Owner, s.Project, s.Env)

	d.accounts(s, meta)
	d.profiles(s, root.get("node_profiles"))
	d.registries(s, root.get("registries"))
	d.apps(s, root.get("apps"))
	d.nodes(s, root.get("nodes"))
	d.crossRefs(s, root)
	d.checkNameLengths(s, posOf(meta.get("env"), s.Pos))
	return s
}

// accounts reads stand.users and stand.ssh (docs/stands-engine.md#accounts-and-keys).
func (d *decoder) accounts(s *Stand, meta *node) {
	users := meta.get("users")
	if users == nil {
		d.rep.addf(s.Pos, RuleRequired, "stand.users is required (sudo, app)")
	}
	d.fields(users, "stand.users", "sudo", "app")
	s.Users.Sudo = d.str(users.get("sudo"), "stand.users.sudo", true, posOf(users, s.Pos))
	s.Users.App = d.str(users.get("app"), "stand.users.app", true, posOf(users, s.Pos))
	for _, u := range []struct{ key, v string }{{"sudo", s.Users.Sudo}, {"app", s.Users.App}} {
		if u.v != "" && !unixUser.MatchString(u.v) {
			d.rep.addf(posOf(users.get(u.key), s.Pos), RuleType, "stand.users.%s %q is not a valid Unix user name", u.key, u.v)
		}
	}
	if s.Users.Sudo != "" && s.Users.Sudo == s.Users.App {
		d.rep.addf(posOf(users, s.Pos), RuleType, "stand.users.sudo and stand.users.app must differ")
	}
	ssh := meta.get("ssh")
	d.fields(ssh, "stand.ssh", "key_name_admin")
	s.SSH.KeyNameAdmin = d.str(ssh.get("key_name_admin"), "stand.ssh.key_name_admin", true, posOf(ssh, s.Pos))
}

var unixUser = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

func (d *decoder) profiles(s *Stand, n *node) {
	for _, f := range d.entries(n, "node_profiles") {
		where := "node_profiles." + f.key
		p := &Profile{Name: f.key, Pos: f.keyPos}
		d.fields(f.value, where, "location", "type_serv", "image", "network", "cloud-init")
		v := f.value
		if v == nil {
			d.rep.addf(f.keyPos, RuleRequired, "%s is empty", where)
			continue
		}
		p.Location = d.str(v.get("location"), where+".location", true, f.keyPos)
		p.ServerType = d.str(v.get("type_serv"), where+".type_serv", true, f.keyPos)
		p.Image = d.str(v.get("image"), where+".image", true, f.keyPos)
		p.Network = d.str(v.get("network"), where+".network", true, f.keyPos)
		if ci := v.get("cloud-init"); ci == nil {
			d.rep.addf(f.keyPos, RuleRequired, "%s.cloud-init is required (a template path)", where)
		} else if raw := d.str(ci, where+".cloud-init", true, f.keyPos); raw != "" {
			p.Pos = ci.pos
			rel, err := resolveRel(ci.pos.File, raw)
			if err != nil {
				d.rep.addf(ci.pos, RuleFileMissing, "%s.cloud-init %q: %v", where, raw, err)
			}
			p.CloudInit = rel
		}
		s.Profiles = append(s.Profiles, p)
	}
	if len(s.Profiles) == 0 {
		d.rep.addf(posOf(n, s.Pos), RuleRequired, "node_profiles needs at least one profile")
	}
}

func (d *decoder) registries(s *Stand, n *node) {
	for _, f := range d.entries(n, "registries") {
		where := "registries." + f.key
		d.fields(f.value, where, "url", "username", "password", "insecure")
		r := &Registry{Name: f.key, Pos: f.keyPos}
		r.URL = d.value(f.value.get("url"), where+".url", true, f.keyPos)
		r.Username = d.value(f.value.get("username"), where+".username", false, f.keyPos)
		r.Password = d.value(f.value.get("password"), where+".password", false, f.keyPos)
		r.Insecure = d.boolean(f.value.get("insecure"), where+".insecure")
		if r.Username.IsZero() != r.Password.IsZero() {
			d.rep.addf(f.keyPos, RuleRequired, "%s needs both username and password, or neither", where)
		}
		if r.URL.Secret == nil && strings.Contains(r.URL.Text, "://") {
			d.rep.addf(r.URL.Pos, RuleType, "%s.url is a registry host[:port][/path], without a scheme (use insecure: true for plain HTTP)", where)
		}
		s.Registries = append(s.Registries, r)
	}
}

func (d *decoder) apps(s *Stand, n *node) {
	for _, f := range d.entries(n, "apps") {
		where := "apps." + f.key
		a := &App{Name: f.key, Pos: f.keyPos}
		d.fields(f.value, where, "package", "registry", "preferences", "instances")
		v := f.value
		if v == nil {
			d.rep.addf(f.keyPos, RuleRequired, "%s is empty (package, instances)", where)
			continue
		}
		if pk := v.get("package"); pk == nil {
			d.rep.addf(f.keyPos, RuleRequired, "%s.package is required (path of the app package folder)", where)
		} else if raw := d.str(pk, where+".package", true, f.keyPos); raw != "" {
			dir, err := resolveRel(pk.pos.File, raw)
			if err != nil {
				d.rep.addf(pk.pos, RuleFileMissing, "%s.package %q: %v", where, raw, err)
			} else {
				a.Package = &Package{Dir: dir, declared: pk.pos}
			}
		}
		a.Registry = d.str(v.get("registry"), where+".registry", false, f.keyPos)
		appPrefs := v.get("preferences")
		if appPrefs != nil && appPrefs.kind != kindMap {
			d.rep.addf(appPrefs.pos, RuleType, "%s.preferences must be a mapping", where)
			appPrefs = nil
		}
		insts := d.entries(v.get("instances"), where+".instances")
		if len(insts) == 0 {
			d.rep.addf(posOf(v.get("instances"), f.keyPos), RuleRequired, "%s.instances needs at least one instance", where)
		}
		for _, g := range insts {
			iw := where + ".instances." + g.key
			d.fields(g.value, iw, "preferences", "connection_name", "roles")
			in := &Instance{Name: g.key, Pos: g.keyPos}
			d.idPart(g.key, g.keyPos, "instance name")
			d.noDoubleDash(g.key, g.keyPos, "instance name")
			prefs := g.value.get("preferences")
			if prefs != nil && prefs.kind != kindMap {
				d.rep.addf(prefs.pos, RuleType, "%s.preferences must be a mapping", iw)
				prefs = nil
			}
			merged := mergeNodes(appPrefs, prefs)
			if merged == nil {
				merged = &node{kind: kindMap, pos: g.keyPos}
			}
			in.Preferences = &Prefs{n: merged}
			in.ConnectionName = d.str(g.value.get("connection_name"), iw+".connection_name", false, g.keyPos)
			if in.ConnectionName == "" {
				in.ConnectionName = g.key
			}
			in.Roles = d.strList(g.value.get("roles"), iw+".roles")
			a.Instances = append(a.Instances, in)
		}
		d.idPart(f.key, f.keyPos, "app name")
		d.noDoubleDash(f.key, f.keyPos, "app name")
		s.Apps = append(s.Apps, a)
	}
}

func (d *decoder) nodes(s *Stand, n *node) {
	for _, f := range d.entries(n, "nodes") {
		where := "nodes." + f.key
		d.fields(f.value, where, "profile", "apps")
		nd := &Node{Name: f.key, Pos: f.keyPos}
		d.idPart(f.key, f.keyPos, "node name")
		nd.Profile = d.str(f.value.get("profile"), where+".profile", true, f.keyPos)
		nd.Apps = d.strList(f.value.get("apps"), where+".apps")
		s.Nodes = append(s.Nodes, nd)
		if name := s.ServerName(nd); len(name) > maxServerName && s.Owner != "" {
			d.rep.addf(f.keyPos, RuleIDPart, "server name %q is longer than %d characters", name, maxServerName)
		}
	}
	if len(s.Nodes) == 0 {
		d.rep.addf(posOf(n, s.Pos), RuleRequired, "nodes needs at least one node")
	}
}

// crossRefs checks names that refer to other sections and places each instance on its node.
func (d *decoder) crossRefs(s *Stand, root *node) {
	profiles := map[string]bool{}
	for _, p := range s.Profiles {
		profiles[p.Name] = true
	}
	registries := map[string]bool{}
	for _, r := range s.Registries {
		registries[r.Name] = true
	}
	apps := map[string]*App{}
	for _, a := range s.Apps {
		apps[a.Name] = a
		if a.Registry != "" && !registries[a.Registry] {
			pos := posOf(root.get("apps").get(a.Name).get("registry"), a.Pos)
			d.rep.addf(pos, RuleRefRegistry, "apps.%s.registry: no registry %q in registries", a.Name, a.Registry)
		}
	}
	placed := map[*Instance]string{}
	for _, nd := range s.Nodes {
		if nd.Profile != "" && !profiles[nd.Profile] {
			d.rep.addf(posOf(root.get("nodes").get(nd.Name).get("profile"), nd.Pos), RuleRefProfile, "nodes.%s.profile: no profile %q in node_profiles", nd.Name, nd.Profile)
		}
		appsNode := root.get("nodes").get(nd.Name).get("apps")
		for i, ref := range nd.Apps {
			pos := nd.Pos
			if appsNode != nil && i < len(appsNode.items) {
				pos = appsNode.items[i].pos
			}
			appName, instName, one := strings.Cut(ref, "/")
			a := apps[appName]
			if a == nil {
				d.rep.addf(pos, RuleRefApp, "nodes.%s.apps: no app %q in apps", nd.Name, appName)
				continue
			}
			var targets []*Instance
			if one {
				i := slices.IndexFunc(a.Instances, func(in *Instance) bool { return in.Name == instName })
				if i < 0 {
					d.rep.addf(pos, RuleRefApp, "nodes.%s.apps: app %q has no instance %q", nd.Name, appName, instName)
					continue
				}
				targets = a.Instances[i : i+1]
			} else {
				targets = a.Instances
			}
			for _, in := range targets {
				if prev, dup := placed[in]; dup {
					d.rep.addf(pos, RulePlacement, "instance %s/%s is placed on node %s and on node %s; an instance runs on one node", appName, in.Name, prev, nd.Name)
					continue
				}
				placed[in] = nd.Name
				in.Node = nd.Name
			}
		}
	}
	names := map[string]string{}
	for _, a := range s.Apps {
		for _, in := range a.Instances {
			if in.Node == "" && len(s.Nodes) > 0 {
				d.rep.addf(in.Pos, RulePlacement, "instance %s/%s is not placed on any node (list it in nodes.<node>.apps)", a.Name, in.Name)
			}
			if in.ConnectionName == "id_stand" {
				d.rep.addf(in.Pos, RuleConnName, "connection name id_stand is reserved for the stand id; set connection_name")
			} else if prev, dup := names[in.ConnectionName]; dup {
				d.rep.addf(in.Pos, RuleConnName, "connection name %q is used by %s too; set connection_name", in.ConnectionName, prev)
			} else {
				names[in.ConnectionName] = a.Name + "/" + in.Name
			}
		}
	}
}
