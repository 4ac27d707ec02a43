package prplan

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// A pull request's plan is blind to secrets (docs/pr-workflow.md#plans-never-read-a-secret): every
// !secret of the head, and of the tracked branch it is compared with, is its name-derived
// placeholder. Servers never see a secret, so their steps are Pulumi's, exact. What a secret feeds
// (an instance's configuration, a node's ports and images, registry credentials) is judged here
// instead, by comparing the two branches' renders under two placeholder sets: Pulumi's verdict on
// those inputs compares a placeholder with the production value, and would tell whether a guess
// was right.

// standPrint is what a stand's secret-fed resources look like under placeholders.
// Its fields are exported for the render sandbox's answer (gob).
type standPrint struct {
	Instances  map[string]instPrint // by <app>--<instance>
	Nodes      map[string]nodePrint
	Registries string // the registries as written: names, literal values, secret names
	Secrets    bool   // the stand references a secret
}

type instPrint struct {
	Node string
	A, B string // digests of its render under placeholder sets 0 and 1
	Src  string // digest of its package's files
}

type nodePrint struct{ PortsA, PortsB, ImagesA, ImagesB string }

// secretExists checks a reference by name. A source that cannot say so without the value is read
// and the value dropped here.
func (pl *Planner) secretExists(ctx context.Context, ref manifest.SecretRef) error {
	if c, ok := pl.sec.(interface {
		SecretExists(context.Context, manifest.SecretRef) error
	}); ok {
		return c.SecretExists(ctx, ref)
	}
	_, err := pl.sec.Secret(ctx, ref)
	return err
}

// blindEvaluation is a judgement under placeholders, with each stand's print (by stand id; nil when
// the stand cannot go on).
type blindEvaluation struct {
	*judge.Evaluation
	prints map[string]*standPrint
}

// evaluateBlind judges a snapshot as a pull request's plan sees it: every secret's existence is
// checked by name and its value is a placeholder; each stand that can go on gets its print. The
// tracked branch (main nil) is rendered here; a stand none of whose files changed since previous
// judged it (less than keepFor ago) is kept with its print. A pull request's head is untrusted:
// the stands it changes against main are rendered in the sandbox, where a runaway template is
// killed, and the others are kept from main, print and all.
func (pl *Planner) evaluateBlind(ctx context.Context, files fs.FS, main, previous *blindEvaluation, keepFor time.Duration) (*blindEvaluation, error) {
	known := map[manifest.SecretRef]error{}
	exists := func(ctx context.Context, ref manifest.SecretRef) error {
		if err, ok := known[ref]; ok {
			return err
		}
		if len(known) > maxSecretNames {
			return errTooManySecrets // each check is a read of the secret store
		}
		err := pl.secretExists(ctx, ref)
		if err == nil || errors.Is(err, manifest.ErrSecretNotFound) {
			known[ref] = err
		}
		return err
	}
	o := judge.Options{Owner: pl.cfg.Guards.Owner, Passphrase: pl.cfg.Passphrase,
		Secrets: manifest.PlaceholderSource{Exists: exists}, SkipRender: main != nil, KeepFor: keepFor}
	if previous != nil {
		o.Previous = previous.Evaluation
	}
	judged, err := judge.Evaluate(ctx, files, o)
	if err != nil {
		return nil, err
	}
	if len(known) > maxSecretNames {
		return nil, fmt.Errorf("%w: the commit names more than %d secrets", errTooManySecrets, maxSecretNames)
	}
	ev := &blindEvaluation{Evaluation: judged, prints: map[string]*standPrint{}}
	if main == nil {
		ev.printMain(previous)
		return ev, nil
	}
	same := map[string]*judge.Verdict{}
	for i := range main.Verdicts {
		if m := &main.Verdicts[i]; m.Input != nil {
			same[m.ID] = m
		}
	}
	var changed []string
	for _, v := range ev.Verdicts {
		if v.Input != nil {
			v.Input.Untrusted = true
		}
		if m := same[v.ID]; v.Input != nil && m != nil && m.Input.SpecHash == v.Input.SpecHash {
			ev.prints[v.ID] = main.prints[v.ID] // nothing of it changed: main rendered the same files
		} else if v.Input != nil {
			changed = append(changed, v.File)
		}
	}
	if len(changed) == 0 {
		return ev, nil
	}
	rendered, err := pl.renderSandboxed(ctx, files, changed)
	if err != nil {
		return nil, err
	}
	for i := range ev.Verdicts {
		v := &ev.Verdicts[i]
		got, ok := rendered[v.File]
		switch {
		case !ok || v.Input == nil:
		case len(got.Diags) > 0:
			rep := &manifest.Report{}
			rep.Add(got.Diags...)
			v.Input, v.Reason, v.Problem = nil, reason.Invalid, rep.Error()
		default:
			ev.prints[v.ID] = got.Print
		}
	}
	return ev, nil
}

// printMain prints the tracked branch's stands: a stand kept from previous keeps its print, which
// its render read through Input.FS (its reads, unchanged).
func (ev *blindEvaluation) printMain(previous *blindEvaluation) {
	anew := map[string]bool{}
	for _, f := range ev.Judged {
		anew[f] = true
	}
	for _, v := range ev.Verdicts {
		switch {
		case v.Input == nil:
		case !anew[v.File] && previous != nil && previous.prints[v.ID] != nil:
			ev.prints[v.ID] = previous.prints[v.ID]
		default:
			ev.prints[v.ID] = printOf(v.Input.FS, v.Input.Stand)
		}
	}
}

// maxSecretNames bounds the secret store reads one plan makes: a pull request chooses how many
// distinct names it references.
const maxSecretNames = 1000

var errTooManySecrets = errors.New("too many secrets")

func printOf(files fs.FS, s *manifest.Stand) *standPrint {
	p := &standPrint{Instances: map[string]instPrint{}, Nodes: map[string]nodePrint{}, Secrets: len(s.SecretUses()) > 0}
	p.Registries = digest(registriesAsWritten(s.Registries))
	src := map[string]string{}
	for _, a := range s.Apps {
		src[a.Name] = packageDigest(files, a.Package)
	}
	var renders [2]*manifest.Rendered
	for variant := range renders {
		// An error leaves the set empty: every instance then differs between the two sets.
		renders[variant], _ = manifest.Render(files, s, manifest.PlaceholderSecrets(s, variant), manifest.PreflightAddresses(s))
	}
	ports, images := [2]map[string][]string{{}, {}}, [2]map[string][]string{{}, {}}
	for variant, rd := range renders {
		if rd == nil {
			continue
		}
		for _, ri := range rd.Instances {
			name := ri.App + "--" + ri.Instance
			ip := p.Instances[name]
			ip.Node, ip.Src = ri.Node, src[ri.App]
			d := digest(ri)
			if variant == 0 {
				ip.A = d
			} else {
				ip.B = d
			}
			p.Instances[name] = ip
			for _, pt := range append(slices.Clone(ri.Ports), ri.HostPorts...) {
				ports[variant][ri.Node] = append(ports[variant][ri.Node], pt.String()+"/"+pt.Role)
			}
			images[variant][ri.Node] = append(images[variant][ri.Node], ri.Images...)
			images[variant][ri.Node] = append(images[variant][ri.Node], "registry:"+ri.Registry)
		}
	}
	for _, n := range s.Nodes {
		set := func(m map[string][]string) string { l := slices.Clone(m[n.Name]); slices.Sort(l); return digest(l) }
		p.Nodes[n.Name] = nodePrint{PortsA: set(ports[0]), PortsB: set(ports[1]), ImagesA: set(images[0]), ImagesB: set(images[1])}
	}
	return p
}

// registriesAsWritten is the registries without positions: moving a line changes nothing.
func registriesAsWritten(regs []*manifest.Registry) []string {
	var out []string
	val := func(v manifest.Value) string {
		if v.Secret != nil {
			return "!secret " + v.Secret.String()
		}
		return v.Text
	}
	for _, r := range regs {
		out = append(out, fmt.Sprintf("%s|%s|%s|%s|%t", r.Name, val(r.URL), val(r.Username), val(r.Password), r.Insecure))
	}
	return out
}

func packageDigest(files fs.FS, pkg *manifest.Package) string {
	if pkg == nil {
		return ""
	}
	paths := []string{pkg.File, pkg.Pod, pkg.Connection}
	for _, f := range pkg.Files {
		paths = append(paths, f.Src)
	}
	if pkg.PostStart != nil {
		paths = append(paths, pkg.PostStart.Src)
	}
	h := sha256.New()
	for _, p := range paths {
		if p == "" {
			continue
		}
		data, err := fs.ReadFile(files, p)
		if err != nil {
			data = []byte("unreadable: " + err.Error())
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func digest(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// change is how merging a pull request changes one secret-fed input.
type change int

const (
	unchanged change = iota
	changes          // exactly: nothing secret decides it
	mayChange        // a secret's value decides it, known only at the apply
)

func (p *standPrint) instance(name string, main *standPrint) change {
	h, ok := p.Instances[name]
	var m instPrint
	if main != nil {
		m, ok = main.Instances[name]
	}
	if !ok {
		return changes // new here, or on a branch whose stand could not be judged
	}
	return compare(h.A, h.B, m.A, m.B, h.Src != m.Src, p.Secrets)
}

// compare judges one input from its digests under the two placeholder sets on the head (a, b) and
// on the tracked branch (ma, mb), and whether the pull request edits the templates behind it.
func compare(a, b, ma, mb string, edited, secrets bool) change {
	sensitive := a != b || ma != mb // a secret's value shows in the render
	da, db := a != ma, b != mb
	switch {
	case edited && sensitive:
		// An edited template that reads a secret: whether its output still differs from the
		// tracked branch's with the real value is the secret's to say (a guess written as a
		// constant renders like production exactly when it is right).
		return mayChange
	case edited && secrets && !da && !db:
		// The same output under both placeholders, from edited templates of a stand with secrets:
		// a comparison with a constant ({{ if eq .secret "guess" }}) misses both placeholders.
		return mayChange
	case da && db:
		// The same templates on both branches render differently: the change is the pull
		// request's non-secret input, whatever the secret is.
		return changes
	case da || db:
		return mayChange
	}
	return unchanged
}

func (p *standPrint) node(node, key string, main *standPrint) change {
	h := p.Nodes[node]
	var m nodePrint
	if main != nil {
		m = main.Nodes[node]
	}
	edited := false // a template of an instance on the node
	for name, in := range p.Instances {
		if main == nil || in.Node != node {
			continue
		}
		if mi, ok := main.Instances[name]; ok && mi.Src != in.Src {
			edited = true
		}
	}
	switch key {
	case "ports":
		return compare(h.PortsA, h.PortsB, m.PortsA, m.PortsB, edited, false)
	case "registries":
		// The input is the images pulled and the credentials to pull them with, which are secrets.
		if main != nil && p.Registries != main.Registries {
			return mayChange
		}
	}
	// A port or an image compared with a secret constant is not looked for: the plan stays blind
	// to it (it shows no change), it only misses telling that one may come.
	return compare(h.ImagesA, h.ImagesB, m.ImagesA, m.ImagesB, edited, false)
}

// secretFed are the inputs of each kind of node resource that come from a render.
var secretFed = map[string][]string{"instance": {"configHash", "spec"}, "node": {"ports"}, "images": {"images", "registries"}}

// blindSteps rewrites a preview's node-level steps from the prints: an input a secret feeds changes
// when the head's render differs from the tracked branch's, whatever Pulumi compared. An update
// left with nothing changed is dropped; a resource that changes though Pulumi saw no difference gets
// its step.
func blindSteps(steps []stands.Step, main, head *standPrint) []stands.Step {
	var out []stands.Step
	seen := map[string]bool{}
	for _, s := range steps {
		keys, fed := secretFed[s.Kind]
		if !fed {
			out = append(out, s)
			continue
		}
		name := s.Node
		if s.Kind == "instance" {
			name = s.Instance
		}
		seen[s.Kind+"/"+name] = true
		var kept []string
		for _, k := range strings.Split(s.Changed, ",") {
			if k != "" && !slices.Contains(keys, k) {
				kept = append(kept, k)
			}
		}
		changed, may := head.judge(s.Kind, name, main)
		s.Changed, s.MayChange = strings.Join(append(kept, changed...), ","), may
		if s.Op == "update" && s.Changed == "" {
			continue
		}
		out = append(out, s)
	}
	if main == nil {
		return out // nothing to compare with: Pulumi's steps against an empty stack are creates
	}
	add := func(kind, name, node string, existed bool) {
		if changed, may := head.judge(kind, name, main); !seen[kind+"/"+name] && existed && len(changed) > 0 {
			out = append(out, stands.Step{Op: "update", Kind: kind, Node: node, Changed: strings.Join(changed, ","), MayChange: may})
			if kind == "instance" {
				out[len(out)-1].Instance = name
			}
		}
	}
	for _, name := range sortedKeys(head.Nodes) {
		_, existed := main.Nodes[name]
		add("node", name, name, existed)
		add("images", name, name, existed)
	}
	for _, name := range sortedKeys(head.Instances) {
		_, existed := main.Instances[name]
		add("instance", name, head.Instances[name].Node, existed)
	}
	// Whether Pulumi listed a step must not show in the order either.
	order := map[string]int{"": 0, "node": 1, "images": 2, "instance": 3}
	slices.SortStableFunc(out, func(x, y stands.Step) int {
		return cmp.Or(cmp.Compare(order[x.Kind], order[y.Kind]), cmp.Compare(x.Node, y.Node), cmp.Compare(x.Instance, y.Instance))
	})
	return out
}

// judge lists the secret-fed inputs of one resource that merging changes, and whether any of them
// depends on a secret's value.
func (p *standPrint) judge(kind, name string, main *standPrint) (changed []string, may bool) {
	for _, k := range secretFed[kind] {
		var c change
		switch {
		case kind != "instance":
			c = p.node(name, k, main)
		case k == "configHash": // spec changes with it; configHash is what restarts the instance
			c = p.instance(name, main)
		}
		if c != unchanged {
			changed = append(changed, k)
			may = may || c == mayChange
		}
	}
	return changed, may
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sameAs makes the head's placeholder evaluation comparable with the tracked branch's real one:
// a stand the pull request leaves as it is (equal spec hashes under placeholders on both branches)
// takes the tracked branch's real spec hash, so the diff sees no change; any other keeps its
// placeholder hash, which no stack holds.
func (ev *blindEvaluation) sameAs(main *judge.Evaluation, blindMain *blindEvaluation) {
	real, blind := map[string]*stands.Input{}, map[string]*judge.Verdict{}
	for _, v := range main.Verdicts {
		real[v.ID] = v.Input
	}
	for i := range blindMain.Verdicts {
		v := &blindMain.Verdicts[i]
		blind[v.ID] = v
	}
	for _, v := range ev.Verdicts {
		m, r := blind[v.ID], real[v.ID]
		if v.Input == nil || m == nil || m.Input == nil || r == nil || m.Input.SpecHash != v.Input.SpecHash {
			continue
		}
		v.Input.SpecHash = r.SpecHash
	}
}
