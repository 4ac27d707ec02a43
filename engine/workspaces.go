package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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

// workspace gives a workspace its own folder, removed with the operation's scope, and the CLI's
// environment for it (envVars), whose passphrase is a file in that folder.
func (e *Engine) workspace(ctx context.Context) (dir string, opts []auto.LocalWorkspaceOption, err error) {
	base := filepath.Join(cmp.Or(e.cfg.WorkDir, os.TempDir()), "workspaces")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", nil, fmt.Errorf("workspace folder: %w", err)
	}
	if dir, err = os.MkdirTemp(base, fmt.Sprintf("ws-%d-", os.Getpid())); err != nil {
		return "", nil, fmt.Errorf("workspace folder: %w", err)
	}
	if s, ok := ctx.Value(scopeKey{}).(*scope); ok {
		s.mu.Lock()
		s.dirs = append(s.dirs, dir)
		s.mu.Unlock()
	}
	env, err := e.envVars(dir)
	if err != nil {
		return "", nil, err
	}
	return dir, []auto.LocalWorkspaceOption{auto.WorkDir(dir), auto.EnvVars(env), auto.Pulumi(e.cmd), auto.PulumiHome(env["PULUMI_HOME"])}, nil
}

// removeOrphanWorkspaces removes the workspace folders under <work dir>/workspaces whose process
// ended without removing them (a kill -9, a crash of the machine): they hold the operation's
// credential files (the passphrase, the Hetzner token). A folder is named by its process's pid
// (ws-<pid>-…); one of a process still running is another command's on the same state folder and
// stays; one named otherwise is an older version's and goes.
func removeOrphanWorkspaces(workDir string, log *slog.Logger) {
	base := filepath.Join(workDir, "workspaces")
	entries, err := os.ReadDir(base)
	if err != nil {
		return // none yet
	}
	removed := 0
	for _, e := range entries {
		pid, ok := workspacePid(e.Name())
		if ok && (pid == os.Getpid() || processRuns(pid)) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(base, e.Name())); err != nil {
			log.Warn("workspace folder of an ended process not removed", "dir", filepath.Join(base, e.Name()), "err", err)
			continue
		}
		removed++
	}
	if removed > 0 {
		log.Info("removed workspace folders a stopped process left", "folders", removed)
	}
}

// workspacePid is the pid in a workspace folder's name, ws-<pid>-<random>.
func workspacePid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "ws-")
	if !ok {
		return 0, false
	}
	p, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

// processRuns says whether a process of that pid exists (signal 0: none is sent).
func processRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pulumiHome is each workspace's own PULUMI_HOME, inside its folder: the CLI writes a log file there
// for every process it runs (logs/pulumi-<time>-<pid>-<command>.log, kept for 7 days or 500 MB),
// thousands a day at a 30 s poll. The engine needs nothing else of a home: plugins are found by
// path, the backend is PULUMI_BACKEND_URL. Logs of a CLI that failed are kept (keepLogs).
const pulumiHome = ".pulumi-home"

// maxKeptLogs bounds the logs kept of failed CLIs: the newest are kept.
const maxKeptLogs = 20

// keepLogs moves the Pulumi logs of a failed CLI's workspace into dir (0700), for `pulumi logs
// decrypt`, keeping the newest maxKeptLogs there.
func keepLogs(workdir, dir string) {
	logs, _ := filepath.Glob(filepath.Join(workdir, pulumiHome, "logs", "*.log"))
	if len(logs) == 0 || os.MkdirAll(dir, 0o700) != nil {
		return
	}
	for _, l := range logs {
		_ = os.Rename(l, filepath.Join(dir, filepath.Base(workdir)+"-"+filepath.Base(l)))
	}
	kept, _ := os.ReadDir(dir)
	type file struct {
		name string
		mod  time.Time
	}
	var files []file
	for _, k := range kept {
		if info, err := k.Info(); err == nil && !k.IsDir() {
			files = append(files, file{k.Name(), info.ModTime()})
		}
	}
	slices.SortFunc(files, func(a, b file) int { return b.mod.Compare(a.mod) })
	for _, f := range files[min(len(files), maxKeptLogs):] {
		_ = os.Remove(filepath.Join(dir, f.name))
	}
}

// secretFile writes one credential for the CLI or the provider into the workspace folder (0700,
// removed with the operation): an environment is readable in /proc/<pid>/environ by every process
// of the user and inherited by every child, so credentials reach children as files they read.
// credentialDir is the folder of a workspace's (or the engine's) credential files.
const credentialDir = ".credentials"

func secretFile(dir, name, value string) (string, error) {
	sub := filepath.Join(dir, credentialDir)
	if err := os.MkdirAll(sub, 0o700); err != nil {
		return "", fmt.Errorf("credential folder: %w", err)
	}
	// Written aside and renamed into place: a process reading it meanwhile (a Pulumi CLI reading the
	// pgpass file while another operation rewrites it) sees the old file or the new, never an empty
	// one (seen as "password authentication failed" with four operations at once).
	p := filepath.Join(sub, name)
	f, err := os.CreateTemp(sub, "."+name+".*") // 0600
	if err == nil {
		_, err = f.WriteString(value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), p)
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}
	if err != nil {
		return "", fmt.Errorf("write credential file %s: %w", name, err)
	}
	return p, nil
}
