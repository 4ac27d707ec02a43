package engine

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/stands-engine/stands-reconciler/internal/testenv"
)

// TestS3Backend runs a stand against the seed's production backend form (s3://<bucket>/<owner>?
// region=..&endpoint=..&s3ForcePathStyle=true) on an S3-compatible server started in the test.
func TestS3Backend(t *testing.T) {
	mem := s3mem.New()
	if err := mem.CreateBucket("stands-state"); err != nil {
		t.Fatal(err)
	}
	s3 := httptest.NewServer(gofakes3.New(mem).Server())
	t.Cleanup(s3.Close)
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, hcloudToken)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	backend := "s3://stands-state/demo?region=us-east-1&endpoint=" + s3.URL + "&s3ForcePathStyle=true"
	eng, err := New(Config{PulumiBin: pl.Bin, BackendURL: backend, Passphrase: pl.Passphrase, HcloudToken: hcloudToken,
		HcloudEndpoint: h.Endpoint, ProviderBin: exe, WorkDir: t.TempDir(), Log: slog.New(slog.NewJSONHandler(logs, nil)),
		Env: map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_REGION": "us-east-1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := eng.Apply(ctx, stand, false); err != nil {
		t.Fatalf("apply on s3: %v\n%s", err, logs)
	}
	objs, err := mem.ListBucket("stands-state", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs.Contents {
		keys = append(keys, o.Key)
	}
	if !strings.Contains(strings.Join(keys, " "), "demo/.pulumi/stacks/demo/single.json") {
		t.Fatalf("no stack file under the owner prefix: %v", keys)
	}
	if res, err := eng.Apply(ctx, stand, false); err != nil || res.Changed {
		t.Fatalf("second apply on s3: %v %+v", err, res)
	}
	if _, err := eng.Destroy(ctx, StackRef{Project: "demo", Env: "single"}); err != nil {
		t.Fatalf("destroy on s3: %v", err)
	}
	if n := len(h.Servers(t)); n != 0 {
		t.Errorf("%d servers after destroy", n)
	}
}
