// Package node holds what the engine does on a stand's servers. This file: the user systemd unit of
// an app instance, in the flavour the node's Podman supports — a Quadlet `.kube` file from Podman 4.4
// on, else the `podman-kube@.service` template that Podman 4.3 (Debian 12) ships, with a drop-in. The
// unit's text carries a hash of everything the instance runs with, so a changed configuration
// changes the unit, and the deploy restarts it (docs/stands-engine.md#create: a changed configuration must restart the workload).
package node

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// Flavour is how an instance runs under user systemd.
type Flavour string

// Flavours.
const (
	Quadlet      Flavour = "quadlet"      // ~/.config/containers/systemd/<name>.kube; Podman ≥ 4.4
	KubeTemplate Flavour = "podman-kube@" // podman-kube@<escaped yaml path>.service + a drop-in
)

// FlavourFor picks the flavour for a Podman version as `podman version --format {{.Client.Version}}`
// prints it, e.g. "4.3.1" or "5.2.0-dev".
func FlavourFor(version string) (Flavour, error) {
	parts := strings.SplitN(strings.TrimSpace(version), ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("podman version %q: want MAJOR.MINOR", version)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
	if err1 != nil || err2 != nil {
		return "", fmt.Errorf("podman version %q: want MAJOR.MINOR", version)
	}
	if major > 4 || major == 4 && minor >= 4 {
		return Quadlet, nil
	}
	return KubeTemplate, nil
}

// Network is the Podman network every instance joins (step 9 of docs/stands-engine.md#create).
const Network = "app-net"

// File is a file the unit needs, written as the app user.
type File struct {
	Path    string // absolute
	Mode    uint32
	Content []byte
}

// Unit is one instance's service.
type Unit struct {
	Service    string // the systemd unit to start, enable and wait for
	Files      []File // the Pod YAML and the unit (or drop-in), in writing order
	ConfigHash string // of the rendered configuration
}

// InstanceName is an instance's name on the node: <app>--<instance>.
func InstanceName(in *manifest.RenderedInstance) string { return in.App + "--" + in.Instance }

// ConfigHash covers everything an instance runs with: its Pod YAML, the uploaded files (destination,
// mode and content) and its images. Files are taken in destination order, so the hash does not
// depend on how the manifest lists them. It is keyed (HMAC-SHA-256): the content holds secrets and
// the hash sits in plain text in the stack's state and in the unit, so without the key a guessed
// secret cannot be checked against it.
func ConfigHash(key []byte, in *manifest.RenderedInstance) string {
	h := hmac.New(sha256.New, key)
	field := func(b []byte) { fmt.Fprintf(h, "%d:", len(b)); h.Write(b) }
	field(in.Pod)
	files := append([]manifest.RenderedFile(nil), in.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Dest < files[j].Dest })
	for _, f := range files {
		field([]byte(f.Dest))
		field([]byte(strconv.FormatUint(uint64(f.Mode.Perm()), 8)))
		field(f.Content)
	}
	for _, img := range in.Images {
		field([]byte(img))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Units returns the instance's service for a stand on a node whose app user's home is home; hash is
// its ConfigHash.
func Units(standID string, in *manifest.RenderedInstance, home string, f Flavour, hash string) Unit {
	// The names validate checked the lengths of (manifest.InstanceUnitName, TemplateUnitName).
	name := strings.TrimSuffix(manifest.InstanceUnitName(in.App, in.Instance), ".service")
	yaml := manifest.PodYAMLPath(strings.TrimSuffix(home, "/"), in.App, in.Instance)
	header := fmt.Sprintf("# Managed by stands-reconciler for stand %s, instance %s/%s. Do not edit: the next apply replaces it.\n", standID, in.App, in.Instance)
	u := Unit{ConfigHash: hash, Files: []File{{Path: yaml, Mode: 0o600, Content: in.Pod}}}
	switch f {
	case Quadlet:
		u.Service = name + ".service"
		u.Files = append(u.Files, File{Path: path.Join(home, ".config", "containers", "systemd", name+".kube"), Mode: 0o644, Content: []byte(header + fmt.Sprintf(`[Unit]
Description=stands %[1]s: %[2]s/%[3]s
Wants=network-online.target
After=network-online.target

[Kube]
Yaml=%[4]s
Network=%[5]s

[Service]
# A new hash is a new unit text: the apply restarts the service.
Environment=STANDS_CONFIG_HASH=%[6]s
TimeoutStartSec=600
Restart=on-failure

[Install]
WantedBy=default.target
`, standID, in.App, in.Instance, yaml, Network, hash))})
	default:
		u.Service = manifest.TemplateUnitName(yaml)
		u.Files = append(u.Files, File{Path: path.Join(home, ".config", "systemd", "user", u.Service+".d", "50-stands.conf"), Mode: 0o644,
			Content: []byte(header + fmt.Sprintf(`[Unit]
Description=stands %[1]s: %[2]s/%[3]s

[Service]
# A new hash is a new unit text: the apply restarts the service.
Environment=STANDS_CONFIG_HASH=%[4]s
TimeoutStartSec=600
Restart=on-failure
# The template's own command, joined to the stand's network.
ExecStart=
ExecStart=/usr/bin/podman kube play --replace --service-container=true --network %[5]s %%I
`, standID, in.App, in.Instance, hash, Network))})
	}
	return u
}

// Escape escapes a string for a unit name as systemd-escape does (manifest.SystemdEscape: validate
// checks unit name lengths with the same function).
var Escape = manifest.SystemdEscape
