// Package engine drives one stand's infrastructure through the Pulumi Automation API: an inline
// program per stand, the `stands` provider (package engine/provider) served by our own binary, a
// diy backend (file:// by default, s3:// in production) with the passphrase secrets provider.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/sig"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Config is what the engine needs to reach Pulumi, its backend and the cloud.
type Config struct {
	PulumiBin  string // the pulumi CLI; its folder is handed to the Automation API
	BackendURL string // file://<state-dir>/pulumi/<owner>, s3://bucket/owner?region=… or postgres://user@host/db?sslmode=…
	// DBPassword, when set, is asked for a postgres:// backend's password (never in the URL), again
	// before each operation so a rotated credential needs no restart (pgpass.go).
	DBPassword func() (string, error)
	Passphrase string // secrets provider passphrase (also keys the spec hash)
	// Cloud names the cloud the servers live in ("": provider.DefaultCloud); Clouds are those beside
	// the shipped ones that can be named (a test's second cloud: the provider binary then knows it
	// too, provider.WithCloud).
	Cloud      string
	Clouds     provider.Clouds
	CloudToken string
	// CloudTokenFunc, when set, is asked for the token at every operation instead of CloudToken,
	// so a rotated credential file needs no restart.
	CloudTokenFunc func() (string, error)
	CloudEndpoint  string // empty: the cloud's own
	ProviderBin    string // executable that serves the provider when run as pulumi-resource-stands
	WorkDir        string // plugin link and Pulumi home live here
	Env            map[string]string
	Log            *slog.Logger
	// SkipNodes is servers-only mode: servers are provisioned and everything is rendered, but nothing
	// is done over SSH (docs/architecture.md#node-work); the default is full node deployment.
	SkipNodes bool
	// ConfigsetDir, when set, receives each applied stand's rendered files (docs/stands-engine.md#configsets):
	// <ConfigsetDir>/<stand-id>/<app>--<instance>/…, folders 0700, files 0600.
	ConfigsetDir string
	// LockLease is how old another host's stack lock must be before it counts as abandoned; 0 means
	// never (such locks are always waited for).
	LockLease time.Duration
	// LeaseCheck, with several replicas, judges a stack lock whose holder ran under a lease by that
	// lease alone (fence.go).
	LeaseCheck LeaseCheck
	// KeyFile, when set, is the stand's SSH private key on disk (the Stands Engine's STAND__PATH_TO_KEY, for
	// one-shot commands on one stand): a new stand is created with the key the file holds, or, when
	// there is no file, with a new one written there (0600); for a stand that has one in its state,
	// a missing file receives it and a file holding another key is refused (stand_key.go).
	KeyFile string
	// Metrics, when set, gets the engine's metrics (the Pulumi CLI processes it started and fenced).
	Metrics prometheus.Registerer
}

// Engine applies and destroys stands.
type Engine struct {
	cfg       Config
	cmd       auto.PulumiCommand
	pluginDir string
	home      string
	log       *slog.Logger
	stacks    *stackLocks
	inv       *inventoryCache
	crypters  *sync.Map // a stack's passphrase salt → its config.Decrypter (health.go)
	pg        *pgBackend
}

// New checks the configuration and prepares the plugin folder: a link named pulumi-resource-stands
// to the provider executable, declared to the engine as a local plugin (no download, no PATH lookup).
func New(cfg Config) (*Engine, error) {
	if cfg.PulumiBin == "" || cfg.BackendURL == "" || cfg.Passphrase == "" || cfg.WorkDir == "" {
		return nil, errors.New("engine: PulumiBin, BackendURL, Passphrase and WorkDir are required")
	}
	if cfg.ProviderBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		cfg.ProviderBin = exe
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	var err error
	if cfg.BackendURL, err = checkBackendURL(cfg); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, pluginDir: filepath.Join(cfg.WorkDir, "plugins"), home: filepath.Join(cfg.WorkDir, "pulumi-home"), log: cfg.Log, stacks: &stackLocks{}, inv: &inventoryCache{}, crypters: &sync.Map{}, pg: &pgBackend{}}
	for _, d := range []string{e.pluginDir, e.home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	link := filepath.Join(e.pluginDir, provider.BinaryName)
	if cur, err := os.Readlink(link); err != nil || cur != cfg.ProviderBin {
		_ = os.Remove(link)
		if err := os.Symlink(cfg.ProviderBin, link); err != nil {
			return nil, fmt.Errorf("link provider: %w", err)
		}
	}
	// The Automation API runs <root>/bin/pulumi and checks its version.
	if filepath.Base(filepath.Dir(cfg.PulumiBin)) != "bin" || filepath.Base(cfg.PulumiBin) != "pulumi" {
		return nil, fmt.Errorf("engine: the Pulumi CLI must be at <root>/bin/pulumi, not %s", cfg.PulumiBin)
	}
	if err := e.writePassfile(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	removeOrphanWorkspaces(cfg.WorkDir, e.log)
	c := cli{bin: cfg.PulumiBin, env: func() []string { return childEnv(cfg.PulumiBin) }, keptLogs: filepath.Join(cfg.WorkDir, "pulumi-logs"),
		metrics: newMetrics(cfg.Metrics)}
	if c.version, err = e.cliVersion(c); err != nil {
		return nil, err
	}
	c.hold, c.log = e.holdFor, e.log
	e.cmd = c
	return e, nil
}

// fqn is the stack's fully qualified name on a diy backend.
func fqn(r stands.StackRef) string {
	return auto.FullyQualifiedStackName("organization", r.Project, r.Env)
}

// Output names the program exports.
const (
	OutOwnedBy    = "ownedBy" // the ownership mark: provider.ManagedByValue
	OutStandID    = "standId"
	OutSpecHash   = "specHash"
	OutPrint      = "print" // the reviewed print of the spec (stands.Input.Print), when there is one
	OutNodes      = "nodes"
	OutConnection = "connection" // secret
	// OutConnectionPublic is the record a status shows, made without any secret's value.
	OutConnectionPublic = "connectionPublic"
	OutSSHPrivateKey    = "sshPrivateKey"
	OutSSHPublicKey     = "sshPublicKey"
	OutNodesMode        = "nodesMode"
	OutProtect          = "protect" // stand.protect of the last apply: the destroy guard reads it when the manifest is gone
)

// envVars is what the engine sets for the Pulumi CLI of the workspace in dir, on top of childEnv.
// The passphrase is a file there: no credential is ever in a child's environment or command line.
func (e *Engine) envVars(dir string) (map[string]string, error) {
	pass, err := secretFile(dir, "passphrase", e.cfg.Passphrase)
	if err != nil {
		return nil, err
	}
	if err := e.writePassfile(); err != nil {
		return nil, err
	}
	env := map[string]string{
		"PULUMI_CONFIG_PASSPHRASE_FILE":               pass,
		"PULUMI_HOME":                                 filepath.Join(dir, pulumiHome),
		"PULUMI_SKIP_UPDATE_CHECK":                    "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		"PULUMI_BACKEND_URL":                          e.cfg.BackendURL,
	}
	for k, v := range e.cfg.Env {
		env[k] = v
	}
	return env, nil
}

// stack opens (or, with create, creates) a stand's stack with an inline program and sets the
// provider's configuration.
func (e *Engine) stack(ctx context.Context, ref stands.StackRef, run pulumi.RunFunc, create bool) (auto.Stack, error) {
	proj := workspace.Project{
		Name:    tokens.PackageName(ref.Project),
		Runtime: workspace.NewProjectRuntimeInfo("go", nil),
		Backend: &workspace.ProjectBackend{URL: e.cfg.BackendURL},
		Plugins: &workspace.Plugins{Providers: []workspace.PluginOptions{{Name: provider.Name, Path: e.pluginDir}}},
	}
	dir, wsOpts, err := e.workspace(ctx)
	if err != nil {
		return auto.Stack{}, err
	}
	opts := append([]auto.LocalWorkspaceOption{auto.Project(proj), auto.SecretsProvider("passphrase"), auto.Program(run)}, wsOpts...)
	lw, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		return auto.Stack{}, fmt.Errorf("workspace of %s/%s: %w", ref.Project, ref.Env, err)
	}
	ws := &stackWorkspace{Workspace: lw, e: e, ref: ref}
	var st auto.Stack
	if create && !ws.exists(ctx) {
		st, err = auto.NewStack(ctx, fqn(ref), ws)
		if auto.IsCreateStack409Error(err) {
			// Another process created the stack between our look and our create.
			st, err = auto.SelectStack(ctx, fqn(ref), ws)
		}
	} else {
		st, err = auto.SelectStack(ctx, fqn(ref), ws)
	}
	if err != nil {
		return auto.Stack{}, err
	}
	token, err := e.cloudToken()
	if err != nil {
		return auto.Stack{}, err
	}
	// The token of the moment (a rotated credential file is read again), as a file the plugin reads.
	tokenFile, err := secretFile(dir, "cloud-token", token)
	if err != nil {
		return auto.Stack{}, err
	}
	st.Workspace().SetEnvVar(provider.EnvTokenFile, tokenFile)
	st.Workspace().SetEnvVar(provider.EnvCloud, e.cfg.Cloud)
	if e.cfg.CloudEndpoint != "" {
		st.Workspace().SetEnvVar(provider.EnvEndpoint, e.cfg.CloudEndpoint)
	}
	return st, nil
}

func (e *Engine) cloudToken() (string, error) {
	if e.cfg.CloudTokenFunc == nil {
		return e.cfg.CloudToken, nil
	}
	t, err := e.cfg.CloudTokenFunc()
	if err != nil {
		return "", fmt.Errorf("the cloud's token: %w", err)
	}
	return t, nil
}

// progress turns engine events into log records — one per resource step, plus warnings and errors —
// and counts the steps on the stand's own resources (not the stack or provider bookkeeping) by
// operation: the change summary. Call the returned function once the operation has returned.
func (e *Engine) progress(log *slog.Logger) (chan events.EngineEvent, func() map[string]int) {
	ch, wait := e.progressSteps(log)
	return ch, func() map[string]int {
		changes, _ := wait()
		return changes
	}
}

// progressSteps is progress that also returns the steps on the stand's servers, for plans.
func (e *Engine) progressSteps(log *slog.Logger) (chan events.EngineEvent, func() (map[string]int, []stands.Step)) {
	ch := make(chan events.EngineEvent)
	done, stop := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	changes := map[string]int{}
	var steps []stands.Step
	go func() {
		defer close(done)
		for {
			var ev events.EngineEvent
			var ok bool
			select {
			case ev, ok = <-ch:
				if !ok {
					return
				}
			case <-stop:
				return
			}
			e.logEvent(log, ev, func(m apitype.StepEventMetadata) {
				mu.Lock()
				changes[string(m.Op)]++
				if m.Op != "same" && m.Op != "refresh" {
					steps = append(steps, stepOf(m))
				}
				mu.Unlock()
			})
		}
	}()
	return ch, func() (map[string]int, []stands.Step) {
		// The Automation API closes the channel only when the CLI streamed its events to the end; a
		// CLI that failed before it connected (a locked stack, say) never does.
		select {
		case <-done:
		case <-time.After(eventGrace):
			close(stop)
			<-done
		}
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(changes), slices.Clone(steps)
	}
}

func stepOf(m apitype.StepEventMetadata) stands.Step {
	st := stands.Step{Op: string(m.Op), Node: lastURNPart(m.URN)}
	str := func(s *apitype.StepEventStateMetadata, k string) string {
		if s == nil {
			return ""
		}
		v, _ := s.Inputs[k].(string)
		return v
	}
	if m.Type != provider.ServerType {
		st.Kind = strings.ToLower(m.Type[strings.LastIndex(m.Type, ":")+1:])
		if m.Type == provider.InstanceType {
			st.Instance, st.Node = st.Node, str(m.New, "node")
			if st.Node == "" {
				st.Node = str(m.Old, "node")
			}
		}
		st.ServerName = str(m.New, "serverName")
		if st.ServerName == "" {
			st.ServerName = str(m.Old, "serverName")
		}
		st.Changed = strings.Join(m.Diffs, ",")
		st.ConfigUnknown = str(m.New, "configHash") == sig.UnknownStringValue
		st.Drift = str(m.Old, "drift")
		return st
	}
	st.Changed = strings.Join(m.Diffs, ",")
	st.ServerName, st.ServerType, st.Location = str(m.New, "name"), str(m.New, "serverType"), str(m.New, "location")
	st.OldServerType, st.OldLocation = str(m.Old, "serverType"), str(m.Old, "location")
	if st.ServerName == "" {
		st.ServerName = str(m.Old, "name")
	}
	return st
}

// eventGrace is how long the event stream may lag behind the end of an operation.
const eventGrace = 3 * time.Second

func (e *Engine) logEvent(log *slog.Logger, ev events.EngineEvent, count func(apitype.StepEventMetadata)) {
	switch {
	case ev.ResourcePreEvent != nil:
		m := ev.ResourcePreEvent.Metadata
		if !strings.HasPrefix(m.Type, provider.Name+":") {
			return
		}
		// A replace also emits create-replacement and delete-replaced steps; count it once.
		if m.Op != "create-replacement" && m.Op != "delete-replaced" {
			count(m)
		}
		if m.Op != "same" {
			log.Info("resource step", "step", string(m.Op), "type", m.Type, "name", lastURNPart(m.URN), "planning", ev.ResourcePreEvent.Planning)
		}
	case ev.ResOutputsEvent != nil:
		m := ev.ResOutputsEvent.Metadata
		if strings.HasPrefix(m.Type, provider.Name+":") && m.Op != "same" && !ev.ResOutputsEvent.Planning {
			log.Info("resource done", "step", string(m.Op), "type", m.Type, "name", lastURNPart(m.URN))
		}
	case ev.ResOpFailedEvent != nil:
		m := ev.ResOpFailedEvent.Metadata
		log.Warn("resource step failed", "step", string(m.Op), "name", lastURNPart(m.URN))
	case ev.DiagnosticEvent != nil:
		d := ev.DiagnosticEvent
		switch {
		case d.Severity == "error" || d.Severity == "warning":
			log.Warn("pulumi "+d.Severity, "name", lastURNPart(d.URN), "message", strings.TrimSpace(d.Message))
		case d.Severity == "info" && strings.Contains(d.URN, "::"+provider.Name+":"):
			// Progress of node work from our provider: long steps (cloud-init, pulls, hooks).
			log.Info("node work", "name", lastURNPart(d.URN), "message", strings.TrimSpace(d.Message))
		}
	}
}

func lastURNPart(urn string) string {
	if i := strings.LastIndex(urn, "::"); i >= 0 {
		return urn[i+2:]
	}
	return urn
}

// keyPair returns the stand's SSH key pair: the one kept (as a secret output) in its stack, or, for a
// new stand, the key file's (Config.KeyFile) or a new ed25519 pair.
func (e *Engine) keyPair(outs auto.OutputMap, readOnly bool) (private, public string, err error) {
	if v, ok := outs[OutSSHPrivateKey]; ok {
		if s, ok := v.Value.(string); ok && s != "" {
			signer, err := ssh.ParsePrivateKey([]byte(s))
			if err != nil {
				return "", "", fmt.Errorf("parse the stand's SSH key from its stack: %w", err)
			}
			public = authorized(signer.PublicKey())
			if e.cfg.KeyFile != "" {
				err = keepKeyFile(e.cfg.KeyFile, s, public, readOnly)
			}
			return s, public, err
		}
	}
	if e.cfg.KeyFile != "" {
		return newKeyFromFile(e.cfg.KeyFile, readOnly)
	}
	return newEd25519("stands-reconciler")
}

// cliVersion is the CLI's version, which the Automation API needs. The Automation API's own command
// would run `pulumi version` with this process's whole environment: it is read through cli, once
// per binary: a restart, or a one-shot command, whose CLI is the one of the last start (same path,
// size and modification time, recorded in the work folder) starts no Pulumi process for it.
func (e *Engine) cliVersion(c cli) (semver.Version, error) {
	st, err := os.Stat(c.bin)
	if err != nil {
		return semver.Version{}, fmt.Errorf("pulumi CLI %s: %w", c.bin, err)
	}
	stamp := fmt.Sprintf("%s %d %d", c.bin, st.Size(), st.ModTime().UnixNano())
	record := filepath.Join(e.cfg.WorkDir, "pulumi-version")
	if data, err := os.ReadFile(record); err == nil {
		if seen, ver, ok := strings.Cut(strings.TrimSpace(string(data)), "\t"); ok && seen == stamp {
			if v, err := semver.ParseTolerant(ver); err == nil {
				return v, nil
			}
		}
	}
	out, _, _, err := c.Run(context.Background(), "", nil, nil, nil, []string{"PULUMI_HOME=" + e.home}, "version")
	if err != nil {
		return semver.Version{}, fmt.Errorf("pulumi CLI %s: %w", c.bin, err)
	}
	v, err := semver.ParseTolerant(strings.TrimSpace(out))
	if err != nil {
		return semver.Version{}, fmt.Errorf("pulumi CLI %s: version %q: %w", c.bin, strings.TrimSpace(out), err)
	}
	// Not kept is only slower: the next start asks the CLI again.
	_ = os.WriteFile(record, []byte(stamp+"\t"+v.String()+"\n"), 0o600)
	return v, nil
}
