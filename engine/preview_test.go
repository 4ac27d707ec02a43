package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// singleFile is the example's one-server stand, which the tests below apply and edit.
const singleFile = "stands/single/stand.yml"

// editedSingle is the single stand with its manifest rewritten by edit; overlay adds other files
// of the example, as testfs archive entries.
func editedSingle(t *testing.T, edit func(manifest string) string, overlay ...string) stands.Input {
	t.Helper()
	base, err := fs.ReadFile(examples(t, ""), singleFile)
	if err != nil {
		t.Fatal(err)
	}
	return load(t, examples(t, strings.Join(overlay, "")+"-- "+singleFile+" --\n"+edit(string(base))), singleFile)
}

// appliedSingle is a fixture with in (the single stand, or a variant of it) applied.
func appliedSingle(t *testing.T, in stands.Input) *fixture {
	t.Helper()
	return applied(t, newFixture(t), in)
}

// applied is f with in applied.
func applied(t *testing.T, f *fixture, in stands.Input) *fixture {
	t.Helper()
	if _, err := f.eng.Apply(context.Background(), in, false); err != nil {
		t.Fatalf("apply: %v\n%s", err, f.logs)
	}
	return f
}

func replaced(old, new string) func(string) string {
	return func(m string) string { return strings.Replace(m, old, new, 1) }
}

// TestPreviewIsReadOnly: a preview of a changed stand whose stack holds a stale lock (of a dead
// process of this host, which an apply removes) leaves every file of the backend as it was, the
// lock included. The apply afterwards is the control: the same lock is one the engine does remove.
func TestPreviewIsReadOnly(t *testing.T) {
	stand := load(t, examples(t, ""), singleFile)
	f := appliedSingle(t, stand)
	ctx := context.Background()
	bigger := editedSingle(t, replaced("type_serv: cx22", "type_serv: cx32"))
	if bigger.SpecHash == stand.SpecHash {
		t.Fatal("the changed stand has the same spec hash")
	}

	host, _ := os.Hostname()
	ref := stands.StackRef{Project: stand.Stand.Project, Env: stand.Stand.Env}
	lock := plantLock(t, f.backend, ref, deadPID(t), host, time.Now().Add(-time.Minute))

	before := backendFiles(t, f.backend)
	_, previewErr := f.eng.Preview(ctx, bigger)
	_, newErr := f.eng.PreviewNew(ctx, bigger)
	after := backendFiles(t, f.backend)
	if before != after {
		t.Errorf("the backend changed during the previews (preview: %v, preview-new: %v):\nbefore:\n%s\nafter:\n%s", previewErr, newErr, before, after)
	}
	t.Logf("preview with a stale lock: %v", previewErr)

	if _, err := f.eng.Apply(ctx, bigger, false); err != nil {
		t.Fatalf("apply after the previews: %v\n%s", err, f.logs)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("the apply left the stale lock: %v (the control shows nothing)", err)
	}
}

// backendFiles lists every file of a file:// backend with its mode and digest.
func backendFiles(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := ""
		if !d.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(data))
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %s %s %s\n", rel, info.Mode(), info.ModTime().Format(time.RFC3339Nano), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestUntrustedPreview: a pull request's input is rendered by the engine only with the render
// sandbox's fixed addresses (a template that behaves differently under the real ones cannot
// escape the sandbox's limits: here it fails instead), Pulumi's steps about it are not logged, and
// a failed preview's error carries its reason, not the CLI's output.
func TestUntrustedPreview(t *testing.T) {
	f := appliedSingle(t, load(t, examples(t, ""), singleFile))
	ctx := context.Background()
	ci, err := fs.ReadFile(examples(t, ""), "bases/cloud-init.yaml.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(string(ci), "\n")
	tricky := first + "\n{{ if ne .network_ip_range \"192.0.2.0/24\" }}{{ index .not_there 1 }}{{ end }}\n" + rest
	in := editedSingle(t, replaced("type_serv: cx22", "type_serv: cx32"), "-- bases/cloud-init.yaml.tmpl --\n"+tricky)
	in.Untrusted = true
	logged := len(f.logs.String())
	res, err := f.eng.Preview(ctx, in)
	if err != nil || len(res.Steps) != 1 || res.Steps[0].Op != "update" {
		t.Fatalf("untrusted preview: %+v %v", res, err)
	}
	if strings.Contains(f.logs.String()[logged:], "resource step") {
		t.Errorf("Pulumi's steps about a pull request's input were logged:\n%s", f.logs.String()[logged:])
	}
	// Control: trusted, the same input renders with the real addresses and fails there.
	in.Untrusted = false
	if _, err := f.eng.Preview(ctx, in); err == nil || !strings.Contains(err.Error(), "not_there") {
		t.Errorf("the trusted preview did not render with the real addresses: %v", err)
	}

	// A preview the CLI failed: the error of an untrusted input keeps its reason, not the output.
	cliOut := "exit status 255\nstdout: Previewing update\n ~ stands:index:Instance kv--cache update [diff: ~configHash,spec]\n"
	for _, r := range []reason.Reason{reason.Failure, reason.CloudUnavailable} {
		err := reason.Wrap(r, errors.New("pulumi preview demo_demo_single: "+cliOut))
		blindError(stands.Input{Stand: in.Stand, Untrusted: true}, &err)
		if reason.Of(err) != r || strings.Contains(err.Error(), "stands:index") || strings.Contains(err.Error(), "update") {
			t.Errorf("untrusted error %q (reason %s, want %s)", err, reason.Of(err), r)
		}
	}
}

// TestHangingHetznerEndpoint: an apply whose server create never gets an answer ends when its
// context does (the reconciler's --operation-timeout), the Pulumi CLI interrupted rather than left
// running; the stack is not left locked, and the next apply finishes the stand.
func TestHangingHetznerEndpoint(t *testing.T) {
	f := newFixture(t)
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	f.Sim.Inject(hcloudsim.Fault{Method: http.MethodPost, Path: "/servers", Delay: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.eng.Apply(ctx, stand, false)
	took := time.Since(start)
	if err == nil {
		t.Fatal("an apply whose create hung succeeded")
	}
	if took > 45*time.Second {
		t.Errorf("the apply returned %s after it started, its deadline was 15s", took.Round(time.Second))
	}
	t.Logf("the hung apply returned after %s: %v", took.Round(time.Second), Classify(err))
	if _, err := f.eng.Apply(context.Background(), stand, false); err != nil {
		t.Fatalf("the apply after the hang: %v\n%s", err, f.logs)
	}
	if n := len(f.Servers(t)); n != 1 {
		t.Errorf("%d servers after the second apply, want 1", n)
	}
}

// TestSharedBackendTwoOwners: two owners' stands of one project and env meet in one stack on a
// shared backend; the second owner's apply and a destroy that expects another stand are refused
// before Pulumi changes anything, and no server is deleted. The destroy naming the right stand is
// the control.
func TestSharedBackendTwoOwners(t *testing.T) {
	mine := load(t, examples(t, ""), singleFile)
	f := appliedSingle(t, mine)
	ctx := context.Background()
	theirs := editedSingle(t, replaced("stand:\n", "stand:\n  owner: other\n"))
	if theirs.Stand.ID != "other_demo_single" {
		t.Fatalf("the other owner's stand is %s", theirs.Stand.ID)
	}
	writes := f.Sim.Writes("")
	if _, err := f.eng.Apply(ctx, theirs, false); !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "holds stand demo_demo_single") {
		t.Errorf("the other owner's apply: %v", err)
	}
	ref := stands.StackRef{Project: "demo", Env: "single"}
	if _, err := f.eng.Destroy(ctx, stands.StackRef{Project: ref.Project, Env: ref.Env, StandID: "other_demo_single"}); !errors.Is(err, ErrNotOwned) {
		t.Errorf("a destroy expecting the other owner's stand: %v", err)
	}
	if n := f.Sim.Writes("") - writes; n != 0 || len(f.Servers(t)) != 1 {
		t.Errorf("%d Hetzner writes, %d servers after the refusals", n, len(f.Servers(t)))
	}
	ref.StandID = mine.Stand.ID
	if res, err := f.eng.Destroy(ctx, ref); err != nil || res.Changes["delete"] != 1 {
		t.Errorf("the destroy naming the stand the stack holds: %+v %v", res, err)
	}
}

// TestProtectHoldsServers: a stand protected at its last apply has none of its servers replaced or
// deleted, in the plan (which names the server and the input forcing it) or the apply (refused
// before Pulumi starts, no delete on the cloud), until protect: false is applied; then the same
// change goes through (the control). On each cloud: protect is the engine's, whatever the cloud.
func TestProtectHoldsServers(t *testing.T) { onEachCloud(t, protectHoldsServers) }

func protectHoldsServers(t *testing.T, f *fixture) {
	variant := func(protect bool, image, node string) stands.Input {
		return editedSingle(t, func(m string) string {
			m = strings.Replace(m, "image: debian-12", "image: "+image, 1)
			m = strings.Replace(m, "stand:\n", fmt.Sprintf("stand:\n  protect: %t\n", protect), 1)
			return strings.Replace(m, "nodes:\n  main:", "nodes:\n  "+node+":", 1)
		})
	}
	applied(t, f, variant(true, "debian-12", "main"))
	ctx := context.Background()
	id := f.servers(t)["demo-demo-single-main"].ID
	deletes := f.deletes()
	for _, c := range []struct {
		name string
		in   stands.Input
		want string
	}{
		{"another image", variant(true, "ubuntu-24.04", "main"), "server demo-demo-single-main would be replaced (image changed)"},
		{"a renamed node", variant(true, "debian-12", "app"), "server demo-demo-single-main would be deleted"},
		{"protect: false and another image at once", variant(false, "ubuntu-24.04", "main"), "server demo-demo-single-main would be replaced"},
	} {
		plan, err := f.eng.Preview(ctx, c.in)
		if err != nil || !strings.Contains(plan.Protected, c.want) {
			t.Errorf("%s: plan %+v %v, want %q", c.name, plan, err, c.want)
		}
		if _, err := f.eng.Apply(ctx, c.in, false); !errors.Is(err, ErrProtected) || Classify(err) != reason.Protected || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: apply %v", c.name, err)
		}
	}
	// A resize is no replacement: a protected stand scales up in place, its server kept.
	bigger := editedSingle(t, func(m string) string {
		return strings.Replace(strings.Replace(m, "type_serv: cx22", "type_serv: cx32", 1), "stand:\n", "stand:\n  protect: true\n", 1)
	})
	if res, err := f.eng.Apply(ctx, bigger, false); err != nil || res.Changes["update"] != 1 {
		t.Fatalf("resize of the protected stand: %+v %v", res, err)
	}
	if s := f.servers(t)["demo-demo-single-main"]; s.ID != id || s.Type != "cx32" || !f.running(t, s.ID) {
		t.Errorf("after the resize: id %d (was %d), %s, running %v", s.ID, id, s.Type, f.running(t, s.ID))
	}
	if n := f.deletes() - deletes; n != 0 || f.servers(t)["demo-demo-single-main"].ID != id {
		t.Fatalf("%d cloud deletes while protected", n)
	}
	if _, err := f.eng.Apply(ctx, variant(false, "debian-12", "main"), false); err != nil {
		t.Fatalf("apply protect: false: %v", err)
	}
	if _, err := f.eng.Apply(ctx, variant(false, "ubuntu-24.04", "main"), false); err != nil {
		t.Fatalf("the other image once unprotected: %v", err)
	}
	if s := f.servers(t)["demo-demo-single-main"]; s == nil || s.ID == id {
		t.Errorf("server after the unprotected change: %+v", s)
	}
}
