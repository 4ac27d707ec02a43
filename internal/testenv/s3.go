package testenv

import (
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is an S3-compatible server in memory (gofakes3) on 127.0.0.1 with one bucket, until the test
// ends: the seed's state backend, s3://<bucket>/<owner>?endpoint=<URL>&s3ForcePathStyle=true.
type S3 struct {
	URL    string
	Bucket string
	Mem    *s3mem.Backend // the objects, to read or plant directly
}

// StartS3 serves a fresh bucket.
func StartS3(t testing.TB, bucket string) *S3 {
	t.Helper()
	mem := s3mem.New()
	if err := mem.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(mem).Server())
	t.Cleanup(srv.Close)
	return &S3{URL: srv.URL, Bucket: bucket, Mem: mem}
}

// Keys lists every object's key in the bucket.
func (s *S3) Keys(t testing.TB) []string {
	t.Helper()
	objs, err := s.Mem.ListBucket(s.Bucket, &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs.Contents {
		keys = append(keys, o.Key)
	}
	return keys
}
