package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// The S3 servers' credentials: the engine and the CLI take them from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (S3.Env).
const (
	S3AccessKey = "stands-test"
	S3SecretKey = "stands-test-secret"
)

// S3 is an S3-compatible server on 127.0.0.1 with one bucket, until the test ends: the Stands Engine's state
// backend, s3://<bucket>/<owner>?endpoint=<URL>&s3ForcePathStyle=true. Two kinds answer the same
// tests: gofakes3 in memory (StartS3) and versitygw, a real server over a folder (StartVersityGW),
// which keeps the fake honest.
type S3 struct {
	Kind   string // "gofakes3" or "versitygw"
	URL    string
	Bucket string
	client *s3.Client
	gw     *versityGW
}

// S3Servers are the kinds a contract test runs against, by name.
var S3Servers = map[string]func(testing.TB, string) *S3{"gofakes3": StartS3, "versitygw": StartVersityGW}

// StartS3 serves a fresh bucket from gofakes3, in memory.
func StartS3(t testing.TB, bucket string) *S3 {
	t.Helper()
	mem := s3mem.New()
	if err := mem.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(mem).Server())
	t.Cleanup(srv.Close)
	return newS3("gofakes3", srv.URL, bucket)
}

// StartVersityGW serves a fresh bucket from versitygw (bin/versitygw, make tools) over a folder of
// the test's; Stop and Start take it down and bring it back with its objects.
func StartVersityGW(t testing.TB, bucket string) *S3 {
	t.Helper()
	gw := &versityGW{bin: Binary(t, "versitygw", "STANDS_VERSITYGW_BIN"), dir: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
	gw.start(t)
	t.Cleanup(gw.stop)
	s := newS3("versitygw", "http://"+gw.addr, bucket)
	s.gw = gw
	if _, err := s.client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s on versitygw: %v\n%s", bucket, err, tail(gw.log))
	}
	return s
}

func newS3(kind, url, bucket string) *S3 {
	client := s3.New(s3.Options{BaseEndpoint: aws.String(url), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(S3AccessKey, S3SecretKey, "")})
	return &S3{Kind: kind, URL: url, Bucket: bucket, client: client}
}

// Env is what a process reaching the server needs in its environment.
func (s *S3) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + S3AccessKey, "AWS_SECRET_ACCESS_KEY=" + S3SecretKey, "AWS_REGION=us-east-1"}
}

// Backend is the state backend URL of owner's folder in the bucket.
func (s *S3) Backend(owner string) string {
	return "s3://" + s.Bucket + "/" + owner + "?region=us-east-1&endpoint=" + s.URL + "&s3ForcePathStyle=true"
}

// Keys lists every object's key in the bucket.
func (s *S3) Keys(t testing.TB) []string {
	t.Helper()
	var keys []string
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			t.Fatalf("list %s: %v", s.Bucket, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// Put writes an object, as another process would.
func (s *S3) Put(t testing.TB, key string, data []byte) {
	t.Helper()
	if _, err := s.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// Has says whether the object exists.
func (s *S3) Has(t testing.TB, key string) bool {
	t.Helper()
	_, err := s.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	var nf *types.NotFound
	switch {
	case err == nil:
		return true
	case errors.As(err, &nf):
		return false
	}
	t.Fatalf("head %s: %v", key, err)
	return false
}

// Stop takes a versitygw down: the address refuses connections until Start.
func (s *S3) Stop(t testing.TB) {
	t.Helper()
	if s.gw == nil {
		t.Fatalf("%s cannot be stopped", s.Kind)
	}
	s.gw.stop()
}

// Start serves the same folder on the same address again.
func (s *S3) Start(t testing.TB) {
	t.Helper()
	s.gw.start(t)
}

type versityGW struct {
	bin, dir, addr string
	log            string
	proc           *localserver.Process
}

func (g *versityGW) start(t testing.TB) {
	t.Helper()
	data := filepath.Join(g.dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	g.log = filepath.Join(g.dir, "versitygw.log")
	cmd := exec.Command(g.bin, "--port", g.addr, "posix", data)
	cmd.Env = []string{"ROOT_ACCESS_KEY=" + S3AccessKey, "ROOT_SECRET_KEY=" + S3SecretKey, "HOME=" + g.dir}
	p, err := localserver.StartProcess(cmd, g.log)
	if err != nil {
		t.Fatal(err)
	}
	g.proc = p
	err = wait.Until(context.Background(), 30*time.Second, func() error {
		resp, err := http.Get("http://" + g.addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}, wait.Every(50*time.Millisecond), wait.Unless(func() error {
		if done, err := p.Exited(); done {
			return fmt.Errorf("exited: %v", err)
		}
		return nil
	}))
	if err != nil {
		t.Fatalf("versitygw did not answer on %s: %v\n%s", g.addr, err, tail(g.log))
	}
}

func (g *versityGW) stop() {
	if g.proc != nil {
		g.proc.Stop()
		g.proc = nil
	}
}
