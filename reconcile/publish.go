package reconcile

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/reason"
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
		r.published[statusPath(id)] = s.encode()
	}
	if data, err := fs.ReadFile(files, gitsource.StatusFile); err == nil {
		r.published[gitsource.StatusFile] = data
	}
	r.loaded = true
	return nil
}

// publish commits the statuses that changed since the last commit, with STATUS.md. A failure is
// logged and retried at the next change or cycle: nothing is lost, the statuses stay in memory.
func (r *Reconciler) publish(ctx context.Context) error {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	r.mu.Lock()
	all := map[string]*Status{}
	files := map[string][]byte{}
	phases := map[string]reason.Phase{}
	for id, st := range r.stands {
		if st.status != nil {
			all[id] = st.status
			phases[id] = st.status.Phase
			files[statusPath(id)] = st.status.encode()
		}
	}
	files[gitsource.StatusFile] = statusTable(all, r.unreadable, r.controlBanner())
	r.mu.Unlock()
	changed := map[string][]byte{}
	var what []string
	for p, data := range files {
		if string(r.published[p]) != string(data) {
			changed[p] = data
			if id, ok := strings.CutSuffix(strings.TrimPrefix(p, gitsource.StatusDir+"/"), ".json"); ok {
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
		r.log.Info("status committed", "commit", short(commit), "stands", what)
	}
	return nil
}
