package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// Quote makes s one word for the remote POSIX shell.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// AsApp wraps a shell script to run as the app user with its user systemd and Podman reachable:
// sudo alone gives neither XDG_RUNTIME_DIR nor the session bus.
func AsApp(user string, uid int, script string) string {
	return fmt.Sprintf("sudo -u %s -H env XDG_RUNTIME_DIR=/run/user/%d DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/%d/bus sh -c %s",
		Quote(user), uid, uid, Quote("cd ~ && "+script))
}

// Prepared is what node setup learnt about the node.
type Prepared struct {
	AppUID        int
	AppHome       string
	PodmanVersion string
	Flavour       Flavour
}

// Prepare does the node's part of step 9 of docs/stands-engine.md#create, each step idempotent: wait for cloud-init, enable
// linger for the app user and wait for its user systemd, the user Podman socket, the app-net network,
// and the role ports in firewalld.
func Prepare(ctx context.Context, c *Conn, appUser string, ports []manifest.Port) (*Prepared, error) {
	out, err := c.Run(ctx, "cloud-init status --wait >/dev/null 2>&1; cloud-init status", nil, 20*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("wait for cloud-init: %w", err)
	}
	if !strings.Contains(out, "status: done") {
		return nil, fmt.Errorf("cloud-init did not finish cleanly: %s", strings.TrimSpace(out))
	}
	out, err = c.Run(ctx, "id -u "+Quote(appUser), nil, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("app user %s: %w", appUser, err)
	}
	uid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return nil, fmt.Errorf("app user %s: uid %q", appUser, out)
	}
	p := &Prepared{AppUID: uid}
	out, err = c.Run(ctx, "getent passwd "+Quote(appUser)+" | cut -d: -f6", nil, time.Minute)
	if p.AppHome = strings.TrimSpace(out); err != nil {
		return nil, fmt.Errorf("home of app user %s: %w", appUser, err)
	}
	if !strings.HasPrefix(p.AppHome, "/") {
		return nil, fmt.Errorf("app user %s has no home folder (getent says %q)", appUser, p.AppHome)
	}
	// user@UID stays "activating" for a while after enable-linger, longer under emulation.
	linger := fmt.Sprintf(`sudo loginctl enable-linger %s
for i in $(seq 300); do systemctl is-active -q user@%d.service && exit 0; sleep 1; done
systemctl status --no-pager user@%d.service >&2; exit 1`, Quote(appUser), uid, uid)
	if _, err := c.Run(ctx, linger, nil, 6*time.Minute); err != nil {
		return nil, fmt.Errorf("user systemd for %s: %w", appUser, err)
	}
	steps := []struct{ what, script string }{
		{"user Podman socket", "systemctl --user enable --now podman.socket"},
		{"network " + Network, "podman network exists " + Network + " || podman network create " + Network},
	}
	for _, s := range steps {
		if _, err := c.Run(ctx, AsApp(appUser, uid, s.script), nil, 5*time.Minute); err != nil {
			return nil, fmt.Errorf("%s: %w", s.what, err)
		}
	}
	if err := firewall(ctx, c, "add", ports); err != nil {
		return nil, fmt.Errorf("open role ports: %w", err)
	}
	out, err = c.Run(ctx, AsApp(appUser, uid, "podman version --format '{{.Client.Version}}'"), nil, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("podman version: %w", err)
	}
	p.PodmanVersion = strings.TrimSpace(out)
	if p.Flavour, err = FlavourFor(p.PodmanVersion); err != nil {
		return nil, err
	}
	return p, nil
}

// ClosePorts closes role ports no instance of the node serves any more.
func ClosePorts(ctx context.Context, c *Conn, ports []manifest.Port) error {
	if err := firewall(ctx, c, "remove", ports); err != nil {
		return fmt.Errorf("close role ports: %w", err)
	}
	return nil
}

// firewall adds or removes ports, each in its zone (default public), permanently and at once.
func firewall(ctx context.Context, c *Conn, op string, ports []manifest.Port) error {
	if len(ports) == 0 {
		return nil
	}
	var fw strings.Builder
	fw.WriteString("set -e\nsudo firewall-cmd --state >/dev/null\n")
	for _, pt := range ports {
		zone := pt.Zone
		if zone == "" {
			zone = "public"
		}
		fmt.Fprintf(&fw, "sudo firewall-cmd --permanent --zone=%s --%s-port=%s >/dev/null\n", Quote(zone), op, Quote(pt.String()))
	}
	fw.WriteString("sudo firewall-cmd --reload >/dev/null\n")
	_, err := c.Run(ctx, fw.String(), nil, 5*time.Minute)
	return err
}
