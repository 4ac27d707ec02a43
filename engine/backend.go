package engine

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// backends
	_ "gocloud.dev/blob/s3blob"   // s3:// backends
	"gocloud.dev/gcerrors"
)

// backendBucket opens the diy backend's storage the way the Pulumi CLI does — the URL's path is a
// prefix inside the bucket — so the engine can read stack files and locks without running Pulumi.
func (e *Engine) backendBucket(ctx context.Context) (*blob.Bucket, error) {
	u, err := url.Parse(e.cfg.BackendURL)
	if err != nil {
		return nil, fmt.Errorf("parse backend URL: %w", err)
	}
	prefix := ""
	if u.Scheme != "file" {
		prefix = strings.Trim(u.Path, "/")
		u.Path = ""
	} else if q := u.Query(); q.Get("no_tmp_dir") == "" {
		// fileblob writes a temporary file in os.TempDir and renames it into place, which fails
		// across filesystems: under systemd's PrivateTmp=, /tmp is one. The CLI does the same.
		q.Set("no_tmp_dir", "true")
		u.RawQuery = q.Encode()
	}
	// Credentials come from the process environment (AWS_ACCESS_KEY_ID, …), as for the CLI.
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("open backend bucket: %w", err)
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
	}
	return b, nil
}

// listKeys lists the keys under a prefix.
func listKeys(ctx context.Context, b *blob.Bucket, prefix string) ([]string, error) {
	objs, err := listObjects(ctx, b, prefix)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// readKey reads an object; a missing one is (nil, nil).
func readKey(ctx context.Context, b *blob.Bucket, key string) ([]byte, error) {
	data, err := b.ReadAll(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return data, nil
}
