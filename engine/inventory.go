package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Inventory lists every stack of the backend without running the Pulumi CLI: the diy backend's
// stack files (file:// or s3://) are listed and read through the same gocloud blob drivers the CLI
// uses. At 1,000 stands a no-op cycle must not start 1,000 processes, nor one: the listing costs two
// bucket lists (stacks, locks), and a stack file is read again only when the listing shows it
// changed (inventoryCache).
func (e *Engine) Inventory(ctx context.Context) (_ []stands.StackInfo, err error) {
	defer classify(&err)
	b, done, err := e.openBackend(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	objs, err := listObjects(ctx, b, stacksDir)
	if err != nil {
		return nil, err
	}
	locked, err := lockedStacks(ctx, b)
	if err != nil {
		return nil, err
	}
	var out []stands.StackInfo
	seen := map[string]bool{}
	for _, o := range objs {
		project, env, ok := stackFileName(o.Key)
		if !ok || seen[project+"/"+env] {
			continue // a .bak the CLI keeps, or the .json.gz beside a .json
		}
		seen[project+"/"+env] = true
		attrs := objectVersion(o)
		isLocked := locked[project+"/"+env]
		info, ok := e.inv.get(o.Key, attrs, isLocked)
		if !ok {
			info = stands.StackInfo{Project: project, Env: env}
			if err := readStackFile(ctx, b, o.Key, &info); err != nil {
				return nil, err
			}
			e.inv.put(o.Key, attrs, isLocked, info)
		}
		info.Locked = isLocked
		out = append(out, info)
	}
	e.inv.keep(seen)
	sort.Slice(out, func(i, j int) bool {
		return out[i].Project+"/"+out[i].Env < out[j].Project+"/"+out[j].Env
	})
	return out, nil
}

// lockedStacks is every project/env holding a lock file, from one listing of the locks folder.
func lockedStacks(ctx context.Context, b *blob.Bucket) (map[string]bool, error) {
	keys, err := listKeys(ctx, b, locksDir)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, k := range keys {
		if stack := lockFileStack(k); stack != "" {
			out[stack] = true
		}
	}
	return out, nil
}

// objectVersion is what tells a rewritten stack file from the one read before: S3 and fileblob
// list the modification time and size, S3 the MD5 of a single-part upload too.
func objectVersion(o *blob.ListObject) string {
	return fmt.Sprintf("%d/%d/%x", o.ModTime.UnixNano(), o.Size, o.MD5)
}

// inventoryCache keeps what each stack file said, by the version its listing showed. A stack that
// is locked is read every time: its update may end (and its history entry appear) at any moment.
type inventoryCache struct {
	mu      sync.Mutex
	entries map[string]cachedStack
}

type cachedStack struct {
	version string
	info    stands.StackInfo
}

func (c *inventoryCache) get(key, version string, locked bool) (stands.StackInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || locked || e.version != version || e.info.Locked {
		return stands.StackInfo{}, false
	}
	return e.info, true
}

func (c *inventoryCache) put(key, version string, locked bool, info stands.StackInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]cachedStack{}
	}
	info.Locked = locked
	c.entries[key] = cachedStack{version: version, info: info}
}

// keep forgets the stacks that are gone.
func (c *inventoryCache) keep(stacks map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.entries {
		if project, env, ok := stackFileName(key); !ok || !stacks[project+"/"+env] {
			delete(c.entries, key)
		}
	}
}

// stackFile is the part of a diy backend's stack file the inventory reads.
// readStackFile fills an entry from the diy backend's checkpoint and history.
func readStackFile(ctx context.Context, b *blob.Bucket, key string, info *stands.StackInfo) error {
	data, err := readStackBytes(ctx, b, key)
	if err != nil || data == nil {
		return err // gone between the listing and the read: a stack just removed
	}
	info.StateDigest = StateDigestOf(data)
	var cp stackFile
	if err := json.Unmarshal(data, &cp); err != nil {
		return fmt.Errorf("parse stack file %s: %w", key, err)
	}
	info.Known = true
	latest := cp.Checkpoint.Latest
	if latest == nil {
		info.Owned = true // created and never updated: there is nothing in it to protect
		return nil
	}
	info.Resources = len(latest.Resources)
	if !latest.Manifest.Time.IsZero() {
		info.LastUpdate = latest.Manifest.Time.UTC().Format(time.RFC3339)
	}
	info.Pending = len(latest.Pending)
	// Like checkOwned: a stack holding only our own resource types is ours even without the mark
	// (its first run failed before the outputs were written).
	onlyOurs := true
	for _, r := range latest.Resources {
		if r.Type != "pulumi:pulumi:Stack" {
			if r.Type != "pulumi:providers:"+provider.Name && !strings.HasPrefix(r.Type, provider.Name+":") {
				onlyOurs = false
			}
			continue
		}
		owned, _ := r.Outputs[OutOwnedBy].(string)
		info.Owned = owned == provider.ManagedByValue
		info.SpecHash, _ = r.Outputs[OutSpecHash].(string)
		info.Print, _ = r.Outputs[OutPrint].(string)
		info.StandID, _ = r.Outputs[OutStandID].(string)
		info.Protect, _ = r.Outputs[OutProtect].(bool)
		info.NodesMode, _ = r.Outputs[OutNodesMode].(string)
	}
	info.Owned = info.Owned || onlyOurs
	return readLastResult(ctx, b, info)
}

// readStackBytes reads a stack file, gunzipped when the CLI compressed it (PULUMI_DIY_BACKEND_GZIP).
func readStackBytes(ctx context.Context, b *blob.Bucket, key string) ([]byte, error) {
	data, err := readKey(ctx, b, key)
	if err != nil || data == nil || !strings.HasSuffix(key, ".gz") {
		return data, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, 1<<30))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return out, nil
}

// StateDigestOf names one version of a stack's state, from its stack file's bytes: every update
// rewrites the file (a new manifest time at least), reads never do. A status made from the state it
// names needs no second look (reconcile: observe). It is a digest of ciphertext and public values.
func StateDigestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// StateDigest is the digest of a stack's current state file ("" when it has none).
func (e *Engine) StateDigest(ctx context.Context, ref stands.StackRef) (string, error) {
	data, err := e.stackBytes(ctx, ref)
	if err != nil || data == nil {
		return "", err
	}
	return StateDigestOf(data), nil
}

// stackBytes is a stack's current state file (nil when it has none), read without the CLI.
func (e *Engine) stackBytes(ctx context.Context, ref stands.StackRef) ([]byte, error) {
	b, done, err := e.openBackend(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	key := stackKey(ref)
	data, err := readStackBytes(ctx, b, key)
	if err == nil && data == nil {
		data, err = readStackBytes(ctx, b, key+".gz")
	}
	return data, err
}

// readLastResult reads the stack's newest update record.
func readLastResult(ctx context.Context, b *blob.Bucket, info *stands.StackInfo) error {
	keys, err := listKeys(ctx, b, historyPrefix(stands.StackRef{Project: info.Project, Env: info.Env}))
	if err != nil {
		return err
	}
	newest := ""
	for _, k := range keys {
		if isHistory(k) && k > newest {
			newest = k
		}
	}
	if newest == "" {
		return nil
	}
	data, err := readKey(ctx, b, newest)
	if err != nil || data == nil {
		return err
	}
	var h historyEntry
	if err := json.Unmarshal(data, &h); err != nil {
		return fmt.Errorf("parse history %s: %w", newest, err)
	}
	info.LastOperation, info.LastResult = h.Kind, h.Result
	return nil
}
