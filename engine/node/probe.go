package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// InstanceHealth is what a node says of one instance: its unit's state and every way it differs
// from what was deployed. Problems name places (a unit, a port, a file's path), never content.
type InstanceHealth struct {
	Instance string // <app>--<instance>
	Unit     string
	State    string // the unit's ActiveState, with its SubState when they differ ("failed", "activating/auto-restart")
	Restarts int    // systemd's NRestarts: restarts by Restart= since the unit was last started by hand or by an apply
	Problems []string
}

// Healthy reports whether the instance has no problem.
func (h InstanceHealth) Healthy() bool { return len(h.Problems) == 0 }

// ProbeOptions say how deep a probe looks.
type ProbeOptions struct {
	// Files compares every uploaded file's content and mode with the deployment's (a read of the
	// instance); a periodic health check leaves them out.
	Files bool
	// Hooks runs the post-start hook of every instance whose app declares it a probe (idempotent).
	Hooks bool
}

// Probe looks at instances on one node in one command, reading and changing nothing: per instance
// the unit (loaded, active, its configuration hash the deployment's, its restart count), each role
// port listening inside the pod's network namespace (under rootless Podman the host's listener is
// the port forwarder, which listens whether the app does or not), and, as options ask, the files
// and the post-start hook. An error is a node that did not answer; what it answered is in the result.
func Probe(ctx context.Context, c *Conn, u AppUser, ds []Deployment, o ProbeOptions) ([]InstanceHealth, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	script, timeout := probeScript(ds, o)
	out, err := u.run(ctx, c, "health probe", script, nil, timeout)
	if err != nil {
		return nil, fmt.Errorf("probe instances: %w", err)
	}
	return parseProbe(out, ds, o), nil
}

// probeScript is the node's side of Probe: one section per instance, each line a fact parseProbe
// reads. A hook's output is dropped: it may print what it was configured with.
func probeScript(ds []Deployment, o ProbeOptions) (string, time.Duration) {
	var b strings.Builder
	timeout := time.Minute
	for i, d := range ds {
		svc := Quote(d.Unit.Service)
		fmt.Fprintf(&b, "echo '@@ %d'\n", i)
		fmt.Fprintf(&b, "systemctl --user show -p LoadState -p ActiveState -p SubState -p NRestarts -p Environment -- %s 2>/dev/null\n", svc)
		fmt.Fprintf(&b, "if systemctl --user is-active -q -- %s; then\n", svc)
		pods := PodNames(d.Instance.Pod)
		for _, pod := range pods {
			fmt.Fprintf(&b, "  infra=$(podman pod inspect -f %s -- %s 2>/dev/null)\n", Quote("{{.InfraContainerID}}"), Quote(pod))
			fmt.Fprintf(&b, "  pid=$([ -n \"$infra\" ] && podman inspect -f %s -- \"$infra\" 2>/dev/null)\n", Quote("{{.State.Pid}}"))
			fmt.Fprintf(&b, "  if [ -n \"$pid\" ] && [ \"$pid\" != 0 ]; then echo %s; podman unshare nsenter -t \"$pid\" -n ss -Hltun 2>/dev/null | awk '{print \"listen\", $1, $5}'; else echo %s; fi\n",
				Quote("pod up "+pod), Quote("pod down "+pod))
		}
		if len(pods) == 0 { // no Pod document to find the namespace by: the host's view
			b.WriteString("  echo 'pod host'; ss -Hltun 2>/dev/null | awk '{print \"listen\", $1, $5}'\n")
		}
		if o.Hooks && d.Hook != nil && d.Instance.PostStartHook != nil && d.Instance.PostStartHook.Probe {
			t := hookTimeout(d)
			timeout += t
			fmt.Fprintf(&b, "  timeout %d %s </dev/null >/dev/null 2>&1; echo \"hook $?\"\n", int(t.Seconds()), Quote(d.Hook.Path))
		}
		b.WriteString("fi\n")
		if o.Files {
			for j, f := range d.files() {
				b.WriteString(fileProbe(fmt.Sprintf("file %d ", j), f.Path))
			}
		}
	}
	return b.String(), timeout
}

func hookTimeout(d Deployment) time.Duration {
	if t := d.Instance.PostStartHook.Timeout; t > 0 {
		return t
	}
	return 5 * time.Minute
}

// parseProbe reads probeScript's output into one health per deployment.
func parseProbe(out string, ds []Deployment, o ProbeOptions) []InstanceHealth {
	sections := map[int][]string{}
	cur := -1
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if n, ok := strings.CutPrefix(line, "@@ "); ok {
			cur, _ = strconv.Atoi(n)
			continue
		}
		sections[cur] = append(sections[cur], line)
	}
	hs := make([]InstanceHealth, len(ds))
	for i, d := range ds {
		hs[i] = judge(d, sections[i], o)
	}
	return hs
}

// judge turns one instance's facts into its health.
func judge(d Deployment, lines []string, o ProbeOptions) InstanceHealth {
	h := InstanceHealth{Instance: InstanceName(d.Instance), Unit: d.Unit.Service}
	props := map[string]string{}
	listening := map[string]bool{}
	var podsDown []string
	hook := ""
	files := map[int]string{}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "listen "):
			f := strings.Fields(l)
			if len(f) == 3 {
				listening[f[1]+"/"+f[2][strings.LastIndexByte(f[2], ':')+1:]] = true
			}
		case strings.HasPrefix(l, "pod down "):
			podsDown = append(podsDown, strings.TrimPrefix(l, "pod down "))
		case strings.HasPrefix(l, "hook "):
			hook = strings.TrimPrefix(l, "hook ")
		case strings.HasPrefix(l, "file "):
			f := strings.SplitN(l, " ", 3)
			if n, err := strconv.Atoi(f[1]); err == nil && len(f) == 3 {
				files[n] = f[2]
			}
		case strings.Contains(l, "="):
			k, v, _ := strings.Cut(l, "=")
			props[k] = v
		}
	}
	h.Restarts, _ = strconv.Atoi(props["NRestarts"])
	h.State = props["ActiveState"]
	if sub := props["SubState"]; sub != "" && sub != h.State && !(h.State == "active" && sub == "running") {
		h.State += "/" + sub
	}
	switch {
	case props["LoadState"] == "" || props["LoadState"] == "not-found":
		h.Problems = append(h.Problems, "unit missing")
	case props["SubState"] == "auto-restart":
		h.Problems = append(h.Problems, "unit restarting after a failure")
	case props["ActiveState"] != "active":
		h.Problems = append(h.Problems, "unit "+props["ActiveState"])
	default:
		if hash := envValue(props["Environment"], "STANDS_CONFIG_HASH"); d.Unit.ConfigHash != "" && hash != d.Unit.ConfigHash {
			h.Problems = append(h.Problems, "unit runs another configuration")
		}
		for _, pod := range podsDown {
			h.Problems = append(h.Problems, "pod "+pod+" not running")
		}
		if len(podsDown) == 0 {
			for _, p := range d.Instance.Ports {
				proto := p.Proto
				if proto == "" {
					proto = "tcp"
				}
				if !listening[proto+"/"+strconv.Itoa(p.Number)] {
					h.Problems = append(h.Problems, "port "+p.String()+" not listening in the pod")
				}
			}
		}
		if hook != "" && hook != "0" {
			h.Problems = append(h.Problems, "post-start probe failed (exit "+hook+")")
		}
	}
	if o.Files {
		for j, f := range d.files() {
			switch got := files[j]; {
			case got == "" || strings.HasPrefix(got, "- "):
				h.Problems = append(h.Problems, "file "+f.Path+" missing")
			case got != fileFact(f):
				h.Problems = append(h.Problems, "file "+f.Path+" differs")
			}
		}
	}
	return h
}

// envValue is one variable of systemd's Environment= property ("A=1 B=2").
func envValue(env, name string) string {
	for _, kv := range strings.Fields(env) {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// PodNames are the names of the pods a Pod YAML declares (`kind: Pod`, `metadata.name`), which
// `podman kube play` gives them.
func PodNames(podYAML []byte) []string {
	dec := yaml.NewDecoder(strings.NewReader(string(podYAML)))
	var names []string
	for {
		var doc struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return names
		}
		if doc.Kind == "Pod" && doc.Metadata.Name != "" {
			names = append(names, doc.Metadata.Name)
		}
	}
	sort.Strings(names)
	return names
}

// NodeProblems looks at a node's own setup (Prepare's steps): the app user's linger and user
// systemd, its Podman socket and the app-net network. The firewall's ports are not read back.
func NodeProblems(ctx context.Context, c *Conn, u AppUser) ([]string, error) {
	script := fmt.Sprintf(`[ "$(loginctl show-user -p Linger --value %[1]s 2>/dev/null)" = yes ] || echo 'linger off for %[2]s'
systemctl is-active -q user@%[3]d.service || echo 'user systemd of %[2]s not running'
`, Quote(u.Name), u.Name, u.UID)
	out, err := c.Run(ctx, script, nil, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("probe node: %w", err)
	}
	problems := lines(out)
	if len(problems) > 0 {
		return problems, nil // the user's manager is down: what runs under it cannot be asked
	}
	out, err = u.run(ctx, c, "probe the user's Podman", "systemctl --user is-active -q podman.socket || echo 'podman.socket not active'\npodman network exists "+Network+" || echo 'network "+Network+" missing'\n", nil, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("probe node: %w", err)
	}
	return lines(out), nil
}

// MissingImages lists the images the app user's Podman store lacks.
func MissingImages(ctx context.Context, c *Conn, u AppUser, images []string) ([]string, error) {
	if len(images) == 0 {
		return nil, nil
	}
	var b strings.Builder
	for _, img := range images {
		fmt.Fprintf(&b, "podman image exists -- %s || echo %s\n", Quote(img), Quote(img))
	}
	out, err := u.run(ctx, c, "probe images", b.String(), nil, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("probe images: %w", err)
	}
	return lines(out), nil
}

// Restart restarts an instance's unit (a heal's first step).
func Restart(ctx context.Context, c *Conn, u AppUser, d Deployment) error {
	svc := Quote(d.Unit.Service)
	// No `systemctl status` on failure, unlike Deploy: its journal lines are the app's output, which
	// may print what it was configured with, and a heal's log has no secrets to scrub it with.
	script := "systemctl --user reset-failed " + svc + " 2>/dev/null; systemctl --user restart " + svc + "\n"
	if _, err := u.run(ctx, c, "restart "+d.Unit.Service, script, nil, 15*time.Minute); err != nil {
		return fmt.Errorf("restart %s: %w", InstanceName(d.Instance), err)
	}
	return nil
}

func lines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
