package engine

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy/postgres"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// backends
	_ "gocloud.dev/blob/s3blob"   // s3:// backends
	"gocloud.dev/gcerrors"
)

// openBackend opens the diy backend's storage the way the Pulumi CLI does — the URL's path is a
// prefix inside the bucket — so the engine can read stack files and locks without running Pulumi.
// done releases it. A postgres:// backend is the CLI's own driver (a table of keys) over one
// connection pool kept for the engine's life (Close), since opening one costs a connection and two
// queries; file:// and s3:// are opened for each use, as before.
func (e *Engine) openBackend(ctx context.Context) (*blob.Bucket, func(), error) {
	u, err := url.Parse(e.cfg.BackendURL)
	if err != nil {
		return nil, nil, fmt.Errorf("parse backend URL: %w", err)
	}
	if u.Scheme == postgres.PostgresScheme {
		if err := e.writePassfile(); err != nil {
			return nil, nil, err
		}
		b, err := e.pg.open(ctx, u)
		return b, func() {}, err
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
		return nil, nil, fmt.Errorf("open backend bucket: %w", err)
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
	}
	return b, func() { _ = b.Close() }, nil
}

// pgBackend is the engine's one connection pool to a postgres:// backend, opened at first use and
// again after Close.
type pgBackend struct {
	mu     sync.Mutex
	db     *postgres.Bucket
	bucket *blob.Bucket // db's bucket under the URL path's prefix, as the CLI sees it
}

// open connects once. The URL keeps its path: for PostgreSQL it names the database, and the CLI
// uses it as the key prefix too (postgres://host/stands → keys "stands/.pulumi/…").
func (p *pgBackend) open(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bucket != nil {
		return p.bucket, nil
	}
	prefix := strings.Trim(u.Path, "/")
	db, err := postgres.NewPostgresBucket(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", redactURL(u.String()), err)
	}
	p.db = db
	p.bucket = db.Bucket()
	if prefix != "" {
		p.bucket = blob.PrefixedBucket(p.bucket, prefix+"/")
	}
	return p.bucket, nil
}

// close ends the pool; the next use opens a new one.
func (p *pgBackend) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db == nil {
		return nil
	}
	_ = p.bucket.Close() // the driver's Close does nothing; the pool is db's
	err := p.db.Close()
	p.db, p.bucket = nil, nil
	// db.Close closes its own bucket first, which PrefixedBucket already marked closed
	// (FailedPrecondition): only the pool's error counts.
	if err != nil && gcerrors.Code(err) != gcerrors.FailedPrecondition {
		return fmt.Errorf("close state database: %w", err)
	}
	return nil
}

// Close releases what the engine keeps open between operations: a postgres:// backend's pool.
func (e *Engine) Close() error { return e.pg.close() }

// redactURL is a backend URL fit to show: a password in it is replaced (the engine refuses such URLs,
// but an error may quote one before the check).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable backend URL>"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	return u.String()
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

// listing serialises listings. The postgres driver holds one pooled connection for the key query
// while it asks another for each key's attributes: as many concurrent listings as the pool has
// connections would each hold one and wait for a second forever.
var listing sync.Mutex

// listAttempts: the postgres driver fails a listing whose key was deleted between its key query and
// that key's attributes query (a CLI releasing its lock, a holder record removed): listed again.
const listAttempts = 3

// listObjects lists the objects under a prefix with their attributes.
func listObjects(ctx context.Context, b *blob.Bucket, prefix string) ([]*blob.ListObject, error) {
	listing.Lock()
	defer listing.Unlock()
	var err error
	for range listAttempts {
		var out []*blob.ListObject
		if out, err = listOnce(ctx, b, prefix); gcerrors.Code(err) != gcerrors.NotFound {
			return out, err
		}
	}
	return nil, err
}

// listPageSize is how many objects the first page of a listing asks for, and listMorePageSize each
// later one. The file driver walks the folder tree again for each page (skipping up to the page's
// token), so pages of 1,000 made a listing of 10,000 stacks ten walks: 13 s of a 30 s profile of no-op
// cycles. Every page is allocated at its full size, so a listing of a stack's few history records
// keeps small pages. A service with a smaller limit answers with its own page size.
const (
	listPageSize     = 1000
	listMorePageSize = 1 << 16
)

func listOnce(ctx context.Context, b *blob.Bucket, prefix string) ([]*blob.ListObject, error) {
	var out []*blob.ListObject
	token, size := blob.FirstPageToken, listPageSize
	for len(token) > 0 {
		page, next, err := b.ListPage(ctx, token, size, &blob.ListOptions{Prefix: prefix})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, obj := range page {
			if !obj.IsDir {
				out = append(out, obj)
			}
		}
		token, size = next, listMorePageSize
	}
	return out, nil
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

// removeKey removes an object; one already gone is no error. The postgres driver reports a missing
// key as Unknown, not NotFound, so a failed delete is told apart by looking again.
func removeKey(ctx context.Context, b *blob.Bucket, key string) error {
	err := b.Delete(ctx, key)
	if err == nil || gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	if ok, xerr := b.Exists(ctx, key); xerr == nil && !ok {
		return nil
	}
	return fmt.Errorf("delete %s: %w", key, err)
}
