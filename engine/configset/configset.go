// Package configset writes a stand's rendered files to disk for diagnosis (docs/stands-engine.md#configsets): what was, or
// would be, sent to each node. Configsets hold secret values in clear, so folders are 0700 and files
// 0600 whatever mode the file gets on the node.
package configset

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/stands-engine/stands-reconciler/manifest"
)

const (
	dirMode  = 0o700
	fileMode = 0o600
)

// Write replaces <root>/<stand-id>/ with the rendered stand:
//
//	nodes/<node>/<cloud-init template name without .tmpl>
//	<app>--<instance>/deploy.json          images, ports, uploads (destination and mode), hook timeout
//	<app>--<instance>/<pod and connection template names without .tmpl>
//	<app>--<instance>/files/<destination on the node>
//	<app>--<instance>/hook/<hook name without .tmpl>
//
// It returns the stand's folder.
func Write(root string, r *manifest.Rendered) (string, error) {
	dir := filepath.Join(root, r.Stand.ID)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("clear configset %s: %w", dir, err)
	}
	w := writer{}
	for _, n := range r.Nodes {
		if n.CloudInit != nil {
			w.file(filepath.Join(dir, "nodes", n.Name, outName(n.Profile.CloudInit)), n.CloudInit)
		}
	}
	for _, in := range r.Instances {
		idir := filepath.Join(dir, in.App+"--"+in.Instance)
		deploy := deployInfo{Node: in.Node, Images: in.Images, ConnectionName: in.ConnectionName}
		for _, p := range in.Ports {
			deploy.Ports = append(deploy.Ports, portInfo{Port: p.Number, Protocol: p.Proto, Role: p.Role, Zone: p.Zone})
		}
		for _, f := range in.Files {
			deploy.Files = append(deploy.Files, fileInfo{Src: f.Src, Dest: f.Dest, Mode: fmt.Sprintf("%04o", f.Mode.Perm())})
			w.file(filepath.Join(idir, "files", filepath.FromSlash(strings.TrimPrefix(path.Clean(f.Dest), "/"))), f.Content)
		}
		if in.Pod != nil {
			w.file(filepath.Join(idir, outName(podName(in))), in.Pod)
		}
		if in.Connection != nil {
			w.file(filepath.Join(idir, "connection.json"), in.Connection)
		}
		if in.PostStart != nil {
			w.file(filepath.Join(idir, "hook", outName(in.PostStart.Src)), in.PostStart.Content)
			deploy.HookTimeout = in.PostStartHook.Timeout.String()
		}
		b, err := json.MarshalIndent(deploy, "", "  ")
		if err != nil {
			return "", fmt.Errorf("encode deploy info: %w", err)
		}
		w.file(filepath.Join(idir, "deploy.json"), append(b, '\n'))
	}
	if w.err != nil {
		return "", w.err
	}
	return dir, nil
}

type deployInfo struct {
	Node           string     `json:"node"`
	ConnectionName string     `json:"connectionName"`
	Images         []string   `json:"images"`
	Ports          []portInfo `json:"ports,omitempty"`
	Files          []fileInfo `json:"files,omitempty"`
	HookTimeout    string     `json:"hookTimeout,omitempty"`
}

type portInfo struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Role     string `json:"role"`
	Zone     string `json:"zone"`
}

type fileInfo struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
	Mode string `json:"mode"`
}

func podName(in *manifest.RenderedInstance) string { return in.PodSrc() }

// outName is a template's file name with the .tmpl suffix dropped.
func outName(p string) string {
	return strings.TrimSuffix(path.Base(p), ".tmpl")
}

type writer struct{ err error }

func (w *writer) file(p string, data []byte) {
	if w.err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), dirMode); err != nil {
		w.err = fmt.Errorf("create folder for %s: %w", p, err)
		return
	}
	if err := os.WriteFile(p, data, fileMode); err != nil {
		w.err = fmt.Errorf("write %s: %w", p, err)
	}
}
