package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/logging"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// engineFlags are the settings every command that runs Pulumi needs. Secrets come from the
// environment or from files named by *_FILE (systemd credentials), never from flags.
type engineFlags struct {
	owner, stateDir, backend, pulumi, endpoint, nodes, logLevel, logFormat, configsets string
	lockLease                                                                          time.Duration
}

func (f *engineFlags) register(c *settings) {
	fs := c.fs
	ownerFlag(c, &f.owner)
	fs.StringVar(&f.stateDir, "state-dir", bound(c, "state-dir", "STANDS_STATE_DIR", ".stands"), "folder for local state: the default Pulumi backend, plugins ($STANDS_STATE_DIR)")
	fs.StringVar(&f.backend, "backend", bound(c, "backend", "STANDS_BACKEND_URL", ""), "Pulumi backend URL; default file://<state-dir>/pulumi/<owner>; s3://bucket/<owner>?region=..&endpoint=..&s3ForcePathStyle=true; postgres://user@host:5432/db?sslmode=verify-full (password: $STANDS_DB_PASSWORD_FILE) ($STANDS_BACKEND_URL)")
	fs.StringVar(&f.pulumi, "pulumi", bound(c, "pulumi", "STANDS_PULUMI_BIN", ""), "the Pulumi CLI, laid out as <root>/bin/pulumi (default: bin/pulumi next to this binary, then PATH) ($STANDS_PULUMI_BIN)")
	fs.StringVar(&f.endpoint, "hcloud-endpoint", bound(c, "hcloud-endpoint", "HCLOUD_ENDPOINT", ""), "Hetzner Cloud API endpoint, e.g. hcloudsim's ($HCLOUD_ENDPOINT)")
	fs.StringVar(&f.nodes, "nodes", bound(c, "nodes", "STANDS_NODES", "full"), "node deployment: full (servers, then node setup and app instances over SSH) or skip (servers only) ($STANDS_NODES)")
	fs.StringVar(&f.logLevel, "log-level", bound(c, "log-level", "LOG_LEVEL", "info"), "log level: debug, info, warn, error ($LOG_LEVEL)")
	fs.StringVar(&f.logFormat, "log-format", bound(c, "log-format", "STANDS_LOG_FORMAT", "auto"), "log format: auto (text on a terminal, JSON otherwise), text or json; NO_COLOR turns colours off ($STANDS_LOG_FORMAT)")
	fs.StringVar(&f.configsets, "configset-dir", bound(c, "configset-dir", "STANDS_CONFIGSET_DIR", ""), "folder of the rendered files sent to each stand (0700/0600; they hold secrets); default <state-dir>/configsets ($STANDS_CONFIGSET_DIR, $STAND__PATH_TO_CONFIGSET)")
	fs.DurationVar(&f.lockLease, "lock-lease", bound(c, "lock-lease", "STANDS_LOCK_LEASE", time.Duration(0)), "treat another host's stack lock older than this as abandoned (0: always wait) ($STANDS_LOCK_LEASE)")
}

// checkLog refuses a log level or format the logger does not know.
func (f *engineFlags) checkLog() error {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, f.logLevel) {
		return fmt.Errorf("--log-level=%s: want debug, info, warn or error", f.logLevel)
	}
	if !slices.Contains(logging.Formats, f.logFormat) {
		return fmt.Errorf("--log-format=%s: want auto, text or json", f.logFormat)
	}
	return nil
}

func (f *engineFlags) logger(w io.Writer) *slog.Logger {
	return logging.NewWithFormat(w, f.logLevel, f.logFormat)
}

func (f *engineFlags) engine(std stdio, getenv env, owner string, tune ...func(*engine.Config)) (*engine.Engine, string, error) {
	if f.nodes != "skip" && f.nodes != "full" {
		return nil, "", fmt.Errorf("--nodes=%s: want full or skip", f.nodes)
	}
	if err := f.checkLog(); err != nil {
		return nil, "", err
	}
	pass, err := credential.Read(getenv, "STANDS_PASSPHRASE")
	if err != nil {
		return nil, "", err
	}
	token, err := credential.Read(getenv, "HCLOUD_TOKEN")
	if err != nil {
		return nil, "", err
	}
	bin, err := f.pulumiBin()
	if err != nil {
		return nil, "", err
	}
	stateDir, err := filepath.Abs(f.stateDir)
	if err != nil {
		return nil, "", err
	}
	backend := f.backend
	if backend == "" {
		dir := filepath.Join(stateDir, "pulumi", owner)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", fmt.Errorf("create backend folder: %w", err)
		}
		backend = "file://" + dir
	}
	cfg := engine.Config{PulumiBin: bin, BackendURL: backend, Passphrase: pass, HcloudToken: token,
		HcloudEndpoint: f.endpoint, WorkDir: stateDir, Log: f.logger(std.err), LockLease: f.lockLease,
		SkipNodes: f.nodes == "skip", ConfigsetDir: filepath.Join(stateDir, "configsets")}
	if f.configsets != "" {
		if cfg.ConfigsetDir, err = filepath.Abs(f.configsets); err != nil {
			return nil, "", err
		}
	}
	if dbPassword(getenv) {
		// read at each use: a rotated credential file needs no restart
		cfg.DBPassword = func() (string, error) { return credential.Read(getenv, "STANDS_DB_PASSWORD") }
	}
	for _, t := range tune {
		t(&cfg)
	}
	e, err := engine.New(cfg)
	if errors.Is(err, engine.ErrPasswordInURL) {
		err = fmt.Errorf("--backend %s holds a password: remove it and set $STANDS_DB_PASSWORD_FILE (or credentials.db-password in --config)", logging.RedactPassword(backend))
	}
	return e, pass, err
}

// dbPassword says whether a database password is configured; without one, lib/pq's own ways apply
// (a pgpass file named in the URL, PGPASSFILE, ~/.pgpass, or none for trust and certificates). An
// empty credential file is none: the unit loads db-password whether or not the backend needs one.
func dbPassword(getenv env) bool {
	v, err := credential.Read(getenv, "STANDS_DB_PASSWORD")
	return err == nil && v != ""
}

func (f *engineFlags) pulumiBin() (string, error) {
	if f.pulumi != "" {
		return filepath.Abs(f.pulumi)
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "pulumi"); exists(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("pulumi")
	if err != nil {
		return "", errors.New("no Pulumi CLI: build it with `make tools` (bin/pulumi) or pass --pulumi")
	}
	return p, nil
}

// loadOne validates the single stand a command works on.
func loadOne(ctx context.Context, path, owner string, roots resourceRoots, std stdio, getenv env) (*resultAt, int) {
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
func standInput(ctx context.Context, op, path string, ef *engineFlags, roots resourceRoots, keyFile string, std stdio, getenv env) (*engine.Engine, stands.Input, int) {
	r, code := loadOne(ctx, path, ef.owner, roots, std, getenv)
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

// withKeyFile points the engine at the stand's key file (the seed's STAND__PATH_TO_KEY), if any.
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
	outDir := fs.String("output-dir", bound(conf, "output-dir", outputDirVariable, ""), "also write the full connection record to DIR/<id_stand>.json (mode 0600) ($"+outputDirVariable+"; $OUTPUT__FILE=true with $OUTPUT__FILE_PATH)")
	showSecrets := fs.Bool("show-secrets", bound(conf, "show-secrets", "OUTPUT__CONSOLE_SECRETS", false), "print the connection record unmasked ($OUTPUT__CONSOLE_SECRETS=true)")
	roots := resourceRoots{}
	resourceFlag(fs, roots)
	keyFile := fs.String("key-file", bound(conf, "key-file", "STANDS_SSH_KEY_PATH", ""), "the stand's SSH private key: used for a new stand, written there when missing (0600), refused when it differs from the key in the stand's state ($STANDS_SSH_KEY_PATH, $STAND__PATH_TO_KEY)")
	printRecord := fs.Bool("print-record", bound(conf, "print-record", "OUTPUT__CONSOLE", true), "print the connection record on stdout; false: nothing ($OUTPUT__CONSOLE)")
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.env()
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
		if err := writeConnectionFile(*outDir, res); err != nil {
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

// writeConnectionFile writes the full record, indented, readable by its owner only (seed §11).
func writeConnectionFile(dir string, res *stands.Result) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create output folder: %w", err)
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(orderedRecord(res.Connection)); err != nil {
		return err
	}
	p := filepath.Join(dir, res.StandID+".json")
	if err := os.WriteFile(p, []byte(buf.String()), 0o600); err != nil {
		return fmt.Errorf("write connection file: %w", err)
	}
	return os.Chmod(p, 0o600)
}

// orderedRecord keeps the record's key order when it is indented.
type orderedRecord json.RawMessage

func (o orderedRecord) MarshalJSON() ([]byte, error) { return o, nil }

func runDestroy(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("destroy", "destroy [flags] ID-or-PATH\n\nID is <owner>_<project>_<env>; a PATH (stand.yml or folder) is read only for its id.\nThe manifest's secrets are not needed, nor SSH access to the servers.", std)
	conf := newSettings(fs, getenv)
	var ef engineFlags
	ef.register(conf)
	roots := resourceRoots{}
	resourceFlag(fs, roots)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.env()
	if fs.NArg() != 1 {
		fmt.Fprintln(std.err, "destroy: give exactly one stand id or PATH")
		return exitUsage
	}
	owner, project, envName, err := destroyTarget(fs.Arg(0), ef.owner, roots)
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

// destroyTarget reads <owner>_<project>_<env>, or the identity of the stand.yml at a path without
// resolving its secrets or files.
func destroyTarget(arg, defaultOwner string, roots resourceRoots) (owner, project, env string, err error) {
	if st, statErr := os.Stat(arg); statErr == nil {
		file := arg
		if st.IsDir() {
			file = filepath.Join(arg, manifest.StandFile)
		}
		abs, err := filepath.Abs(file)
		if err != nil {
			return "", "", "", err
		}
		root := findRoot(filepath.Dir(abs))
		rel, err := filepath.Rel(root, abs)
		if err != nil {
			return "", "", "", err
		}
		fsys, err := roots.repo(root)
		if err != nil {
			return "", "", "", err
		}
		id, err := manifest.ReadIdentity(fsys, filepath.ToSlash(rel), manifest.LoadOptions{DefaultOwner: defaultOwner})
		if err != nil {
			return "", "", "", err
		}
		return id.Owner, id.Project, id.Env, nil
	}
	owner, project, env, ok := manifest.ParseStandID(arg)
	if !ok {
		return "", "", "", fmt.Errorf("%q is neither a path nor a stand id <owner>_<project>_<env>", arg)
	}
	return owner, project, env, nil
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
	getenv = conf.env()
	eng, _, err := ef.engine(std, getenv, ef.owner)
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
