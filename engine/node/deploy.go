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

	"github.com/stands-engine/stands-reconciler/engine/manifest"
)

// AppUser is the account that runs a node's instances under user systemd and rootless Podman.
type AppUser struct {
	Name string
	UID  int
	Home string
}

func (u AppUser) run(ctx context.Context, c *Conn, script string, stdin []byte, timeout time.Duration) (string, error) {
	var in io.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	out, err := c.Run(ctx, AsApp(u.Name, u.UID, script), in, timeout)
	// Name what ran, not the sudo wrapper around it.
	if ce, ok := err.(*CommandError); ok {
		ce.Command = firstLine(script) + " (as " + u.Name + ")"
	}
	return out, err
}

// Registry is what a node needs to pull from a registry: its address, credentials (optional) and
// whether to skip TLS verification (seed §5: insecure adds --tls-verify=false to login and pull).
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

// PullImages does seed §8 step 10 for one node: per registry, log in as the app user, pull the
// images the node lacks in parallel, log out. The password goes to Podman on stdin, never on a
// command line another user of the node could read.
func PullImages(ctx context.Context, c *Conn, u AppUser, regs []Registry) error {
	for _, r := range regs {
		if len(r.Images) == 0 {
			continue
		}
		tls := tlsFlag(r.Insecure)
		if r.Username != "" && r.URL != "" {
			login := fmt.Sprintf("podman login%s --username %s --password-stdin %s >/dev/null", tls, Quote(r.Username), Quote(r.URL))
			if _, err := u.run(ctx, c, login, []byte(r.Password), 2*time.Minute); err != nil {
				return fmt.Errorf("registry login to %s as %s: %w", r.URL, u.Name, err)
			}
		}
		var script strings.Builder
		script.WriteString("pids=''\n")
		for _, img := range r.Images {
			fmt.Fprintf(&script, "(podman image exists %[1]s || podman pull -q%[2]s %[1]s >/dev/null) & pids=\"$pids $!\"\n", Quote(img), tls)
		}
		script.WriteString("rc=0; for p in $pids; do wait $p || rc=1; done; exit $rc\n")
		_, err := u.run(ctx, c, script.String(), nil, 20*time.Minute)
		if r.Username != "" && r.URL != "" {
			// Credentials do not stay on the node, whatever the pull did.
			if _, lerr := u.run(ctx, c, "podman logout "+Quote(r.URL)+" >/dev/null 2>&1 || true", nil, time.Minute); lerr != nil && err == nil {
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

// Plan lays an instance out on a node of the given flavour.
func Plan(standID string, in *manifest.RenderedInstance, u AppUser, f Flavour) Deployment {
	d := Deployment{Instance: in, Flavour: f, Unit: Units(standID, in, u.Home, f)}
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

// DeployOptions tune Deploy; zero values are seed §8's.
type DeployOptions struct {
	PortTries    int           // 30
	PortInterval time.Duration // 2 s
	// Progress, when set, hears about each step (for the operator's log).
	Progress func(msg string)
}

// Deploy does seed §8 steps 11–12 for one instance, idempotently: upload the files that differ
// from the node's (content or mode), restart the unit when any of them changed or it is not
// running, wait until it is active and every role port listens, then run the post-start hook. It
// reports whether the unit was (re)started.
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
	changed, err := upload(ctx, c, u, files)
	if err != nil {
		return false, fmt.Errorf("upload files of %s: %w", name, err)
	}
	restart := false
	for _, f := range changed {
		if d.Hook == nil || f != d.Hook.Path {
			restart = true
		}
	}
	svc := Quote(d.Unit.Service)
	if !restart {
		if _, err := u.run(ctx, c, "systemctl --user is-active -q "+svc, nil, time.Minute); err != nil {
			restart = true
		}
	}
	if restart {
		say("starting %s (%d files changed)", d.Unit.Service, len(changed))
		script := "systemctl --user daemon-reload\n"
		if d.Flavour != Quadlet {
			// Quadlet units are generated and cannot be enabled; the template's instance can.
			script += "systemctl --user enable -q " + svc + "\n"
		}
		script += "systemctl --user restart " + svc + " || { systemctl --user status --no-pager -n 30 " + svc + " >&2; exit 1; }\n"
		if _, err := u.run(ctx, c, script, nil, 15*time.Minute); err != nil {
			return false, fmt.Errorf("start %s (%s): %w", name, d.Unit.Service, err)
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
		if _, err := u.run(ctx, c, Quote(d.Hook.Path), nil, timeout); err != nil {
			return restart, fmt.Errorf("post-start hook of %s (%s): %w", name, d.Instance.PostStart.Src, err)
		}
	}
	return restart, nil
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
	if _, err := u.run(ctx, c, script, nil, timeout); err != nil {
		return fmt.Errorf("wait for %s and its ports: %w", d.Unit.Service, err)
	}
	return nil
}

// upload writes the files whose content or mode differ on the node, as the app user, each through a
// temporary file renamed into place, and returns their paths.
func upload(ctx context.Context, c *Conn, u AppUser, files []File) ([]string, error) {
	var probe strings.Builder
	for _, f := range files {
		fmt.Fprintf(&probe, "printf '%%s %%s\\n' \"$(stat -c %%a %[1]s 2>/dev/null || echo -)\" \"$(sha256sum < %[1]s 2>/dev/null | cut -d' ' -f1)\"\n", Quote(f.Path))
	}
	out, err := u.run(ctx, c, probe.String(), nil, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("read the node's files: %w", err)
	}
	have := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var changed []string
	for i, f := range files {
		sum := sha256.Sum256(f.Content)
		want := fmt.Sprintf("%o %s", f.Mode, hex.EncodeToString(sum[:]))
		if i < len(have) && have[i] == want {
			continue
		}
		tmp := f.Path + ".stands-tmp"
		script := fmt.Sprintf("set -e; umask 077; mkdir -p %s; cat > %s; chmod %o %s; mv -f %s %s",
			Quote(path.Dir(f.Path)), Quote(tmp), f.Mode, Quote(tmp), Quote(tmp), Quote(f.Path))
		if _, err := u.run(ctx, c, script, f.Content, 2*time.Minute); err != nil {
			return changed, fmt.Errorf("write %s: %w", f.Path, err)
		}
		changed = append(changed, f.Path)
	}
	return changed, nil
}

// Remove stops an instance's unit and removes its unit, Pod YAML, hook and uploaded files: what an
// instance's delete does on a server that stays.
func Remove(ctx context.Context, c *Conn, u AppUser, d Deployment) error {
	svc := Quote(d.Unit.Service)
	script := "systemctl --user disable --now -q " + svc + " 2>/dev/null || systemctl --user stop " + svc + " 2>/dev/null || true\n"
	var paths []string
	for _, f := range d.files() {
		paths = append(paths, Quote(f.Path))
	}
	script += "rm -f " + strings.Join(paths, " ") + "\n"
	// Folders the files were alone in go too, up to the app user's home (never above it).
	for _, f := range d.files() {
		script += fmt.Sprintf(`d=$(dirname %s); while [ "${d#"$HOME"/}" != "$d" ] && rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done`+"\n", Quote(f.Path))
	}
	script += "rm -rf " + Quote(path.Join(u.Home, ".config", "stands", InstanceName(d.Instance))) + "\n"
	// The drop-in folder of the template flavour.
	for _, f := range d.Unit.Files {
		if strings.HasSuffix(path.Dir(f.Path), ".service.d") {
			script += "rmdir " + Quote(path.Dir(f.Path)) + " 2>/dev/null || true\n"
		}
	}
	script += "systemctl --user daemon-reload\n"
	if _, err := u.run(ctx, c, script, nil, 5*time.Minute); err != nil {
		return fmt.Errorf("remove %s/%s: %w", d.Instance.App, d.Instance.Instance, err)
	}
	return nil
}
