package manifest

import (
	"fmt"
	"regexp"
	"time"
)

// Stand is a validated-shape stand manifest after from_dep_manifest merging. Names keep the order
// they have in the merged manifest; the order of Apps and of each app's Instances is the deploy order.
type Stand struct {
	Path      string   // the stand.yml, slash-separated, relative to the repository root
	Manifests []string // every manifest merged into it: bases first, stand.yml last
	ID        string   // <owner>_<project>_<env>

	Project string
	Env     string
	Owner   string
	Protect bool // destroy is refused
	Suspend bool // no apply, no destroy, no drift check
	// Expires is when the stand ends (stand.expires; zero: it declares none), and ExpiresPos where it
	// says so. Lifetime.ExpiryOf adds the repository's default.
	Expires    time.Time
	ExpiresPos Pos

	Users      Users
	SSH        SSH
	Profiles   []*Profile
	Nodes      []*Node
	Apps       []*App
	Registries []*Registry

	// Warnings are what loads but should change, such as the old top-level users and ssh.
	Warnings []Diagnostic

	Pos  Pos   // of the `stand:` mapping, for errors about the whole stand
	root *node // merged document, for the spec hash
}

// Users are the accounts cloud-init creates: an administrator with sudo and the app user that runs
// rootless Podman under user systemd.
type Users struct {
	Sudo string
	App  string
}

// SSH names the Hetzner SSH key (by name) given to every server.
type SSH struct {
	KeyNameAdmin string
}

// Profile is a node profile: what kind of server a node is.
type Profile struct {
	Name       string
	Location   string
	ServerType string // type_serv
	Image      string
	Network    string // Hetzner network name
	CloudInit  string // template path relative to the repository root
	Pos        Pos
}

// Node is one server of the stand.
type Node struct {
	Name    string
	Profile string
	Apps    []string // placement: "app" (every instance) or "app/instance"
	Pos     Pos
}

// ServerName is the Hetzner server name of a node: <owner>-<project>-<env>-<node>.
func (s *Stand) ServerName(n *Node) string {
	return fmt.Sprintf("%s-%s-%s-%s", s.Owner, s.Project, s.Env, n.Name)
}

// App is an app of the stand: an app package and its ordered instances.
type App struct {
	Name      string
	Package   *Package
	Registry  string // name of a registry in Registries, may be empty
	Instances []*Instance
	Pos       Pos
}

// Instance is one deployment of an app on one node.
type Instance struct {
	Name           string
	Node           string // filled from nodes.<node>.apps
	ConnectionName string // key in the connection output; defaults to the instance name
	Roles          []string
	Preferences    *Prefs // the app's preferences merged with the instance's
	Pos            Pos
}

// Prefs are free-form instance preferences, possibly holding secrets.
type Prefs struct{ n *node }

// Registry is a container registry the app user logs in to before pulling.
type Registry struct {
	Name     string
	URL      Value
	Username Value
	Password Value
	Insecure bool
	Pos      Pos
}

// Value is a string that may be a secret reference.
type Value struct {
	Text   string
	Secret *SecretRef
	Pos    Pos
}

// IsZero reports whether the value is absent.
func (v Value) IsZero() bool { return v.Text == "" && v.Secret == nil }

// Resolve returns the value's text, looking a secret up in secrets.
func (v Value) Resolve(secrets Secrets) (string, bool) {
	if v.Secret == nil {
		return v.Text, true
	}
	return secrets.Value(*v.Secret)
}

// SecretUse is one place a secret is referenced.
type SecretUse struct {
	Ref   SecretRef
	Pos   Pos
	Where string // e.g. registries.local.password
}

// SecretUses lists every secret reference of the stand in manifest order.
func (s *Stand) SecretUses() []SecretUse {
	var uses []SecretUse
	for _, r := range s.Registries {
		for _, f := range []struct {
			name string
			v    Value
		}{{"url", r.URL}, {"username", r.Username}, {"password", r.Password}} {
			if f.v.Secret != nil {
				uses = append(uses, SecretUse{Ref: *f.v.Secret, Pos: f.v.Pos, Where: "registries." + r.Name + "." + f.name})
			}
		}
	}
	for _, a := range s.Apps {
		for _, in := range a.Instances {
			walkSecrets(in.Preferences.node(), "apps."+a.Name+".instances."+in.Name+".preferences", &uses)
		}
	}
	return uses
}

func (p *Prefs) node() *node {
	if p == nil {
		return nil
	}
	return p.n
}

func walkSecrets(n *node, where string, uses *[]SecretUse) {
	if n == nil {
		return
	}
	switch n.kind {
	case kindSecret:
		*uses = append(*uses, SecretUse{Ref: n.secret, Pos: n.pos, Where: where})
	case kindMap:
		for _, f := range n.fields {
			walkSecrets(f.value, where+"."+f.key, uses)
		}
	case kindSeq:
		for i, it := range n.items {
			walkSecrets(it, fmt.Sprintf("%s[%d]", where, i), uses)
		}
	}
}

// idPart is what owner, project, env and node names must match: [a-z0-9-]+ (docs/manifest.md), without a
// leading or trailing dash so server names stay valid RFC 1123 labels.
var idPart = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// maxServerName is the RFC 1123 label limit that Hetzner applies to server names.
const maxServerName = 63
