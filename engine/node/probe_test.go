package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
)

func probeDeployment() Deployment {
	in := &manifest.RenderedInstance{App: "web", Instance: "front", Node: "web",
		Pod:       []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: front\n"),
		Ports:     []manifest.Port{{Number: 8080, Proto: "tcp"}, {Number: 5353, Proto: "udp"}},
		Files:     []manifest.RenderedFile{{Dest: "/home/app/stands/front/web.env", Mode: 0o640, Content: []byte("GREETING=hi\n")}},
		PostStart: &manifest.RenderedFile{Src: "hooks/healthz.sh", Content: []byte("#!/bin/sh\n")}, PostStartHook: &manifest.Hook{Probe: true, Timeout: 30 * time.Second}}
	return Layout("demo_demo_two-node", in, AppUser{Name: "app", UID: 1001, Home: "/home/app"}, KubeTemplate, "0123456789abcdef")
}

// facts is what a healthy node prints for probeDeployment, with changes applied.
func facts(d Deployment, edit func(map[string]string)) string {
	f := map[string]string{
		"unit":   "LoadState=loaded\nActiveState=active\nSubState=running\nNRestarts=2\nEnvironment=STANDS_CONFIG_HASH=0123456789abcdef PODMAN_SYSTEMD_UNIT=x\n",
		"pod":    "pod up front\nlisten tcp 0.0.0.0:8080\nlisten udp *:5353\nlisten tcp 127.0.0.1:9000\n",
		"hook":   "hook 0\n",
		"files":  "",
		"header": "@@ 0\n",
	}
	for i, file := range d.files() {
		sum := sha256.Sum256(file.Content)
		f["files"] += fmt.Sprintf("file %d %o %s\n", i, file.Mode, hex.EncodeToString(sum[:]))
	}
	if edit != nil {
		edit(f)
	}
	return f["header"] + f["unit"] + f["pod"] + f["hook"] + f["files"]
}

func TestJudge(t *testing.T) {
	d := probeDeployment()
	all := ProbeOptions{Files: true, Hooks: true}
	for _, c := range []struct {
		name  string
		edit  func(map[string]string)
		want  []string
		state string
	}{
		{"healthy", nil, nil, "active"},
		{"stopped by hand", func(f map[string]string) {
			f["unit"] = "LoadState=loaded\nActiveState=inactive\nSubState=dead\nNRestarts=0\nEnvironment=STANDS_CONFIG_HASH=0123456789abcdef\n"
			f["pod"], f["hook"] = "", ""
		}, []string{"unit inactive"}, "inactive/dead"},
		{"crash-looping", func(f map[string]string) {
			f["unit"] = "LoadState=loaded\nActiveState=activating\nSubState=auto-restart\nNRestarts=7\n"
			f["pod"], f["hook"] = "", ""
		}, []string{"unit restarting after a failure"}, "activating/auto-restart"},
		{"unit removed", func(f map[string]string) {
			f["unit"] = "LoadState=not-found\nActiveState=inactive\nSubState=dead\n"
			f["pod"], f["hook"] = "", ""
		}, []string{"unit missing"}, "inactive/dead"},
		{"another configuration", func(f map[string]string) {
			f["unit"] = strings.Replace(f["unit"], "0123456789abcdef", "fedcba9876543210", 1)
		}, []string{"unit runs another configuration"}, "active"},
		{"the app died, the forwarder listens", func(f map[string]string) {
			f["pod"] = "pod up front\nlisten udp 0.0.0.0:5353\n"
		}, []string{"port 8080/tcp not listening in the pod"}, "active"},
		{"the pod is gone", func(f map[string]string) { f["pod"] = "pod down front\n" }, []string{"pod front not running"}, "active"},
		{"the app does not answer its probe", func(f map[string]string) { f["hook"] = "hook 124\n" }, []string{"post-start probe failed (exit 124)"}, "active"},
		{"a file changed by hand", func(f map[string]string) {
			f["files"] = strings.Replace(f["files"], "file 0 640 ", "file 0 640 00", 1)
		}, []string{"file /home/app/stands/front/web.env differs"}, "active"},
		{"a file removed", func(f map[string]string) {
			f["files"] = strings.Replace(f["files"], "file 0 640 ", "file 0 - x", 1)
		}, []string{"file /home/app/stands/front/web.env missing"}, "active"},
		{"a file's mode changed", func(f map[string]string) {
			f["files"] = strings.Replace(f["files"], "file 0 640 ", "file 0 644 ", 1)
		}, []string{"file /home/app/stands/front/web.env differs"}, "active"},
		{"no answer at all", func(f map[string]string) {
			f["header"], f["unit"], f["pod"], f["hook"], f["files"] = "", "", "", "", ""
		},
			[]string{"unit missing", "file /home/app/stands/front/web.env missing"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := parseProbe(facts(d, c.edit), []Deployment{d}, all)
			h := hs[0]
			if h.Instance != "web--front" || h.Unit != d.Unit.Service || h.State != c.state {
				t.Errorf("instance %q unit %q state %q", h.Instance, h.Unit, h.State)
			}
			// Only the files this case changed: the unit's own files are in the facts as deployed.
			var got []string
			for _, p := range h.Problems {
				if !strings.HasPrefix(p, "file /home/app/.config") {
					got = append(got, p)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("problems %q, want %q", h.Problems, c.want)
			}
			if h.Healthy() != (len(c.want) == 0) {
				t.Errorf("healthy %v with problems %q", h.Healthy(), h.Problems)
			}
		})
	}
	if h := parseProbe(facts(d, nil), []Deployment{d}, all)[0]; h.Restarts != 2 {
		t.Errorf("restarts %d, want 2", h.Restarts)
	}
}

// TestProbeScriptIsShell: the script the node runs parses as POSIX shell (dash, Debian's sh), asks
// for the pod by the name its YAML gives, runs only hooks declared probes, and prints no hook output.
func TestProbeScriptIsShell(t *testing.T) {
	d := probeDeployment()
	other := probeDeployment()
	other.Instance.PostStartHook = &manifest.Hook{}
	script, timeout := probeScript([]Deployment{d, other}, ProbeOptions{Files: true, Hooks: true})
	sh, err := exec.LookPath("dash")
	if err != nil {
		sh = "sh"
	}
	if out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%s -n: %v\n%s\n%s", sh, err, out, script)
	}
	if !strings.Contains(script, "podman pod inspect -f '{{.InfraContainerID}}' -- 'front'") {
		t.Errorf("the pod is not asked for by its name:\n%s", script)
	}
	if n := strings.Count(script, "echo \"hook $?\""); n != 1 {
		t.Errorf("%d hooks run as probes, want 1 (the other is not declared one)", n)
	}
	if !strings.Contains(script, ">/dev/null 2>&1; echo \"hook $?\"") {
		t.Errorf("a hook's output is not dropped:\n%s", script)
	}
	if timeout != time.Minute+30*time.Second {
		t.Errorf("timeout %v, want a minute plus the probe hook's 30s", timeout)
	}
	if s, _ := probeScript([]Deployment{d}, ProbeOptions{}); strings.Contains(s, "hook") || strings.Contains(s, "sha256sum") {
		t.Errorf("a health check without options runs hooks or reads files:\n%s", s)
	}
}

func TestPodNames(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want []string
	}{
		{"kind: Pod\nmetadata:\n  name: front\n", []string{"front"}},
		{"kind: Deployment\nmetadata:\n  name: x\n---\nkind: Pod\nmetadata:\n  name: b\n---\nkind: Pod\nmetadata:\n  name: a\n", []string{"a", "b"}},
		{"kind: ConfigMap\nmetadata:\n  name: c\n", nil},
		{"{{ not yaml", nil},
	} {
		if got := PodNames([]byte(c.yaml)); !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.yaml, got, c.want)
		}
	}
}
