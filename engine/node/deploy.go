package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// AppUser is the account that runs a node's instances under user systemd and rootless Podman.
type AppUser struct {
	Name string
	UID  int
	Home string
}

// run runs a script as the app user; what names it in errors (the script itself is wrapped in sudo
// and rarely says what failed).
func (u AppUser) run(ctx context.Context, c *Conn, what, script string, stdin []byte, timeout time.Duration) (string, error) {
	var in io.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	out, err := c.Run(ctx, AsApp(u.Name, u.UID, script), in, timeout)
	if ce, ok := err.(*CommandError); ok {
		ce.Command = what + " (as " + u.Name + ")"
	}
	return out, err
}

// Registry is what a node needs to pull from a registry: its address, credentials (optional) and
// whether to skip TLS verification (docs/stands-engine.md#registries-and-secrets: insecure adds --tls-verify=false to login and pull).
type Registry struct {
	URL      string   `json:"url"`
	Username string   `json:"username,omitempty"`
	Password string   `json:"password,omitempty"`
	Insecure bool     `json:"insecure,omitempty"`
	Images   []string `json:"images"`
}

func tlsFlag(insecure bool) string {
	if insecure {
		return " --tls-verify=false"
	}
	return ""
}

// PullImages does step 10 of docs/stands-engine.md#create for one node: per registry, log in as the app user, pull the
// images the node lacks in parallel, log out. The password goes to Podman on stdin, never on a
// command line another user of the node could read.
func PullImages(ctx context.Context, c *Conn, u AppUser, regs []Registry) error {
	for _, r := range regs {
		if len(r.Images) == 0 {
			continue
		}
		tls := tlsFlag(r.Insecure)
		login := r.Username != "" && r.URL != ""
		if login {
			// "--": a registry address is never taken for an option.
			script := fmt.Sprintf("podman login%s --username %s --password-stdin -- %s >/dev/null", tls, Quote(r.Username), Quote(r.URL))
			if _, err := u.run(ctx, c, "podman login "+r.URL, script, []byte(r.Password), 2*time.Minute); err != nil {
				return fmt.Errorf("registry login to %s as %s: %w", r.URL, u.Name, err)
			}
		}
		var script strings.Builder
		script.WriteString("pids=''\n")
		for _, img := range r.Images {
			fmt.Fprintf(&script, "(podman image exists -- %[1]s || podman pull -q%[2]s -- %[1]s >/dev/null) & pids=\"$pids $!\"\n", Quote(img), tls)
		}
		script.WriteString("rc=0; for p in $pids; do wait $p || rc=1; done; exit $rc\n")
		_, err := u.run(ctx, c, "podman pull "+strings.Join(r.Images, " "), script.String(), nil, 20*time.Minute)
		if login {
			// Credentials do not stay on the node, whatever the pull did — a cancelled run included.
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			_, lerr := u.run(lctx, c, "podman logout "+r.URL, "podman logout -- "+Quote(r.URL)+" >/dev/null", nil, time.Minute)
			cancel()
			if lerr != nil && err == nil {
				err = fmt.Errorf("registry logout: %w", lerr)
			}
		}
		if err != nil {
			return fmt.Errorf("pull %s: %w", strings.Join(r.Images, ", "), err)
		}
	}
	return nil
}

// Deployment is one instance as the node runs it: its unit, the files it needs and its hook.
type Deployment struct {
	Instance *manifest.RenderedInstance
	Flavour  Flavour
	Unit     Unit
	Hook     *File // the post-start hook, uploaded next to the Pod YAML; nil without one
}

// Layout lays an instance out on a node of the given flavour; hash is the instance's ConfigHash.
func Layout(standID string, in *manifest.RenderedInstance, u AppUser, f Flavour, hash string) Deployment {
	d := Deployment{Instance: in, Flavour: f, Unit: Units(standID, in, u.Home, f, hash)}
	if in.PostStart != nil {
		d.Hook = &File{Path: path.Join(u.Home, ".config", "stands", InstanceName(in), "post-start"), Mode: 0o700, Content: in.PostStart.Content}
	}
	return d
}

// files is everything uploaded: the app's files, then the unit's, then the hook.
func (d Deployment) files() []File {
	var out []File
	for _, f := range d.Instance.Files {
		out = append(out, File{Path: f.Dest, Mode: uint32(f.Mode.Perm()), Content: f.Content})
	}
	out = append(out, d.Unit.Files...)
	if d.Hook != nil {
		out = append(out, *d.Hook)
	}
	return out
}

// DeployOptions tune Deploy; zero values are those of docs/stands-engine.md#create.
type DeployOptions struct {
	PortTries    int           // 30
	PortInterval time.Duration // 2 s
	// Previous is the deployment this one replaces (an update): its files that the new one does not
	// have are removed, and its unit too when the unit's name changed (a new flavour).
	Previous *Deployment
	// Progress, when set, hears about each step (for the operator's log).
	Progress func(msg string)
}

// pendingMarker is where a node remembers that an instance's files changed and its unit has not been
// restarted since: a run cut short between the upload and the restart restarts it the next time.
func (d Deployment) pendingMarker(u AppUser) string {
	return path.Join(u.Home, ".config", "stands", InstanceName(d.Instance), "restart-pending")
}

// Deploy does steps 11–12 of docs/stands-engine.md#create for one instance, idempotently: upload the files that differ
// from the node's (content or mode), restart the unit when any of them changed — in this run or in
// one cut short — or it is not running, wait until it is active and every role port listens, then
// run the post-start hook. It reports whether the unit was (re)started.
func Deploy(ctx context.Context, c *Conn, u AppUser, d Deployment, o DeployOptions) (bool, error) {
	if o.PortTries <= 0 {
		o.PortTries = 30
	}
	if o.PortInterval <= 0 {
		o.PortInterval = 2 * time.Second
	}
	say := func(format string, args ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, args...))
		}
	}
	name := d.Instance.App + "/" + d.Instance.Instance
	files := d.files()
	marker := Quote(d.pendingMarker(u))
	differ, err := differing(ctx, c, u, files)
	if err != nil {
		return false, fmt.Errorf("upload files of %s: %w", name, err)
	}
	for _, f := range differ {
		if d.Hook == nil || f.Path != d.Hook.Path {
			if _, err := u.run(ctx, c, "mark the restart", "mkdir -p \"$(dirname "+marker+")\" && touch "+marker, nil, time.Minute); err != nil {
				return false, fmt.Errorf("%s: %w", name, err)
			}
			break
		}
	}
	if err := write(ctx, c, u, differ); err != nil {
		return false, fmt.Errorf("upload files of %s: %w", name, err)
	}
	if o.Previous != nil {
		if err := prune(ctx, c, u, *o.Previous, d); err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
	}
	svc := Quote(d.Unit.Service)
	state, err := u.run(ctx, c, "check "+d.Unit.Service, "test -e "+marker+" && echo pending; systemctl --user is-active -q "+svc+" || echo inactive; true", nil, time.Minute)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	restart := strings.Contains(state, "pending") || strings.Contains(state, "inactive")
	if restart {
		say("starting %s (%d files changed)", d.Unit.Service, len(differ))
		script := "systemctl --user daemon-reload\n"
		if d.Flavour != Quadlet {
			// Quadlet units are generated and cannot be enabled; the template's instance can.
			script += "systemctl --user enable -q " + svc + "\n"
		}
		script += "systemctl --user restart " + svc + " || { systemctl --user status --no-pager -n 30 " + svc + " >&2; exit 1; }\n"
		script += "rm -f " + marker + "\n"
		if _, err := u.run(ctx, c, "start "+d.Unit.Service, script, nil, 15*time.Minute); err != nil {
			return false, fmt.Errorf("start %s: %w", name, err)
		}
	}
	if err := waitReady(ctx, c, u, d, o); err != nil {
		return restart, fmt.Errorf("%s: %w", name, err)
	}
	if d.Hook != nil {
		timeout := d.Instance.PostStartHook.Timeout
		if timeout <= 0 {
			timeout = 5 * time.Minute
		}
		say("running the post-start hook of %s", name)
		if _, err := u.run(ctx, c, "post-start hook "+d.Hook.Path, Quote(d.Hook.Path), nil, timeout); err != nil {
			return restart, fmt.Errorf("post-start hook of %s (%s): %w", name, d.Instance.PostStart.Src, err)
		}
	}
	return restart, nil
}

// prune removes what the previous deployment had and this one does not: its unit when the unit's
// name changed, files at destinations no longer used.
func prune(ctx context.Context, c *Conn, u AppUser, prev, next Deployment) error {
	keep := map[string]bool{}
	for _, f := range next.files() {
		keep[f.Path] = true
	}
	var gone []File
	for _, f := range prev.files() {
		if !keep[f.Path] {
			gone = append(gone, f)
		}
	}
	script := ""
	if prev.Unit.Service != next.Unit.Service {
		script += stopScript(prev)
	}
	if len(gone) == 0 && script == "" {
		return nil
	}
	script += removeFilesScript(gone) + "systemctl --user daemon-reload\n"
	if _, err := u.run(ctx, c, "remove what the previous deployment left", script, nil, 5*time.Minute); err != nil {
		return fmt.Errorf("remove the previous deployment's leftovers: %w", err)
	}
	return nil
}

// waitReady polls on the node: the unit active and every role port listening, PortTries times.
func waitReady(ctx context.Context, c *Conn, u AppUser, d Deployment, o DeployOptions) error {
	svc := Quote(d.Unit.Service)
	var checks []string
	for _, p := range d.Instance.Ports {
		flag := "-Hltn"
		if p.Proto == "udp" {
			flag = "-Hlun"
		}
		checks = append(checks, fmt.Sprintf(`[ -n "$(ss %s 'sport = :%d')" ] || { ok=0; missing="$missing %s"; }`, flag, p.Number, p.String()))
	}
	interval := strconv.FormatFloat(o.PortInterval.Seconds(), 'f', -1, 64)
	script := fmt.Sprintf(`for i in $(seq %d); do
  ok=1; missing=''
  systemctl --user is-active -q %s || { ok=0; missing=' (unit not active)'; }
  %s
  [ $ok = 1 ] && exit 0
  sleep %s
done
echo "not ready after %d tries, %ss apart; waiting for:$missing" >&2
systemctl --user status --no-pager -n 20 %s >&2
exit 1`, o.PortTries, svc, strings.Join(append(checks, ":"), "\n  "), interval, o.PortTries, interval, svc)
	timeout := time.Duration(o.PortTries)*(o.PortInterval+5*time.Second) + time.Minute
	if _, err := u.run(ctx, c, "wait for "+d.Unit.Service+" and its ports", script, nil, timeout); err != nil {
		return fmt.Errorf("wait for %s and its ports: %w", d.Unit.Service, err)
	}
	return nil
}

// differing returns the files whose content or mode differ on the node (or that it lacks).
func differing(ctx context.Context, c *Conn, u AppUser, files []File) ([]File, error) {
	var probe strings.Builder
	for _, f := range files {
		probe.WriteString(fileProbe("", f.Path))
	}
	out, err := u.run(ctx, c, "read the node's files", probe.String(), nil, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("read the node's files: %w", err)
	}
	have := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var differ []File
	for i, f := range files {
		if i >= len(have) || have[i] != fileFact(f) {
			differ = append(differ, f)
		}
	}
	return differ, nil
}

// fileProbe prints a file's mode and SHA-256 on the node ("- " when it is missing), after prefix.
func fileProbe(prefix, path string) string {
	return fmt.Sprintf("printf '%s%%s %%s\\n' \"$(stat -c %%a %[2]s 2>/dev/null || echo -)\" \"$(sha256sum < %[2]s 2>/dev/null | cut -d' ' -f1)\"\n", prefix, Quote(path))
}

// fileFact is what fileProbe prints for a file as deployed.
func fileFact(f File) string {
	sum := sha256.Sum256(f.Content)
	return fmt.Sprintf("%o %s", f.Mode, hex.EncodeToString(sum[:]))
}

// write writes files as the app user, each through a temporary file renamed into place.
func write(ctx context.Context, c *Conn, u AppUser, files []File) error {
	for _, f := range files {
		tmp := f.Path + ".stands-tmp"
		script := fmt.Sprintf("set -e; umask 077; mkdir -p %s; cat > %s; chmod %o %s; mv -f %s %s",
			Quote(path.Dir(f.Path)), Quote(tmp), f.Mode, Quote(tmp), Quote(tmp), Quote(f.Path))
		if _, err := u.run(ctx, c, "write "+f.Path, script, f.Content, 2*time.Minute); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
	}
	return nil
}

// stopScript stops and disables a deployment's unit and fails when it is still active after.
func stopScript(d Deployment) string {
	svc := Quote(d.Unit.Service)
	return "systemctl --user disable --now -q " + svc + " 2>/dev/null || systemctl --user stop " + svc + " 2>/dev/null || true\n" +
		"if systemctl --user is-active -q " + svc + "; then echo " + Quote(d.Unit.Service+" is still active") + " >&2; exit 1; fi\n"
}

// removeFilesScript removes files, then the folders they were alone in, up to the app user's home
// (never above it).
func removeFilesScript(files []File) string {
	if len(files) == 0 {
		return ""
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, Quote(f.Path))
	}
	script := "rm -f " + strings.Join(paths, " ") + "\n"
	for _, f := range files {
		script += fmt.Sprintf(`d=$(dirname %s); while [ "${d#"$HOME"/}" != "$d" ] && rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done`+"\n", Quote(f.Path))
	}
	return script
}

// Remove stops an instance's unit and removes its unit, Pod YAML, hook and uploaded files: what an
// instance's delete does on a server that stays.
func Remove(ctx context.Context, c *Conn, u AppUser, d Deployment) error {
	script := stopScript(d) + removeFilesScript(d.files())
	script += "rm -rf " + Quote(path.Join(u.Home, ".config", "stands", InstanceName(d.Instance))) + "\n"
	script += "systemctl --user daemon-reload\n"
	if _, err := u.run(ctx, c, "remove "+d.Unit.Service, script, nil, 5*time.Minute); err != nil {
		return fmt.Errorf("remove %s/%s: %w", d.Instance.App, d.Instance.Instance, err)
	}
	return nil
}
