package engine

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/engine/node"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// TestPullsFor: a node pulls the images of the instances placed on it, grouped by their app's
// registry, with the registry's resolved credentials and its insecure flag.
func TestPullsFor(t *testing.T) {
	s := load(t, examples(t, ""), "stands/two-node/stand.yml")
	s.Stand.Registries[0].Insecure = true
	r, err := manifest.Render(s.FS, s.Stand, s.Secrets, manifest.PreflightAddresses(s.Stand))
	if err != nil {
		t.Fatal(err)
	}
	for nodeName, image := range map[string]string{"db": "registry.example.test/stands/kv:7.2", "web": "registry.example.test/stands/web:1.4"} {
		got, err := pullsFor(r, nodeName, s.Secrets)
		if err != nil {
			t.Fatal(err)
		}
		want := []node.Registry{{URL: "registry.example.test", Username: "robot", Password: exampleSecrets["SECRET_REGISTRY_PASSWORD"], Insecure: true, Images: []string{image}}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", nodeName, got, want)
		}
	}
	if got, err := pullsFor(r, "nowhere", s.Secrets); err != nil || len(got) != 0 {
		t.Errorf("a node without instances pulls %+v %v", got, err)
	}
}

// TestStandLogScrubs: what reaches the engine's log from a node (a hook's stderr in a Pulumi
// diagnostic, an error) loses the stand's secret values; the rest stays.
func TestStandLogScrubs(t *testing.T) {
	s := load(t, examples(t, ""), "stands/two-node/stand.yml")
	secret := exampleSecrets["SECRET_KV_PASSWORD"]
	var buf syncBuffer
	e := &Engine{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	log := e.standLog(s, "operation", "apply "+secret)
	log.With("node", "db "+secret).WithGroup("g").Warn("pulumi error: "+secret, "message", "hook said "+secret, "err", errors.New("ssh: "+secret), "n", 3, "list", []string{secret})
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Errorf("a secret is in the log: %s", out)
	}
	for _, want := range []string{`"msg":"pulumi error: ***"`, `"message":"hook said ***"`, `"err":"ssh: ***"`, `"node":"db ***"`, `"operation":"apply ***"`, `"stand":"demo_demo_two-node"`, `"n":3`, `"list":"[***]"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s: %s", want, out)
		}
	}
}
