package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/internal/logging"
	"github.com/stands-engine/stands-reconciler/localrepo"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// engineFlags are the settings every command that runs Pulumi needs. Secrets come from the
// environment or from files named by *_FILE (systemd credentials), never from flags.
type engineFlags struct {
	s                   engine.Settings
	logLevel, logFormat string
}

// The one-shot commands that touch state have no default owner: a stand whose manifest names none
// needs one given ($STAND__USER, --owner), or it would be created under a name, and in a place, its
// author did not choose.
func (f *engineFlags) register(c *settings) { registerEngine(c, &f.s, &f.logLevel, &f.logFormat, "") }

// registerEngine registers the engine's flags and the log's, for the one-shot commands and the daemon.
func registerEngine(c *settings, s *engine.Settings, logLevel, logFormat *string, owner string) {
	fs := c.FS
	ownerFlag(c, &s.Owner, owner)
	fs.StringVar(&s.StateDir, "state-dir", bound(c, "state-dir", "STANDS_STATE_DIR", ".stands"), "folder for local state: the default Pulumi backend, plugins ($STANDS_STATE_DIR)")
	fs.StringVar(&s.Backend, "backend", bound(c, "backend", compat.BackendVariable, ""), "Pulumi backend URL (the daemon's default: file://<state-dir>/pulumi/<owner>; the one-shot commands have none); s3://bucket/<owner>?region=..&endpoint=..&s3ForcePathStyle=true; postgres://user@host:5432/db?sslmode=verify-full (password: $STANDS_DB_PASSWORD_FILE) ($STANDS_BACKEND_URL)")
	fs.StringVar(&s.Pulumi, "pulumi", bound(c, "pulumi", "STANDS_PULUMI_BIN", ""), "the Pulumi CLI, laid out as <root>/bin/pulumi (default: bin/pulumi next to this binary, then PATH) ($STANDS_PULUMI_BIN)")
	fs.StringVar(&s.Cloud, "cloud", bound(c, "cloud", "STANDS_CLOUD", provider.DefaultCloud), "the cloud the stands' servers live in: hetzner ($STANDS_CLOUD)")
	fs.StringVar(&s.Endpoint, "cloud-endpoint", bound(c, "cloud-endpoint", "STANDS_CLOUD_ENDPOINT", ""), "the cloud's API endpoint (default: the cloud's own), e.g. hcloudsim's ($STANDS_CLOUD_ENDPOINT)")
	c.Renamed("cloud-endpoint", "hcloud-endpoint", "HCLOUD_ENDPOINT")
	fs.StringVar(&s.Nodes, "nodes", bound(c, "nodes", "STANDS_NODES", "full"), "node deployment: full (servers, then node setup and app instances over SSH) or skip (servers only) ($STANDS_NODES)")
	fs.StringVar(logLevel, "log-level", bound(c, "log-level", "LOG_LEVEL", "info"), "log level: debug, info, warn, error ($LOG_LEVEL)")
	fs.StringVar(logFormat, "log-format", bound(c, "log-format", "STANDS_LOG_FORMAT", "auto"), "log format: auto (text on a terminal, JSON otherwise), text or json; NO_COLOR turns colours off ($STANDS_LOG_FORMAT)")
	fs.StringVar(&s.Configsets, "configset-dir", bound(c, "configset-dir", "STANDS_CONFIGSET_DIR", ""), "folder of the rendered files sent to each stand (0700/0600; they hold secrets); default <state-dir>/configsets ($STANDS_CONFIGSET_DIR, $STAND__PATH_TO_CONFIGSET)")
	fs.DurationVar(&s.LockLease, "lock-lease", bound(c, "lock-lease", "STANDS_LOCK_LEASE", time.Duration(0)), "treat another host's stack lock older than this as abandoned (0: always wait) ($STANDS_LOCK_LEASE)")
}

// engine is the engine for owner, logging to std.err. The one-shot commands keep state only where
// they are told to: a folder on this machine (the engine's default, for the daemon) would hold stacks
// nobody else can see — a CI job's servers with their state lost with its runner.
func (f *engineFlags) engine(std stdio, getenv env, owner string, tune ...func(*engine.Config)) (*engine.Engine, string, error) {
	if err := logging.Check(f.logLevel, f.logFormat); err != nil {
		return nil, "", err
	}
	// Everything missing at once, each by the Stands Engine's name and ours: its users set theirs.
	var missing []error
	if owner == "" {
		missing = append(missing, errors.New("no owner: give $STAND__USER as for the Stands Engine, or --owner ($STANDS_OWNER)"))
	}
	if f.s.Backend == "" {
		missing = append(missing, errNoBackend)
	}
	for _, c := range []struct{ ours, what string }{{"HCLOUD_TOKEN", "no Hetzner token"}, {"STANDS_PASSPHRASE", "no passphrase"}} {
		if getenv(c.ours) == "" && getenv(c.ours+"_FILE") == "" {
			missing = append(missing, fmt.Errorf("%s: set $%s as for the Stands Engine, or $%s (or $%s_FILE)", c.what, compat.Theirs(c.ours), c.ours, c.ours))
		}
	}
	if len(missing) > 0 {
		return nil, "", errors.Join(missing...)
	}
	return engine.FromSettings(f.s, getenv, owner, logging.NewWithFormat(std.err, f.logLevel, f.logFormat), tune...)
}

// errNoBackend: the one-shot commands have no default backend.
var errNoBackend = errors.New("no state backend chosen: set $S3__BUCKET (with $STAND__USER, and $S3__REGION, $S3__ENDPOINT) as for the Stands Engine, " +
	"or --backend ($" + compat.BackendVariable + "); state in a folder on this machine only when chosen: --backend file:///PATH (docs/migrating.md)")

// loadOne validates the single stand a command works on.
func loadOne(ctx context.Context, path, owner string, roots localrepo.Roots, std stdio, getenv env) (*resultAt, int) {
	results, code := preflightPaths(ctx, []string{path}, owner, roots, std, getenv)
	if code != exitOK {
		return nil, code
	}
	if len(results) != 1 {
		fmt.Fprintf(std.err, "%s holds %d stands; give one stand.yml or stand folder\n", path, len(results))
		return nil, exitUsage
	}
	return results[0], exitOK
}

func runApply(ctx context.Context, args []string, std stdio, getenv env) int {
	return applyOrPreview(ctx, "apply", args, std, getenv)
}

// standInput is what apply, preview and adopt act on: the one stand at path, validated and hashed,
// and the engine for its owner (with its key file, if any).
func standInput(ctx context.Context, op, path string, ef *engineFlags, roots localrepo.Roots, keyFile string, std stdio, getenv env) (*engine.Engine, stands.Input, int) {
	r, code := loadOne(ctx, path, ef.s.Owner, roots, std, getenv)
	if code != exitOK {
		return nil, stands.Input{}, code
	}
	eng, pass, err := ef.engine(std, getenv, r.Stand.Owner, withKeyFile(keyFile))
	if err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", op, err)
		return nil, stands.Input{}, exitError
	}
	hash, err := manifest.SpecHash(r.fsys, r.Stand, r.Secrets, pass)
	if err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", op, err)
		return nil, stands.Input{}, exitError
	}
	return eng, stands.Input{FS: r.fsys, Stand: r.Stand, Secrets: r.Secrets, SpecHash: hash}, exitOK
}

// withKeyFile points the engine at the stand's key file (the Stands Engine's STAND__PATH_TO_KEY), if any.
func withKeyFile(path string) func(*engine.Config) {
	return func(c *engine.Config) {
		if path == "" {
			return
		}
		c.KeyFile = path
		if abs, err := filepath.Abs(path); err == nil {
			c.KeyFile = abs
		}
	}
}

// runCreate is apply under the Stands Engine's name, so its users' scripts run unchanged.
func runCreate(ctx context.Context, args []string, std stdio, getenv env) int {
	return applyOrPreview(ctx, "create", args, std, getenv)
}

func runPreview(ctx context.Context, args []string, std stdio, getenv env) int {
	return applyOrPreview(ctx, "preview", args, std, getenv)
}

func applyOrPreview(ctx context.Context, op string, args []string, std stdio, getenv env) int {
	fs := newFlags(op, op+" [flags] PATH\n\nPATH is one stand: its stand.yml or its folder. Secrets: HCLOUD_TOKEN, STANDS_PASSPHRASE (or *_FILE),\nSECRET_<NAME> for the manifest's !secret references.", std)
	conf := newSettings(fs, getenv)
	var ef engineFlags
	ef.register(conf)
	force := fs.Bool("force", false, "run pulumi up even when the stand's spec hash is unchanged")
	outDir := fs.String("output-dir", bound(conf, "output-dir", compat.OutputDirVariable, ""), "also write the full connection record to DIR/<id_stand>.json (mode 0600) ($"+compat.OutputDirVariable+"; $OUTPUT__FILE=true with $OUTPUT__FILE_PATH)")
	showSecrets := fs.Bool("show-secrets", bound(conf, "show-secrets", "OUTPUT__CONSOLE_SECRETS", false), "print the connection record unmasked ($OUTPUT__CONSOLE_SECRETS=true)")
	roots := localrepo.Roots{}
	resourceFlag(fs, roots)
	keyFile := fs.String("key-file", bound(conf, "key-file", "STANDS_SSH_KEY_PATH", ""), "the stand's SSH private key: used for a new stand, written there when missing (0600), refused when it differs from the key in the stand's state ($STANDS_SSH_KEY_PATH, $STAND__PATH_TO_KEY)")
	printRecord := fs.Bool("print-record", bound(conf, "print-record", "OUTPUT__CONSOLE", true), "print the connection record on stdout; false: nothing ($OUTPUT__CONSOLE)")
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.Env()
	if fs.NArg() != 1 {
		fmt.Fprintf(std.err, "%s: give exactly one PATH\n", op)
		return exitUsage
	}
	eng, in, code := standInput(ctx, op, fs.Arg(0), &ef, roots, *keyFile, std, getenv)
	if code != exitOK {
		return code
	}
	if op == "preview" {
		res, err := eng.Preview(ctx, in)
		if errors.Is(err, engine.ErrNoStack) {
			res, err = eng.PreviewNew(ctx, in) // a new stand: planned without creating its stack
		}
		if err != nil {
			fail(std, "preview", scrubbed{err, in.Secrets})
			return exitError
		}
		return writeRecord(std, map[string]any{"id_stand": res.StandID, "operation": "preview", "changes": res.Changes, "steps": res.Steps})
	}
	res, err := eng.Apply(ctx, in, *force)
	if err != nil {
		fail(std, "apply", scrubbed{err, in.Secrets})
		return exitError
	}
	if *outDir != "" && res.Connection != nil {
		if err := engine.WriteConnectionFile(*outDir, res.StandID, res.Connection); err != nil {
			fmt.Fprintf(std.err, "apply: %v\n", err)
			return exitError
		}
	}
	if !*printRecord {
		return exitOK
	}
	record := res.Masked
	if *showSecrets {
		record = json.RawMessage(res.Connection) // asked for: --show-secrets
	}
	if record == nil {
		record, _ = json.Marshal(map[string]string{"id_stand": res.StandID})
	}
	fmt.Fprintf(std.out, "%s\n", record)
	return exitOK
}

func runDestroy(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("destroy", "destroy [flags] ID-or-PATH\n\nID is <owner>_<project>_<env>; a PATH (stand.yml or folder) is read only for its id.\nThe manifest's secrets are not needed, nor SSH access to the servers.", std)
	conf := newSettings(fs, getenv)
	var ef engineFlags
	ef.register(conf)
	roots := localrepo.Roots{}
	resourceFlag(fs, roots)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.Env()
	if fs.NArg() != 1 {
		fmt.Fprintln(std.err, "destroy: give exactly one stand id or PATH")
		return exitUsage
	}
	owner, project, envName, err := localrepo.Identity(fs.Arg(0), ef.s.Owner, roots)
	if err != nil {
		fmt.Fprintf(std.err, "destroy: %v\n", err)
		var rep *manifest.Report
		if errors.As(err, &rep) {
			return exitError // the manifest's identity could not be read: not a bad command line
		}
		return exitUsage
	}
	eng, _, err := ef.engine(std, getenv, owner)
	if err != nil {
		fmt.Fprintf(std.err, "destroy: %v\n", err)
		return exitError
	}
	res, err := eng.Destroy(ctx, stands.StackRef{Project: project, Env: envName})
	if err != nil {
		fail(std, "destroy", err)
		return exitError
	}
	return writeRecord(std, map[string]any{"id_stand": manifest.StandID(owner, project, envName), "operation": "destroy", "status": "success", "changed": res.Changed})
}

func runOrphans(ctx context.Context, args []string, std stdio, getenv env) int {
	return runReport(ctx, "orphans", "Lists servers that carry the reconciler's labels but belong to no stack of the owner's backend.\nNothing is deleted.",
		"orphans", args, std, getenv, func(ctx context.Context, e *engine.Engine) (any, error) {
			o, err := e.Orphans(ctx)
			if o == nil {
				o = []engine.Orphan{}
			}
			return o, err
		})
}

func runInventory(ctx context.Context, args []string, std stdio, getenv env) int {
	return runReport(ctx, "inventory", "Lists every stack of the owner's backend: owned or foreign, spec hash, pending operations, locks.",
		"stacks", args, std, getenv, func(ctx context.Context, e *engine.Engine) (any, error) {
			s, err := e.Inventory(ctx)
			if s == nil {
				s = []stands.StackInfo{}
			}
			return s, err
		})
}

// runReport runs a read-only engine query and prints it as one record under key.
func runReport(ctx context.Context, name, about, key string, args []string, std stdio, getenv env,
	query func(context.Context, *engine.Engine) (any, error)) int {
	fs := newFlags(name, name+" [flags]\n\n"+about, std)
	conf := newSettings(fs, getenv)
	var ef engineFlags
	ef.register(conf)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.Env()
	eng, _, err := ef.engine(std, getenv, ef.s.Owner)
	if err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", name, err)
		return exitError
	}
	v, err := query(ctx, eng)
	if err != nil {
		fail(std, name, err)
		return exitError
	}
	return writeRecord(std, map[string]any{"operation": name, "status": "success", key: v})
}

// fail reports an engine error with the reason the reconciler would record for it.
// scrubbed prints an error without the stand's secret values (a node's stderr can hold them) and
// keeps it classifiable.
type scrubbed struct {
	err     error
	secrets manifest.Secrets
}

func (s scrubbed) Error() string { return s.secrets.Scrub(s.err.Error()) }
func (s scrubbed) Unwrap() error { return s.err }

func fail(std stdio, op string, err error) {
	c := reason.Of(err)
	fmt.Fprintf(std.err, "%s: %v [%s, %s]\n", op, err, c, c.Kind())
}
