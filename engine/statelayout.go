package engine

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
)

// The Pulumi diy backend's own folder layout and file formats, as its CLI writes them under a
// backend's prefix (file://, s3:// and postgres:// alike). Reading them directly is what lets a
// no-op cycle at 1,000 stands run no Pulumi process (Inventory), and what recovers a killed run's
// lock; it couples the engine to Pulumi's internals, so they are named here and nowhere else, and
// TestBackendLayoutContract holds each to what the real CLI writes: a Pulumi upgrade that moves a
// file fails that test, not production.
const (
	stacksDir  = ".pulumi/stacks/"             // <project>/<stack>.json, or .json.gz; .bak beside
	locksDir   = ".pulumi/locks/organization/" // <project>/<stack>/<id>.json while an update runs
	historyDir = ".pulumi/history/"            // <project>/<stack>/<stack>-<unix nanos>.history.json
	historyExt = ".history.json"
)

// stackKey is a stack's state file.
func stackKey(ref stands.StackRef) string { return stacksDir + ref.Project + "/" + ref.Env + ".json" }

// stackFileName reads project and env from a stack file's key, stacksDir<project>/<env>.json[.gz]:
// the project-scoped layout the CLI writes for organization/<project>/<env> names. A backup (.bak)
// or anything else is not one.
func stackFileName(key string) (project, env string, ok bool) {
	rest := strings.TrimPrefix(key, stacksDir)
	rest = strings.TrimSuffix(rest, ".gz")
	rest, isJSON := strings.CutSuffix(rest, ".json")
	project, env, ok = strings.Cut(rest, "/")
	if !isJSON || !ok || project == "" || env == "" || strings.Contains(env, "/") {
		return "", "", false
	}
	return project, env, true
}

// lockPrefix is where the diy backend keeps a stack's lock files.
func lockPrefix(ref stands.StackRef) string {
	return locksDir + ref.Project + "/" + ref.Env + "/"
}

// lockFileStack reads project/env from a lock file's key ("" when it is none).
func lockFileStack(key string) string {
	parts := strings.Split(strings.TrimPrefix(key, locksDir), "/")
	if !strings.HasPrefix(key, locksDir) || len(parts) != 3 || !strings.HasSuffix(parts[2], ".json") {
		return ""
	}
	return parts[0] + "/" + parts[1]
}

// lockFile is what the diy backend writes to a lock file.
type lockFile struct {
	Pid       int       `json:"pid"`
	Username  string    `json:"username"`
	Hostname  string    `json:"hostname"`
	Timestamp time.Time `json:"timestamp"`
}

// historyPrefix is where the diy backend keeps a stack's history, one file per update.
func historyPrefix(ref stands.StackRef) string {
	return historyDir + ref.Project + "/" + ref.Env + "/"
}

// isHistory says whether a key under historyPrefix is an update's record (not its checkpoint copy).
func isHistory(key string) bool { return strings.HasSuffix(key, historyExt) }

// historyEntry is what the engine reads of an update's record: update, refresh, destroy…, and
// succeeded or failed.
type historyEntry struct {
	Kind   string `json:"kind"`
	Result string `json:"result"`
}

// stackFile is the part of a stack's state file the engine reads without the CLI.
type stackFile struct {
	Checkpoint struct {
		Latest *struct {
			Manifest struct {
				Time time.Time `json:"time"`
			} `json:"manifest"`
			Secrets struct { // the health check's decryption (health.go)
				Type  string `json:"type"`
				State struct {
					Salt string `json:"salt"`
				} `json:"state"`
			} `json:"secrets_providers"`
			Resources []struct {
				Type    string         `json:"type"`
				Outputs map[string]any `json:"outputs"`
			} `json:"resources"`
			Pending []json.RawMessage `json:"pending_operations"`
		} `json:"latest"`
	} `json:"checkpoint"`
}
