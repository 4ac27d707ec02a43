package gitsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/stands"
)

// A pull request's head is whatever its author pushed: files of hundreds of megabytes, a commit
// message of a gigabyte of zeros. go-git's own fetch holds every object it indexes in memory whole,
// so a head is fetched here instead (docs/pr-workflow.md#what-a-pull-request-may-bring): the
// server leaves out every blob over repofs.MaxFileSize (a partial fetch; a file that large is never
// read anyway), the pack is written to disk under a byte limit, every object's size is checked from
// its header before anything is indexed, and the objects are kept in a store of the pull request's
// own on disk, layered over the tracked branch's and removed once its files are read.

// PullLimits bound what reading one pull request's head may take.
type PullLimits struct {
	Pack    int64 // bytes of the pack, as sent
	Object  int64 // bytes of one object, inflated (a blob over repofs.MaxFileSize is never sent)
	Objects int   // objects in the pack
	Total   int64 // bytes of all objects, inflated
	// largeBlobs asks for every blob, those over repofs.MaxFileSize too: only the controls that show
	// what the filter keeps out set it (withLargeBlobs, the stands_pull_unfiltered build). A server
	// that offers no filter sends them anyway, and vetPack refuses a head holding one.
	largeBlobs bool
	// inMemory keeps a head's objects in memory, as go-git's fetch into its memory store did: only the
	// stands_pull_unfiltered build sets it.
	inMemory bool
}

// DefaultPullLimits hold a head of a few thousand stands with their history since the tracked
// branch; the largest object a stands repository needs is a tree or a 1 MiB file.
var DefaultPullLimits = PullLimits{Pack: 256 << 20, Object: 8 << 20, Objects: 200_000, Total: 1 << 30}.control(true)

// control is l as the stands_pull_unfiltered build fetches (pull_unfiltered.go): every blob, kept in
// memory, and with unbounded, no size refused.
func (l PullLimits) control(unbounded bool) PullLimits {
	if !unfilteredBuild {
		return l
	}
	l.largeBlobs, l.inMemory = true, true
	if unbounded {
		l.Pack, l.Object, l.Objects, l.Total = 1<<40, 1<<40, 1<<30, 1<<40
	}
	return l
}

// headStore is one fetched head's objects, over the tracked branch's; close removes them.
type headStore struct {
	storer.EncodedObjectStorer
	head  plumbing.Hash
	close func() error
}

// fetchHead fetches ref from url into a new store in a folder under dir, sending haves (the tracked
// branch's objects, which the store reads from under) as what it has.
func fetchHead(ctx context.Context, url string, auth transport.AuthMethod, ref string, haves []plumbing.Hash,
	under storer.EncodedObjectStorer, dir string, lim PullLimits) (_ *headStore, err error) {
	up, err := listRefs(ctx, url, auth)
	if err != nil {
		return nil, err
	}
	defer up.Close()
	r, ok := up.refs[plumbing.ReferenceName(ref)]
	if !ok || r.Type() != plumbing.HashReference {
		return nil, fmt.Errorf("no ref %s in %s", ref, RedactURL(url))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, pullDirPrefix)
	if err != nil {
		return nil, err
	}
	var top storage.Storer = memory.NewStorage()
	closeTop := func() error { return nil }
	if !lim.inMemory {
		fst := filesystem.NewStorage(osfs.New(filepath.Join(tmp, "git")), cache.NewObjectLRU(4<<20))
		top, closeTop = fst, fst.Close
	}
	hs := &headStore{head: r.Hash(), close: func() error { return errors.Join(closeTop(), os.RemoveAll(tmp)) }}
	defer func() {
		if err != nil {
			_ = hs.close()
		}
	}()
	hs.EncodedObjectStorer = overlay{top: top, under: under}
	if under.HasEncodedObject(r.Hash()) == nil {
		return hs, nil // already here: the head is a commit of the tracked branch
	}
	if err := up.fetch(ctx, r.Hash(), haves, top, tmp, lim); err != nil {
		return nil, fmt.Errorf("fetch %s: %w", ref, err)
	}
	return hs, nil
}

// upload is one upload-pack conversation: the refs the server advertised, then at most one pack.
type upload struct {
	sess transport.UploadPackSession
	adv  *packp.AdvRefs
	refs map[plumbing.ReferenceName]*plumbing.Reference
}

// listRefs opens a conversation with the repository at url and reads the refs it advertises.
func listRefs(ctx context.Context, url string, auth transport.AuthMethod) (_ *upload, err error) {
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", RedactURL(url), err)
	}
	cl, err := client.NewClient(ep)
	if err != nil {
		return nil, err
	}
	sess, err := cl.NewUploadPackSession(ep, auth)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = sess.Close()
		}
	}()
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("list refs: %w", err)
	}
	refs, err := adv.AllReferences()
	if err != nil {
		return nil, fmt.Errorf("list refs: %w", err)
	}
	return &upload{sess: sess, adv: adv, refs: refs}, nil
}

func (u *upload) Close() error { return u.sess.Close() }

// fetch asks for want and what it needs that haves do not reach, every blob over
// repofs.MaxFileSize left out, and stores the pack into dst once its headers are within lim; the
// pack goes through a file in tmp, never through memory.
func (u *upload) fetch(ctx context.Context, want plumbing.Hash, haves []plumbing.Hash, dst storer.Storer, tmp string, lim PullLimits) error {
	req := packp.NewUploadPackRequestFromCapabilities(u.adv.Capabilities)
	// A thin pack's deltas would name bases outside the pack, which a store's own index of the pack
	// (or a pull request's store, indexed on its own) cannot resolve.
	req.Capabilities.Delete(capability.ThinPack)
	if !lim.largeBlobs && u.adv.Capabilities.Supports(capability.Filter) {
		_ = req.Capabilities.Set(capability.Filter)
		req.Filter = packp.FilterBlobLimit(uint64(repofs.MaxFileSize)+1, packp.BlobLimitPrefixNone)
	}
	req.Wants = []plumbing.Hash{want}
	req.Haves = haves
	resp, err := u.sess.UploadPack(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Close()
	var pack io.Reader = resp
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		pack = sideband.NewDemuxer(sideband.Sideband64k, resp)
	case req.Capabilities.Supports(capability.Sideband):
		pack = sideband.NewDemuxer(sideband.Sideband, resp)
	}
	if lim.inMemory {
		return packfile.UpdateObjectStorage(dst, pack) // the control: straight from the wire, as go-git's fetch
	}
	f, err := os.CreateTemp(tmp, "incoming-*.pack")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	n, err := io.Copy(f, io.LimitReader(pack, lim.Pack+1))
	if err != nil {
		return err
	}
	if n > lim.Pack {
		return &stands.TooLarge{Limit: fmt.Sprintf("the pack is over %d MiB", lim.Pack>>20)}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := vetPack(f, lim); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := packfile.UpdateObjectStorage(dst, f); err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	return nil
}

// pullDirPrefix names the folders of heads being read; one left by a killed daemon is removed at
// the next start.
const pullDirPrefix = "pull-"

// errStore marks a fetch whose pack the store did not take.
var errStore = errors.New("store the pack")

// trackedDir is where, under the work folder, the tracked and status branches' objects are kept.
const trackedDir = "tracked"

// vetPack reads a pack's object headers, inflating each object to nowhere, and refuses one that
// holds an object, or objects in all, over the limits: indexing a pack holds its largest object in
// memory. A delta's size is that of the object it makes, which its first bytes say.
func vetPack(r io.Reader, lim PullLimits) error {
	sc := packfile.NewScanner(r)
	_, count, err := sc.Header()
	if err != nil {
		return fmt.Errorf("read pack: %w", err)
	}
	if int64(count) > int64(lim.Objects) {
		return &stands.TooLarge{Limit: fmt.Sprintf("the fetch brings %d Git objects, over %d", count, lim.Objects)}
	}
	var total int64
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return fmt.Errorf("read pack: %w", err)
		}
		size := oh.Length
		head := &prefix{max: 20}
		if _, _, err := sc.NextObject(head); err != nil {
			return fmt.Errorf("read pack: %w", err)
		}
		if oh.Type.IsDelta() {
			if size, err = deltaTarget(head.b.Bytes()); err != nil {
				return fmt.Errorf("read pack: %w", err)
			}
		}
		if size > lim.Object {
			return &stands.TooLarge{Limit: fmt.Sprintf("the fetch holds a Git object of %d MiB, over %d MiB", size>>20, lim.Object>>20)}
		}
		if total += size; total > lim.Total {
			return &stands.TooLarge{Limit: fmt.Sprintf("the fetch's Git objects hold over %d MiB", lim.Total>>20)}
		}
	}
	return nil
}

// prefix keeps the first max bytes written to it and drops the rest.
type prefix struct {
	b   bytes.Buffer
	max int
}

func (p *prefix) Write(b []byte) (int, error) {
	if left := p.max - p.b.Len(); left > 0 {
		p.b.Write(b[:min(left, len(b))])
	}
	return len(b), nil
}

// deltaTarget is the size of the object a delta makes: the second of the two varints it starts with
// (Git's pack format: the base's size, then the result's).
func deltaTarget(d []byte) (int64, error) {
	var sizes [2]int64
	for i := range sizes {
		var shift uint
		for {
			if len(d) == 0 || shift > 56 {
				return 0, errors.New("a delta without its sizes")
			}
			c := d[0]
			d = d[1:]
			sizes[i] |= int64(c&0x7f) << shift
			shift += 7
			if c&0x80 == 0 {
				break
			}
		}
	}
	return sizes[1], nil
}

// overlay reads top's objects, then under's; it writes to top.
type overlay struct {
	top, under storer.EncodedObjectStorer
}

func (o overlay) NewEncodedObject() plumbing.EncodedObject { return o.top.NewEncodedObject() }

func (o overlay) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	return o.top.SetEncodedObject(obj)
}

func (o overlay) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, err := o.top.EncodedObject(t, h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return o.under.EncodedObject(t, h)
	}
	return obj, err
}

func (o overlay) IterEncodedObjects(t plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("a pull request's objects are not listed")
}

func (o overlay) HasEncodedObject(h plumbing.Hash) error {
	if err := o.top.HasEncodedObject(h); !errors.Is(err, plumbing.ErrObjectNotFound) {
		return err
	}
	return o.under.HasEncodedObject(h)
}

func (o overlay) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	n, err := o.top.EncodedObjectSize(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return o.under.EncodedObjectSize(h)
	}
	return n, err
}

func (o overlay) AddAlternate(string) error {
	return errors.New("a pull request's store has no alternates")
}

// pullDir is where heads are read; the first time, the folders of heads a killed daemon was
// reading are removed (the caller holds s.mu).
func (s *Source) pullDir() string {
	if s.workDir == "" {
		return filepath.Join(os.TempDir(), "stands-reconciler-pulls")
	}
	if !s.cleaned {
		s.cleaned = true
		left, _ := filepath.Glob(filepath.Join(s.workDir, pullDirPrefix+"*"))
		for _, d := range left {
			if err := os.RemoveAll(d); err != nil {
				s.log.Warn("a pull request's objects left by an earlier run not removed", "dir", d, "err", err)
			}
		}
	}
	return s.workDir
}
