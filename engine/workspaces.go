package engine

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// The Automation API makes a folder for every workspace (os.MkdirTemp "pulumi_auto…") and never
// removes it: one per operation and per inventory, thousands a day at a 30 s poll, some holding
// stack configuration. The engine gives each workspace a folder under <work dir>/workspaces instead,
// and every exported operation removes the folders it made when it ends.

type scopeKey struct{}

type scope struct {
	mu   sync.Mutex
	dirs []string
}

// scoped returns ctx carrying the operation's workspace folders, and the function that removes them.
func (e *Engine) scoped(ctx context.Context) (context.Context, func()) {
	s := &scope{}
	return context.WithValue(ctx, scopeKey{}, s), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, d := range s.dirs {
			if err := os.RemoveAll(d); err != nil {
				e.log.Warn("workspace folder not removed", "dir", d, "err", err)
			}
		}
		s.dirs = nil
	}
}

// workspace is the option giving a workspace its own folder, removed with the operation's scope.
func (e *Engine) workspace(ctx context.Context) (auto.LocalWorkspaceOption, error) {
	base := filepath.Join(cmp.Or(e.cfg.WorkDir, os.TempDir()), "workspaces")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("workspace folder: %w", err)
	}
	dir, err := os.MkdirTemp(base, "ws-")
	if err != nil {
		return nil, fmt.Errorf("workspace folder: %w", err)
	}
	if s, ok := ctx.Value(scopeKey{}).(*scope); ok {
		s.mu.Lock()
		s.dirs = append(s.dirs, dir)
		s.mu.Unlock()
	}
	return auto.WorkDir(dir), nil
}
