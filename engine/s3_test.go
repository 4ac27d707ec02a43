package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/stands"
)

// TestS3Backend runs a stand against the seed's production backend form (s3://<bucket>/<owner>?
// region=..&endpoint=..&s3ForcePathStyle=true) on each S3-compatible server started in the test: the
// in-memory fake the other tests use, and versitygw, a real server, which keeps the fake honest.
func TestS3Backend(t *testing.T) {
	for _, kind := range []string{"gofakes3", "versitygw"} {
		t.Run(kind, func(t *testing.T) { testS3Backend(t, testenv.S3Servers[kind](t, "stands-state")) })
	}
}

func testS3Backend(t *testing.T, s3 *testenv.S3) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, hcloudToken)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	backend := s3.Backend("demo")
	// Credentials come from the environment, for the CLI and for the engine's own reads alike.
	for _, kv := range s3.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	eng, err := New(Config{PulumiBin: pl.Bin, BackendURL: backend, Passphrase: pl.Passphrase, HcloudToken: hcloudToken,
		HcloudEndpoint: h.Endpoint, ProviderBin: exe, WorkDir: t.TempDir(), Log: slog.New(slog.NewJSONHandler(logs, nil)), SkipNodes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := eng.Apply(ctx, stand, false); err != nil {
		t.Fatalf("apply on s3: %v\n%s", err, logs)
	}
	if keys := s3.Keys(t); !strings.Contains(strings.Join(keys, " "), "demo/.pulumi/stacks/demo/single.json") {
		t.Fatalf("no stack file under the owner prefix: %v", keys)
	}
	if res, err := eng.Apply(ctx, stand, false); err != nil || res.Changed {
		t.Fatalf("second apply on s3: %v %+v", err, res)
	}
	// A lock left in the bucket by a dead process of this host is removed before the next run.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	lock := fmt.Sprintf(`{"pid":%d,"username":"root","hostname":%q,"timestamp":"2026-01-01T00:00:00Z"}`, dead.Process.Pid, host)
	key := "demo/.pulumi/locks/organization/demo/single/0b5e1f3c-dead-lock.json"
	s3.Put(t, key, []byte(lock))
	if _, err := eng.Apply(ctx, stand, true); err != nil {
		t.Fatalf("apply over a stale lock on s3: %v\n%s", err, logs)
	}
	if s3.Has(t, key) || !strings.Contains(logs.String(), "removed a stale stack lock") {
		t.Error("stale lock not removed")
	}
	inv, err := eng.Inventory(ctx)
	if err != nil || len(inv) != 1 || !inv[0].Owned || !inv[0].Known || inv[0].SpecHash != stand.SpecHash {
		t.Errorf("inventory on s3: %+v %v", inv, err)
	}
	if _, err := eng.Destroy(ctx, stands.StackRef{Project: "demo", Env: "single"}); err != nil {
		t.Fatalf("destroy on s3: %v", err)
	}
	if n := len(h.Servers(t)); n != 0 {
		t.Errorf("%d servers after destroy", n)
	}
}
