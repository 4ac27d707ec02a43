package manifest

import (
	"fmt"
	"strings"
)

// Limits of the names a stand's names become. validate checks them so that an apply does not fail
// on a server, in systemd or in Podman half-way through a stand.
const (
	maxLabelValue = 63  // Hetzner label values: the stand id is the stands.dev/stand label
	maxUnitName   = 255 // systemd unit names, and file names (NAME_MAX)
	maxHostname   = 63  // a Pod's name is its hostname (a DNS label)
	maxPath       = 4096
)

// StandID is a stand's id, <owner>_<project>_<env>: its stack in the backend, the stands.dev/stand
// label of its servers, its status file and its lease. No part holds "_" (validate checks each
// against [a-z0-9-]+), so the id splits back into its parts (ParseStandID).
func StandID(owner, project, env string) string { return owner + "_" + project + "_" + env }

// ParseStandID splits a stand id into owner, project and env; ok is false when id is not three
// non-empty parts.
func ParseStandID(id string) (owner, project, env string, ok bool) {
	parts := strings.Split(id, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// InstanceUnitName is the user systemd service of an instance with Quadlet: stands-<app>--<instance>.
func InstanceUnitName(app, instance string) string {
	return "stands-" + app + "--" + instance + ".service"
}

// PodYAMLPath is where an instance's Pod YAML lives on its node, in the app user's home.
func PodYAMLPath(home, app, instance string) string {
	return home + "/.config/stands/" + app + "--" + instance + "/pod.yaml"
}

// TemplateUnitName is the podman-kube@ service of an instance without Quadlet (Podman before 4.4).
func TemplateUnitName(podYAML string) string {
	return "podman-kube@" + SystemdEscape(podYAML) + ".service"
}

// SystemdEscape escapes a string for a unit name as systemd-escape does: "/" becomes "-", and every
// byte but ASCII letters, digits, ":", "_" and a non-leading "." becomes \xNN.
func SystemdEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			b.WriteByte('-')
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == ':', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}

// checkNameLengths reports every name of the stand that a server, systemd or Podman would refuse
// for its length. The app user's home is taken as /home/<stand.users.app>, as cloud-init makes it.
func (d *decoder) checkNameLengths(s *Stand, envPos Pos) {
	if s.Owner != "" && s.Project != "" && s.Env != "" && len(s.ID) > maxLabelValue {
		d.rep.addf(envPos, RuleNameLength, "stand id %s is %d characters; Hetzner takes at most %d in the label that marks its servers: shorten owner, project or env",
			s.ID, len(s.ID), maxLabelValue)
	}
	if s.Users.App == "" {
		return
	}
	home := "/home/" + s.Users.App
	for _, a := range s.Apps {
		for _, in := range a.Instances {
			quadlet := InstanceUnitName(a.Name, in.Name)
			template := TemplateUnitName(PodYAMLPath(home, a.Name, in.Name))
			if n := max(len(quadlet), len(template)); n > maxUnitName {
				d.rep.addf(in.Pos, RuleNameLength, "instance %s/%s: its systemd unit name would be %d characters (at most %d): shorten the app or instance name",
					a.Name, in.Name, n, maxUnitName)
			}
		}
	}
}
