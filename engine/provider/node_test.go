package provider

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"

	"github.com/stands-engine/stands-reconciler/manifest"
)

func instanceInputs(mod func(resource.PropertyMap)) resource.PropertyMap {
	spec, _ := json.Marshal(InstanceSpec{Pod: []byte("kind: Pod\n"), Images: []string{"r/x:1"}})
	m := resource.PropertyMap{
		pHost: resource.NewStringProperty("192.0.2.1"), pUser: resource.NewStringProperty("admin"),
		pPrivateKey: resource.MakeSecret(resource.NewStringProperty("KEY")), pHostKey: resource.NewStringProperty("ssh-ed25519 AAAA"),
		pAppUser: resource.NewStringProperty("app"), pAppUID: resource.NewNumberProperty(1001), pAppHome: resource.NewStringProperty("/home/app"),
		pFlavour: resource.NewStringProperty("podman-kube@"), pServerName: resource.NewStringProperty("o-p-e-n1"),
		pStandID: resource.NewStringProperty("o_p_e"), pApp: resource.NewStringProperty("web"), pInstance: resource.NewStringProperty("front"),
		pNode: resource.NewStringProperty("n1"), pConfigHash: resource.NewStringProperty("aaaa"),
		pSpec: resource.MakeSecret(resource.NewStringProperty(string(spec))),
	}
	if mod != nil {
		mod(m)
	}
	return m
}

// TestInstanceDiff: what a plan shows for an instance. Only a move to another node replaces it;
// a changed configuration or a new server (host, host key) is an update, which redeploys it.
func TestInstanceDiff(t *testing.T) {
	cases := []struct {
		name     string
		mod      func(resource.PropertyMap)
		diffs    []string
		replaces []string
	}{
		{"nothing", nil, nil, nil},
		{"configuration", func(m resource.PropertyMap) {
			m[pConfigHash] = resource.NewStringProperty("bbbb")
			m[pSpec] = resource.MakeSecret(resource.NewStringProperty(`{"pod":"eA=="}`))
		}, []string{pConfigHash, pSpec}, nil},
		{"a new server", func(m resource.PropertyMap) {
			m[pHost] = resource.MakeComputed(resource.NewStringProperty(""))
		}, []string{pHost}, nil},
		{"another node", func(m resource.PropertyMap) { m[pNode] = resource.NewStringProperty("n2") }, []string{pNode}, []string{pNode}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := instanceResource{}.diff(context.Background(), "id", instanceInputs(nil), instanceInputs(c.mod))
			if err != nil {
				t.Fatal(err)
			}
			want := pulumirpc.DiffResponse_DIFF_NONE
			if len(c.diffs) > 0 {
				want = pulumirpc.DiffResponse_DIFF_SOME
			}
			if resp.Changes != want || !reflect.DeepEqual(resp.Diffs, c.diffs) || !reflect.DeepEqual(resp.Replaces, c.replaces) {
				t.Errorf("changes %v diffs %v replaces %v; want %v %v %v", resp.Changes, resp.Diffs, resp.Replaces, want, c.diffs, c.replaces)
			}
		})
	}
}

// TestInstanceCheckKeepsSecrets: the spec and the key stay secret whatever the program sent, and a
// missing input is a check failure naming it.
func TestInstanceCheckKeepsSecrets(t *testing.T) {
	in := instanceInputs(func(m resource.PropertyMap) {
		m[pSpec] = resource.NewStringProperty("{}")
		delete(m, pHostKey)
	})
	out, failures := instanceResource{}.check(context.Background(), in)
	if !out[pSpec].IsSecret() || !out[pPrivateKey].IsSecret() {
		t.Error("spec or key not secret after check")
	}
	if len(failures) != 1 || failures[0].Property != pHostKey {
		t.Errorf("failures: %v", failures)
	}
}

// TestInstanceDeleteWithoutSSH: a whole-stand destroy, servers-only mode and a server that goes away
// forget the instance without connecting — the host here answers nothing, so a connection attempt
// would fail the delete.
func TestInstanceDeleteWithoutSSH(t *testing.T) {
	st := instanceInputs(func(m resource.PropertyMap) { m[pHost] = resource.NewStringProperty("127.0.0.1") })
	cases := []struct{ name, noSSH, keep string }{
		{"destroy", "1", "o-p-e-n1"},
		{"server goes away", "", "o-p-e-n2"},
		{"no servers stay", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvNoSSH, c.noSSH)
			t.Setenv(EnvKeepServers, c.keep)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := (instanceResource{}).delete(ctx, call{p: New()}, "id", st); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
	}
	// The control: a server that stays is connected to (and here fails, quickly, on the bad key).
	t.Setenv(EnvNoSSH, "")
	t.Setenv(EnvKeepServers, "o-p-e-n1")
	if err := (instanceResource{}).delete(context.Background(), call{p: New()}, "id", st); err == nil {
		t.Error("delete on a server that stays did not try to connect")
	}
}

func TestSpecRoundTrip(t *testing.T) {
	in := &manifest.RenderedInstance{App: "kv", Instance: "cache", Node: "db", Pod: []byte("kind: Pod\n"), Images: []string{"r/kv:1"},
		Ports:     []manifest.Port{{Number: 6379, Proto: "tcp", Role: "server", Zone: "internal"}},
		Files:     []manifest.RenderedFile{{Src: "a.tmpl", Dest: "/home/app/a", Mode: 0o640, Content: []byte("x")}},
		PostStart: &manifest.RenderedFile{Src: "hooks/h.sh.tmpl", Mode: 0o700, Content: []byte("#!/bin/sh\n")}, PostStartHook: &manifest.Hook{Src: "hooks/h.sh.tmpl", Timeout: time.Minute}}
	b, err := json.Marshal(SpecOf(in))
	if err != nil {
		t.Fatal(err)
	}
	var back InstanceSpec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got := back.rendered("kv", "cache", "db")
	if !reflect.DeepEqual(got, in) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", got, in)
	}
	ports, err := parsePorts([]string{PortSpec(in.Ports[0]), PortSpec(manifest.Port{Number: 53, Proto: "udp"})})
	if err != nil || ports[0] != (manifest.Port{Number: 6379, Proto: "tcp", Zone: "internal"}) || ports[1] != (manifest.Port{Number: 53, Proto: "udp", Zone: "public"}) {
		t.Errorf("ports: %+v %v", ports, err)
	}
}
