package provider

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"

	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

func serverInputs(mod func(resource.PropertyMap)) resource.PropertyMap {
	m := resource.PropertyMap{
		pName: resource.NewStringProperty("o-p-e-n1"), pServerType: resource.NewStringProperty("cx22"),
		pImage: resource.NewStringProperty("debian-12"), pLocation: resource.NewStringProperty("hel1"),
		pNetwork: resource.NewStringProperty("net"), pSSHKey: resource.NewStringProperty("admin"),
		pLabels: resource.NewObjectProperty(resource.PropertyMap{
			LabelManagedBy: resource.NewStringProperty(ManagedByValue), LabelStand: resource.NewStringProperty("o_p_e"),
		}),
		pUserData: resource.MakeSecret(resource.NewStringProperty("#cloud-config\n")),
	}
	if mod != nil {
		mod(m)
	}
	return m
}

func TestServerDiff(t *testing.T) {
	cases := []struct {
		name     string
		mod      func(resource.PropertyMap)
		changes  pulumirpc.DiffResponse_DiffChanges
		replaces []string
	}{
		{"nothing", nil, pulumirpc.DiffResponse_DIFF_NONE, nil},
		{"user data is ignored after create", func(m resource.PropertyMap) {
			m[pUserData] = resource.MakeSecret(resource.NewStringProperty("#cloud-config\npackages: [x]\n"))
		}, pulumirpc.DiffResponse_DIFF_NONE, nil},
		{"server type resizes in place", func(m resource.PropertyMap) { m[pServerType] = resource.NewStringProperty("cx32") }, pulumirpc.DiffResponse_DIFF_SOME, nil},
		{"image replaces", func(m resource.PropertyMap) { m[pImage] = resource.NewStringProperty("ubuntu-24.04") }, pulumirpc.DiffResponse_DIFF_SOME, []string{pImage}},
		{"network replaces", func(m resource.PropertyMap) { m[pNetwork] = resource.NewStringProperty("other") }, pulumirpc.DiffResponse_DIFF_SOME, []string{pNetwork}},
		{"labels update in place", func(m resource.PropertyMap) {
			l := m[pLabels].ObjectValue().Copy()
			l["extra"] = resource.NewStringProperty("x")
			m[pLabels] = resource.NewObjectProperty(l)
		}, pulumirpc.DiffResponse_DIFF_SOME, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := serverResource{}.diff(context.Background(), "1", serverInputs(nil), serverInputs(c.mod))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Changes != c.changes || len(resp.Replaces) != len(c.replaces) || (len(c.replaces) > 0 && resp.Replaces[0] != c.replaces[0]) {
				t.Errorf("changes %v replaces %v, want %v %v", resp.Changes, resp.Replaces, c.changes, c.replaces)
			}
			if len(resp.Replaces) > 0 && !resp.DeleteBeforeReplace {
				t.Error("a replacement must delete first: server names are unique")
			}
		})
	}
}

func TestServerCheck(t *testing.T) {
	in := serverInputs(func(m resource.PropertyMap) {
		delete(m, pImage)
		m[pLabels] = resource.NewObjectProperty(resource.PropertyMap{})
		m[pUserData] = resource.NewStringProperty("#cloud-config\n")
	})
	out, failures := serverResource{}.check(context.Background(), in)
	if len(failures) != 2 {
		t.Errorf("failures %v, want image and labels", failures)
	}
	if !out[pUserData].IsSecret() {
		t.Error("user data not made secret")
	}
}

// TestServerArgsRoundTrip: what a program declares from ServerArgs.Inputs is what the provider
// reads back, field for field: the property names live in one place.
func TestServerArgsRoundTrip(t *testing.T) {
	args := ServerArgs{Name: "o-p-e-web", ServerType: "cx22", Image: "debian-12", Location: "fsn1", Network: "net",
		SSHKeyName: "admin", Labels: map[string]string{LabelStand: "o_p_e", "stands.dev/node": "web"}, UserData: "#cloud-config\n"}
	if got := decodeServerArgs(properties(args)); !reflect.DeepEqual(got, args) {
		t.Errorf("read back %+v, declared %+v", got, args)
	}
	if n := len(args.Inputs()); n != reflect.TypeOf(args).NumField() {
		t.Errorf("Inputs has %d properties for %d fields", n, reflect.TypeOf(args).NumField())
	}
}

// properties are the args as the engine hands them to the provider: Inputs, the secret ones secret.
func properties(args ServerArgs) resource.PropertyMap {
	m := resource.PropertyMap{}
	for k, v := range args.Inputs() {
		if labels, ok := v.(map[string]string); ok {
			obj := resource.PropertyMap{}
			for lk, lv := range labels {
				obj[resource.PropertyKey(lk)] = resource.NewStringProperty(lv)
			}
			m[resource.PropertyKey(k)] = resource.NewObjectProperty(obj)
			continue
		}
		m[resource.PropertyKey(k)] = resource.NewStringProperty(v.(string))
	}
	for _, secret := range SecretServerInputs {
		m[resource.PropertyKey(secret)] = resource.MakeSecret(m[resource.PropertyKey(secret)])
	}
	return m
}

// lateCreate is a cloud where a dead run's create of the same server lands between the provider's
// look-up and its own create, as Hetzner finishing a request whose caller had gone: the first
// CreateServer makes the server first, as that run would, then asks again. labels are that run's.
type lateCreate struct {
	cloud.Cloud
	labels map[string]string
	once   sync.Once
}

func (l *lateCreate) CreateServer(ctx context.Context, o cloud.CreateOptions) (*cloud.Server, error) {
	l.once.Do(func() {
		late := o
		late.Labels = l.labels
		if _, err := l.Cloud.CreateServer(ctx, late); err != nil {
			panic(err)
		}
	})
	return l.Cloud.CreateServer(ctx, o)
}

// TestCreateReclaimsALateServer: a server of the stand's name that appears between the look-up and
// the create (the cloud refuses the name) is the stand's, reclaimed when it carries the stand's
// labels; one that does not is refused as not ours, and nothing else is created.
func TestCreateReclaimsALateServer(t *testing.T) {
	ours := map[string]string{LabelManagedBy: ManagedByValue, LabelStand: "o_p_e", "stands.dev/node": "web"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   error
	}{
		{"ours", ours, nil},
		{"someone else's", map[string]string{"team": "other"}, ErrNotOurs},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := testenv.StartHetzner(t, "late-token")
			p := New()
			hc, err := Clouds(nil).Open(DefaultCloud, h.Token, h.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			p.client = &lateCreate{Cloud: hc, labels: c.labels}
			args := ServerArgs{Name: "o-p-e-web", ServerType: "cx22", Image: "debian-12", Location: "fsn1", Network: "stands-net",
				SSHKeyName: "stands-admin", Labels: ours, UserData: "#cloud-config\n"}
			in := properties(args)
			id, state, err := serverResource{}.create(context.Background(), call{p: p}, in, false)
			if !errors.Is(err, c.want) {
				t.Fatalf("create: id %q, %v; want %v", id, err, c.want)
			}
			servers := h.Servers(t)
			if len(servers) != 1 {
				t.Fatalf("%d servers, want the late one alone", len(servers))
			}
			if c.want == nil && (id != strconv.FormatInt(servers["o-p-e-web"].ID, 10) || state[pPrivateIP].StringValue() == "") {
				t.Errorf("reclaimed id %q (the server is %d), state %v", id, servers["o-p-e-web"].ID, state)
			}
		})
	}
}
