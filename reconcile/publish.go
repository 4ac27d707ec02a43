package reconcile

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// publisher commits the statuses to the repository: each status file that changed and STATUS.md,
// in one commit (docs/operations.md). It owns what was committed, and with replicas what the leader
// read of the records. mu serialises the commits and guards that; it is taken before the loop's lock
// (to snapshot the statuses), never under it. A delayed commit's state has a leaf lock of its own.
type publisher struct {
	src   Source
	delay time.Duration // Config.StatusDelay
	log   *slog.Logger

	// loaded: the repository's status files were read once. Read without mu, so a cycle does not
	// wait for a commit on its way to learn that.
	loaded atomic.Bool

	mu        sync.Mutex
	published map[string]fileSum // by path, what the last commit holds (a digest: 10,000 statuses are 15 MB)
	seen      map[string]int64   // replicas: record versions the leader last read
	sharedSt  map[string]*Status

	// last is what the last commit (or the pass that found nothing to commit) was made of: the
	// statuses, which are replaced and never changed, by pointer. A pass over the same is skipped:
	// encoding every status and rendering STATUS.md's pages each cycle cost a 10,000-stand daemon
	// 12 % of its CPU with nothing to commit.
	last           map[string]*Status
	lastUnreadable []string
	lastBanner     mdtext.Markup

	pendingMu leafMutex
	pending   bool // a delayed commit is on its way
	flushCtx  context.Context
	endDelay  context.CancelFunc // ends the delay for good: the drain has begun
}

func newPublisher(cfg Config, src Source) *publisher {
	p := &publisher{src: src, delay: cfg.StatusDelay, log: cfg.Log, published: map[string]fileSum{}, seen: map[string]int64{}, sharedSt: map[string]*Status{}}
	p.flushCtx, p.endDelay = context.WithCancel(context.Background())
	return p
}

// flushNow ends the delay of commits for good: the one on its way goes at once, and every later
// change is committed at once.
func (p *publisher) flushNow() { p.endDelay() }

// load reads, once, the status files the repository already has, so a restart neither rewrites them
// nor forgets a stand's phase; seed hands them to the loop before any commit can go.
func (p *publisher) load(ctx context.Context, seed func(map[string]*Status)) error {
	if p.loaded.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loaded.Load() {
		return nil
	}
	files, err := p.src.StatusFiles(ctx)
	if err != nil {
		return fmt.Errorf("read published status: %w", err)
	}
	loaded := loadStatuses(files)
	seed(loaded)
	for id, s := range loaded {
		p.published[stands.StatusPath(id)] = sumOf(s.encode())
		p.sharedSt[id] = s // with replicas, the leader commits the records over these
	}
	if data, err := fs.ReadFile(files, stands.StatusFile); err == nil {
		p.published[stands.StatusFile] = sumOf(data)
	}
	pages, _ := fs.ReadDir(files, pagesDir)
	for _, e := range pages {
		name := path.Join(pagesDir, e.Name())
		if data, err := fs.ReadFile(files, name); err == nil && !e.IsDir() {
			p.published[name] = sumOf(data)
		}
	}
	p.loaded.Store(true)
	return nil
}

// loadPublished seeds the stands' statuses from the repository's status files, once.
func (r *Reconciler) loadPublished(ctx context.Context) error {
	return r.pub.load(ctx, func(loaded map[string]*Status) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for id, s := range loaded {
			if st := r.state(id); st.status == nil {
				st.status = s
			}
		}
	})
}

// publishSoon commits the statuses that changed: at once without a StatusDelay, else once the delay
// has passed, with every change made meanwhile, so fifty stands created together are a few commits
// and no status waits longer than the delay. The wait counts as an operation, so Wait sees it; a
// drain ends it at once, and from then on every change is committed at once.
func (r *Reconciler) publishSoon(ctx context.Context) {
	r.pub.soon(ctx, &r.ops, r.publish)
}

// soon runs commit at once, or after the delay with whatever changed meanwhile (publishSoon); ops
// counts the wait.
func (p *publisher) soon(ctx context.Context, ops *sync.WaitGroup, commit func(context.Context) error) {
	if p.delay <= 0 || p.flushCtx.Err() != nil {
		_ = commit(ctx)
		return
	}
	p.pendingMu.Lock()
	defer p.pendingMu.Unlock()
	if p.pending {
		return // the commit on its way takes this change too: it reads the statuses when it goes
	}
	p.pending = true
	ops.Add(1)
	go func() {
		defer ops.Done()
		t := time.NewTimer(p.delay)
		select {
		case <-t.C:
		case <-p.flushCtx.Done():
			t.Stop()
		}
		p.pendingMu.Lock()
		p.pending = false // a change from now on needs a commit of its own
		p.pendingMu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = commit(ctx)
	}()
}

// publish commits the statuses that changed since the last commit, with STATUS.md. A failure is
// logged and retried at the next change or cycle: nothing is lost, the statuses stay in memory. With
// replicas, the statuses go to their records, and the leader commits those (publishShared).
func (r *Reconciler) publish(ctx context.Context) error {
	if r.claims != nil {
		return r.publishShared(ctx)
	}
	return r.pub.commit(ctx, func() (map[string]*Status, []string, mdtext.Markup) {
		r.mu.Lock()
		defer r.mu.Unlock()
		all := map[string]*Status{}
		for id, st := range r.stands {
			if st.status != nil {
				all[id] = st.status
			}
		}
		return all, r.unreadable, r.sw.banner() + r.gate.lifetimeBanner()
	})
}

// commit commits what read returns (the statuses, the unreadable stands, the banner), read under the
// publisher's lock so that two commits never interleave.
func (p *publisher) commit(ctx context.Context, read func() (map[string]*Status, []string, mdtext.Markup)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	all, unreadable, banner := read()
	return p.commitLocked(ctx, all, unreadable, banner)
}

// commitShared is commit on the leader with replicas: the records that changed since it last read
// them are read from rep, and the statuses committed are the records'.
func (p *publisher) commitShared(ctx context.Context, rep Replicas, read func() ([]string, mdtext.Markup)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	versions, err := rep.Versions(ctx)
	if err != nil {
		p.log.Warn("stand records not read; status committed at the next change", "err", err)
		return err
	}
	var changed []string
	for name, v := range versions {
		if p.seen[name] != v {
			changed = append(changed, name)
		}
	}
	if len(changed) > 0 {
		slices.Sort(changed)
		recs, err := rep.Records(ctx, changed)
		if err != nil {
			p.log.Warn("stand records not read; status committed at the next change", "err", err)
			return err
		}
		for name, rec := range recs {
			p.seen[name] = rec.Version
			if s, ok := decodeRecord(name, rec.Body); ok {
				p.sharedSt[name] = s
			}
		}
	}
	unreadable, banner := read()
	return p.commitLocked(ctx, p.sharedSt, unreadable, banner)
}

// commitLocked commits the status files of all that differ from the last commit, and STATUS.md.
// Called with mu held; the statuses are not edited meanwhile (they are replaced, never changed).
func (p *publisher) commitLocked(ctx context.Context, all map[string]*Status, unreadable []string, banner mdtext.Markup) error {
	if p.last != nil && banner == p.lastBanner && slices.Equal(unreadable, p.lastUnreadable) && maps.Equal(all, p.last) {
		return nil
	}
	err := p.commitChanged(ctx, all, unreadable, banner)
	if err == nil {
		p.last, p.lastUnreadable, p.lastBanner = maps.Clone(all), slices.Clone(unreadable), banner
	}
	return err
}

// fileSum is a digest of a file's content.
type fileSum [sha256.Size]byte

func sumOf(data []byte) fileSum { return sha256.Sum256(data) }

// commitChanged is commitLocked once something may have changed.
func (p *publisher) commitChanged(ctx context.Context, all map[string]*Status, unreadable []string, banner mdtext.Markup) error {
	files := map[string][]byte{}
	phases := map[string]reason.Phase{}
	for id, st := range all {
		phases[id] = st.Phase
		files[stands.StatusPath(id)] = st.encode()
	}
	maps.Copy(files, statusFiles(all, unreadable, banner))
	for path := range p.published {
		if _, ok := files[path]; !ok && strings.HasPrefix(path, pagesDir+"/") {
			files[path] = nil // a page no stand is on any more
		}
	}
	changed := map[string][]byte{}
	var what []string
	for path, data := range files {
		if sum, ok := p.published[path]; data == nil && ok || data != nil && (!ok || sum != sumOf(data)) {
			changed[path] = data
			if id, ok := strings.CutSuffix(strings.TrimPrefix(path, stands.StatusDir+"/"), ".json"); ok {
				what = append(what, id+" "+string(phases[id]))
			}
		}
	}
	if len(changed) == 0 {
		return nil
	}
	sort.Strings(what)
	msg := "status: " + strings.Join(what, ", ")
	if len(what) == 0 {
		msg = "status: summary"
	}
	commit, err := p.src.Publish(ctx, changed, msg)
	if err != nil {
		p.log.Warn("status not committed; retrying at the next change", "err", err)
		return err
	}
	for path, data := range changed {
		if data == nil {
			delete(p.published, path)
			continue
		}
		p.published[path] = sumOf(data)
	}
	if commit != "" {
		p.log.Info("status committed", "commit", mdtext.Short(commit), "stands", what)
	}
	return nil
}
