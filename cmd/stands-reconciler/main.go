// Command stands-reconciler turns a Git repository of stand.yml files into running stands.
//
// Exit codes follow the Stands Engine: 0 success (and --help, --version), 1 configuration or validation
// error, 2 bad command line, 130 interrupted by SIGINT, 143 by SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/internal/sandbox"
	"github.com/stands-engine/stands-reconciler/internal/stopsignal"
	buildversion "github.com/stands-engine/stands-reconciler/internal/version"
	"github.com/stands-engine/stands-reconciler/localrepo"
	"github.com/stands-engine/stands-reconciler/prplan"
)

const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = stopsignal.Interrupted // what stopsignal.Wait turns into the signal's own code
)

// version is what packaging scripts stamped before internal/version was (-X main.version=...): it
// still wins for this release; make stamps internal/version.Version.
var version = ""

func main() {
	if code, ok := asChild(); ok {
		os.Exit(code)
	}
	os.Exit(runMain())
}

// asChild serves the roles this binary is started in by itself (the tests' binaries too): the
// Pulumi engine runs it as pulumi-resource-stands (a link the engine package makes) to serve the
// stands provider, and pull request plans run it as a render sandbox.
func asChild() (code int, ok bool) {
	switch {
	case filepath.Base(os.Args[0]) == provider.BinaryName:
		if err := provider.Serve(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", provider.BinaryName, err)
			return exitError, true
		}
		return exitOK, true
	case len(os.Args) > 1 && os.Args[1] == sandbox.Command:
		return sandboxChild(os.Args[2:]), true
	}
	return 0, false
}

// sandboxChild is this binary started to render a pull request's stands under limits
// (internal/sandbox): it reads its job from stdin and answers on stdout.
func sandboxChild(args []string) int {
	job, err := sandbox.Child(args)
	if err == nil && job != prplan.RenderJob {
		err = fmt.Errorf("sandbox: unknown job %q", job)
	}
	if err == nil {
		err = prplan.ServeRender(os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitError
	}
	return exitOK
}

// env reads configuration from the environment; tests pass a map.
type env func(string) string

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, io stdio, getenv env) int
	// oneShot: a command of the Stands Engine's kind, which takes its configuration (--env-file, its
	// variables) too; the daemon's commands do not.
	oneShot bool
}

type stdio struct {
	out io.Writer
	err io.Writer
}

func commands() []command {
	return []command{
		{"validate", "check stands locally (references, files, secrets, templates) without any cloud call", runValidate, true},
		{"render", "render stands with test addresses into a folder, to read what would be deployed", runRender, true},
		{"preview", "show what apply would change for one stand (pulumi preview)", runPreview, true},
		{"apply", "create or update one stand's servers and print its connection record", runApply, true},
		{"create", "apply, under the Stands Engine's name", runCreate, true},
		{"destroy", "destroy one stand's servers and remove its stack (by id or path; no manifest needed)", runDestroy, true},
		{"adopt", "take over a stand whose stack the Stands Engine made: its servers kept (same ids), nothing deleted", runAdopt, true},
		{"migrate", "turn a Stands Engine repository into one of ours: Mako templates to Go templates, proven by rendering both", runMigrate, true},
		{"orphans", "list servers with the reconciler's labels that no stack holds (deletes nothing)", runOrphans, true},
		{"run", "the daemon: reconcile the stands repository until SIGTERM (webhook, /healthz, /readyz)", runDaemon, false},
		{"reconcile", "reconcile --once: one reconciliation of the stands repository, then exit", runReconcile, false},
		{"inventory", "list the owner's stacks: owned or foreign, spec hash, pending operations, locks", runInventory, true},
		{"ctl", "the running daemon's operator controls: status, pause, resume, plan-only on|off, retry STAND-ID, approve STAND-ID COMMIT", runCtl, false},
		{"config", "config check: the daemon's effective configuration (secrets as ***) and what is missing or wrong", runConfig, false},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `stands-reconciler — a GitOps reconciler for stands (Hetzner servers + Podman apps)

Usage:
  stands-reconciler [--version] [--help] [--env-file FILE]... [--resource NAME=PATH]... <command> [flags] [args]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Run 'stands-reconciler <command> --help' for a command's flags.
Exit codes: 0 ok, 1 configuration or validation error, 2 bad command line, 130 interrupted (SIGINT), 143 (SIGTERM).
`)
}

func versionString() string {
	if version != "" {
		return version
	}
	return buildversion.String()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) int {
	std := stdio{out: stdout, err: stderr}
	fs := flag.NewFlagSet("stands-reconciler", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	showVersion := fs.Bool("version", false, "print the version and exit")
	var files stringList
	fs.Var(&files, "env-file", "one-shot commands: read variables from a dotenv file (repeatable; a later file wins, the environment over all)")
	var resources stringList // NAME=PATH, handed to the command: its own --resource checks them
	fs.Var(&resources, "resource", "commands that read manifests: NAME=PATH, a folder manifests reach as resource://NAME/PATH (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "stands-reconciler: %v\n\n", err)
		usage(stderr)
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintf(stdout, "stands-reconciler %s\n", versionString())
		return exitOK
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr)
		return exitUsage
	}
	for _, c := range commands() {
		if c.name == rest[0] {
			code := dispatch(ctx, c, rest[1:], files, resources, std, getenv)
			if ctx.Err() != nil && code != exitOK {
				fmt.Fprintln(stderr, "stands-reconciler: interrupted")
				return exitInterrupted
			}
			return code
		}
	}
	fmt.Fprintf(stderr, "stands-reconciler: unknown command %q\n\n", rest[0])
	usage(stderr)
	return exitUsage
}

// dispatch runs command c with the global flags that are its: the env files' variables and the
// resource roots, which are handed to the command as its own --resource flags.
func dispatch(ctx context.Context, c command, args []string, files, resources stringList, std stdio, getenv env) int {
	getenv, code := commandEnv(c, files, getenv, std)
	if code != exitOK {
		return code
	}
	if len(resources) > 0 {
		if !slices.Contains(resourceCommands, c.name) {
			fmt.Fprintf(std.err, "stands-reconciler: --resource is for the commands that read manifests (%s), not %s\n", strings.Join(resourceCommands, ", "), c.name)
			return exitUsage
		}
		var given []string
		for _, r := range resources {
			given = append(given, "--resource", r)
		}
		args = append(given, args...)
	}
	return c.run(ctx, args, std, getenv)
}

// commandEnv is the environment command c reads: for a one-shot command, the process's over the env
// files (./.env first, if there is one), with the Stands Engine's variables mapped onto ours (package
// compat).
func commandEnv(c command, files stringList, getenv env, std stdio) (env, int) {
	if !c.oneShot {
		if len(files) > 0 {
			fmt.Fprintf(std.err, "stands-reconciler: --env-file is for the one-shot commands (validate, create, destroy, …); %s reads its secrets from files (docs/operations.md)\n", c.name)
			return nil, exitUsage
		}
		return getenv, exitOK
	}
	// The Stands Engine's settings library read ./.env under the environment and its launcher's
	// --env-file files: first here, so a later file and the process win over it.
	if st, err := os.Stat(".env"); err == nil && st.Mode().IsRegular() {
		files = append(stringList{".env"}, files...)
	}
	e, err := compat.New(getenv, files)
	if err == nil {
		err = e.Check()
	}
	if err == nil {
		err = compat.Export(e, os.Setenv)
	}
	if err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", c.name, err)
		return nil, exitError
	}
	return e.Get, exitOK
}

// newFlags makes a subcommand's flag set that prints its help on stdout for --help and reports
// misuse on stderr.
func newFlags(name, synopsis string, std stdio) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(std.err)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: stands-reconciler %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags returns (done, code): done is true when the command must return code now. Flags may
// come after the paths too (`validate stands/ --owner qa`); "--" ends them. Help goes to stdout alone
// and exits 0; a bad flag is the flag package's message and the usage on stderr, exit 2. Then the
// settings the command line left alone come from the environment and the config file; a value that
// does not parse is exit 1, naming where it came from.
func parseFlags(c *settings, args []string, std stdio) (bool, int) {
	c.Args = args
	fs := c.FS
	usage := fs.Usage
	fs.Usage = func() {} // printed below, once, where it belongs
	defer func() { fs.Usage = usage }()
	var paths []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(std.out)
			usage()
			return true, exitOK
		}
		if err != nil {
			usage()
			return true, exitUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			paths = append(paths, rest...)
			break
		}
		paths, args = append(paths, rest[0]), rest[1:]
	}
	if err := c.Resolve(); err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", fs.Name(), err)
		return true, exitError
	}
	for _, d := range c.Deprecated {
		fmt.Fprintf(std.err, "%s: %s\n", fs.Name(), d)
	}
	// Leave the paths where the commands read them (fs.Args).
	_ = fs.Parse(append([]string{"--"}, paths...))
	return false, exitOK
}

// stringList is a repeatable flag's values, in the order given (--env-file, --resource).
type stringList []string

func (f *stringList) String() string     { return strings.Join(*f, ",") }
func (f *stringList) Set(v string) error { *f = append(*f, v); return nil }

// resourceCommands read manifests, and so take --resource (localrepo.Roots).
var resourceCommands = []string{"validate", "render", "preview", "apply", "create", "destroy", "migrate", "adopt"}

// resourceFlag registers --resource on a command that reads manifests.
func resourceFlag(fs *flag.FlagSet, r localrepo.Roots) {
	fs.Var(r, "resource", "NAME=PATH: a folder outside the repository that manifests reach as resource://NAME/PATH (repeatable; docs/migrating.md)")
}
