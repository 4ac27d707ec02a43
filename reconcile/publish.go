package reconcile

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// loadPublished starts, once, from the status files the repository already has, so a restart
// neither rewrites them nor forgets a stand's phase.
func (r *Reconciler) loadPublished(ctx context.Context) error {
	r.mu.Lock()
	loaded := r.loaded
	r.mu.Unlock()
	if loaded {
		return nil
	}
	files, err := r.src.StatusFiles(ctx)
	if err != nil {
		return fmt.Errorf("read published status: %w", err)
	}
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range loadStatuses(files) {
		if st := r.state(id); st.status == nil {
			st.status = s
		}
		r.published[stands.StatusPath(id)] = s.encode()
		r.sharedSt[id] = s // with replicas, the leader commits the records over these
	}
	if data, err := fs.ReadFile(files, stands.StatusFile); err == nil {
		r.published[stands.StatusFile] = data
	}
	r.loaded = true
	return nil
}

// publishSoon commits the statuses that changed: at once without a StatusDelay, else once the delay
// has passed, with every change made meanwhile, so fifty stands created together are a few commits
// and no status waits longer than the delay. The wait counts as an operation, so Wait sees it; a
// drain ends it at once, and from then on every change is committed at once.
func (r *Reconciler) publishSoon(ctx context.Context) {
	if r.cfg.StatusDelay <= 0 || r.flushCtx.Err() != nil {
		_ = r.publish(ctx)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pubPending {
		return // the commit on its way takes this change too: it reads the statuses when it goes
	}
	r.pubPending = true
	r.ops.Add(1)
	go func() {
		defer r.ops.Done()
		t := time.NewTimer(r.cfg.StatusDelay)
		select {
		case <-t.C:
		case <-r.flushCtx.Done():
			t.Stop()
		}
		r.mu.Lock()
		r.pubPending = false // a change from now on needs a commit of its own
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = r.publish(ctx)
	}()
}

// publish commits the statuses that changed since the last commit, with STATUS.md. A failure is
// logged and retried at the next change or cycle: nothing is lost, the statuses stay in memory. With
// replicas, the statuses go to their records, and the leader commits those (publishShared).
func (r *Reconciler) publish(ctx context.Context) error {
	if r.rep != nil {
		return r.publishShared(ctx)
	}
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	r.mu.Lock()
	all := map[string]*Status{}
	for id, st := range r.stands {
		if st.status != nil {
			all[id] = st.status
		}
	}
	unreadable, banner := r.unreadable, r.sw.banner()
	r.mu.Unlock()
	return r.commitStatuses(ctx, all, unreadable, banner)
}

// commitStatuses commits the status files of all that differ from the last commit, and STATUS.md.
// Called with pubMu held; the statuses are not edited meanwhile (they are replaced, never changed).
func (r *Reconciler) commitStatuses(ctx context.Context, all map[string]*Status, unreadable []string, banner mdtext.Markup) error {
	files := map[string][]byte{}
	phases := map[string]reason.Phase{}
	for id, st := range all {
		phases[id] = st.Phase
		files[stands.StatusPath(id)] = st.encode()
	}
	files[stands.StatusFile] = statusTable(all, unreadable, banner)
	changed := map[string][]byte{}
	var what []string
	for p, data := range files {
		if string(r.published[p]) != string(data) {
			changed[p] = data
			if id, ok := strings.CutSuffix(strings.TrimPrefix(p, stands.StatusDir+"/"), ".json"); ok {
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
	commit, err := r.src.Publish(ctx, changed, msg)
	if err != nil {
		r.log.Warn("status not committed; retrying at the next change", "err", err)
		return err
	}
	for p, data := range changed {
		r.published[p] = data
	}
	if commit != "" {
		r.log.Info("status committed", "commit", mdtext.Short(commit), "stands", what)
	}
	return nil
}
