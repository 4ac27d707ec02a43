// Package compat reads the Stands Engine's configuration for the one-shot commands, as its users
// have it (docs/migrating.md): its variables, nested with "__" and case-insensitive, from the
// process's environment and from --env-file files (a later file wins, the environment over all),
// mapped onto this project's own. A variable of ours wins over the Stands Engine's that maps onto
// it. The daemon takes none of this: it reads its secrets from files, and a Stands Engine variable
// set for it is an error naming ours (DaemonErrors).
package compat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// mapping is a Stands Engine variable mapped one to one onto one of ours.
type mapping struct{ theirs, ours string }

var mappings = []mapping{
	{"HCLOUD__TOKEN", "HCLOUD_TOKEN"},
	{"STAND__PASSPHRASE", "STANDS_PASSPHRASE"},
	{"STAND__USER", "STANDS_OWNER"},
	{"STAND__PATH_TO_CONFIGSET", "STANDS_CONFIGSET_DIR"},
	{"STAND__PATH_TO_KEY", "STANDS_SSH_KEY_PATH"},
	// The S3 backend's credentials, which the Pulumi CLI and the backend's reader take from the
	// process environment (Export).
	{"S3__ACCESS_KEY", "AWS_ACCESS_KEY_ID"},
	{"S3__SECRET_KEY", "AWS_SECRET_ACCESS_KEY"},
}

// Theirs is the Stands Engine's variable that maps onto ours, "" when none does: errors about a
// setting name the variable its users set.
func Theirs(ours string) string {
	for _, m := range mappings {
		if m.ours == ours {
			return m.theirs
		}
	}
	return ""
}

// The Stands Engine variables that are not one of ours alone: the backend URL is made of four, the output
// file of two, and the console ones are bound to flags under their own names.
var composite = []string{"S3__BUCKET", "S3__REGION", "S3__ENDPOINT", "OUTPUT__FILE", "OUTPUT__FILE_PATH", "OUTPUT__CONSOLE", "OUTPUT__CONSOLE_SECRETS"}

// unsupported are the Stands Engine's variables this version does not take, each with why: silently
// ignored, one would change what a create does. None today.
var unsupported = map[string]string{}

// names is every Stands Engine variable's name.
func names() []string {
	var out []string
	for _, v := range mappings {
		out = append(out, v.theirs)
	}
	out = append(out, composite...)
	for k := range unsupported {
		out = append(out, k)
	}
	return out
}

// The variables our one-shot commands read that the Stands Engine's make: the backend URL and the output
// folder (for --backend and --output-dir).
const (
	BackendVariable   = "STANDS_BACKEND_URL"
	OutputDirVariable = "STANDS_OUTPUT_DIR"
)

// Env is the one-shot commands' environment: the process's, over the env files, with the Stands Engine's
// variables mapped onto ours.
type Env struct {
	process func(string) string
	files   map[string]string // merged, a later file winning; Stands Engine names upper-cased
}

// New reads the env files. A line that is not KEY=VALUE fails with its file and line, and
// never shows the value.
func New(process func(string) string, files []string) (*Env, error) {
	e := &Env{process: process, files: map[string]string{}}
	for _, path := range files {
		vars, err := readEnvFile(path)
		if err != nil {
			return nil, err
		}
		for k, v := range vars {
			e.files[k] = v
		}
	}
	return e, nil
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// readEnvFile reads a dotenv file: KEY=VALUE lines, optionally after `export `, the value bare (a
// ` #` starts a comment), in single quotes (literal) or in double quotes (\n, \t, \" and \\
// escaped); blank lines and # comments are skipped.
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--env-file: %w", err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, raw, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !envKey.MatchString(k) {
			return nil, fmt.Errorf("%s:%d: want KEY=VALUE, KEY made of letters, digits and _", path, n)
		}
		v, err := envValue(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %v", path, n, k, err)
		}
		out[fold(k)] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// envValue is a dotenv value, its quotes removed.
func envValue(raw string) (string, error) {
	switch {
	case strings.HasPrefix(raw, "'"):
		end := strings.IndexByte(raw[1:], '\'')
		if end < 0 || strings.TrimSpace(raw[end+2:]) != "" && !strings.HasPrefix(strings.TrimSpace(raw[end+2:]), "#") {
			return "", errors.New("a single-quoted value must end with its quote")
		}
		return raw[1 : end+1], nil
	case strings.HasPrefix(raw, `"`):
		var b strings.Builder
		for i := 1; i < len(raw); i++ {
			c := raw[i]
			switch {
			case c == '"':
				if rest := strings.TrimSpace(raw[i+1:]); rest != "" && !strings.HasPrefix(rest, "#") {
					return "", errors.New("text after the closing quote")
				}
				return b.String(), nil
			case c == '\\' && i+1 < len(raw):
				i++
				switch raw[i] {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				default:
					b.WriteByte(raw[i])
				}
			default:
				b.WriteByte(c)
			}
		}
		return "", errors.New("a double-quoted value must end with its quote")
	}
	if i := strings.Index(raw, " #"); i >= 0 {
		raw = strings.TrimSpace(raw[:i])
	}
	return raw, nil
}

// fold upper-cases a Stands Engine variable's name (theirs are case-insensitive); ours keep their case.
func fold(k string) string {
	if up := strings.ToUpper(k); isName(up) {
		return up
	}
	return k
}

func isName(k string) bool {
	for _, n := range names() {
		if n == k {
			return true
		}
	}
	return false
}

// raw is a variable from the process, else the files.
func (e *Env) raw(k string) string {
	if v := e.process(k); v != "" {
		return v
	}
	return e.files[k]
}

// switches are the Stands Engine's switches, bound to our flags under their own names.
var switches = []string{"OUTPUT__CONSOLE", "OUTPUT__CONSOLE_SECRETS", "OUTPUT__FILE"}

// parseBool reads a switch as the Stands Engine's settings library did: true/false, 1/0, yes/no, on/off,
// t/f, y/n, in any case.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "yes", "on", "t", "y":
		return true, nil
	case "false", "0", "no", "off", "f", "n":
		return false, nil
	}
	return false, errors.New("want true or false")
}

// get answers the commands' lookups.
func (e *Env) Get(k string) string {
	if v := e.raw(k); v != "" {
		if slices.Contains(switches, k) {
			b, _ := parseBool(v) // check refused what does not parse
			return strconv.FormatBool(b)
		}
		return v
	}
	if strings.HasSuffix(k, "_FILE") {
		return ""
	}
	for _, m := range mappings {
		if m.ours == k && e.raw(k+"_FILE") == "" {
			return e.raw(m.theirs)
		}
	}
	switch k {
	case BackendVariable:
		u, _ := e.backend()
		return u
	case OutputDirVariable:
		d, _ := e.outputDir()
		return d
	}
	return ""
}

// Check reports what the Stands Engine's variables cannot mean here, each naming the variable, never its value.
func (e *Env) Check() error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(unsupported)) {
		if e.raw(k) != "" {
			errs = append(errs, fmt.Errorf("$%s: %s", k, unsupported[k]))
		}
	}
	if _, err := e.backend(); err != nil {
		errs = append(errs, err)
	}
	if _, err := e.outputDir(); err != nil {
		errs = append(errs, err)
	}
	for _, k := range switches[:2] { // OUTPUT__FILE: outputDir
		if v := e.raw(k); v != "" {
			if _, err := parseBool(v); err != nil {
				errs = append(errs, fmt.Errorf("$%s: %v", k, err))
			}
		}
	}
	return errors.Join(errs...)
}

// backend is the Stands Engine's state location, s3://<bucket>/<STAND__USER>?region=..&endpoint=..&
// s3ForcePathStyle=true, when S3__BUCKET is set ("" otherwise). The endpoint may come without its
// scheme (https:// is meant).
func (e *Env) backend() (string, error) {
	bucket := e.raw("S3__BUCKET")
	if bucket == "" {
		for _, k := range []string{"S3__REGION", "S3__ENDPOINT"} {
			if e.raw(k) != "" {
				return "", fmt.Errorf("$%s is set without $S3__BUCKET: the S3 backend needs its bucket", k)
			}
		}
		return "", nil
	}
	owner := e.Get("STANDS_OWNER")
	if owner == "" {
		return "", errors.New("$S3__BUCKET is set without $STAND__USER: the state's prefix in the bucket is the user's")
	}
	q := url.Values{"s3ForcePathStyle": {"true"}}
	if r := e.raw("S3__REGION"); r != "" {
		q.Set("region", r)
	}
	if ep := e.raw("S3__ENDPOINT"); ep != "" {
		if !strings.Contains(ep, "://") {
			ep = "https://" + ep
		}
		q.Set("endpoint", ep)
	}
	return (&url.URL{Scheme: "s3", Host: bucket, Path: "/" + owner, RawQuery: q.Encode()}).String(), nil
}

// outputDir is OUTPUT__FILE_PATH when OUTPUT__FILE is true: the folder of the full connection
// record, which must be a folder or not exist yet.
func (e *Env) outputDir() (string, error) {
	on := e.raw("OUTPUT__FILE")
	if on == "" {
		return "", nil
	}
	b, err := parseBool(on)
	if err != nil {
		return "", fmt.Errorf("$OUTPUT__FILE: %v", err)
	}
	if !b {
		return "", nil
	}
	dir := e.raw("OUTPUT__FILE_PATH")
	if dir == "" {
		return "", errors.New("$OUTPUT__FILE is true without $OUTPUT__FILE_PATH: the connection file needs its folder")
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return "", fmt.Errorf("$OUTPUT__FILE_PATH (%s) is not a folder", dir)
	}
	return dir, nil
}

// Export puts the settings the Pulumi CLI and the backend's reader take from the process
// environment — AWS_* (S3__ACCESS_KEY and S3__SECRET_KEY among them) and PULUMI_* — there, when the
// files or the Stands Engine's names hold them and the process does not.
func Export(e *Env, setenv func(k, v string) error) error {
	keys := map[string]bool{}
	for k := range e.files {
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "PULUMI_") {
			keys[k] = true
		}
	}
	for _, m := range mappings {
		if strings.HasPrefix(m.ours, "AWS_") {
			keys[m.ours] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if e.process(k) != "" {
			continue
		}
		if v := e.Get(k); v != "" {
			if err := setenv(k, v); err != nil {
				return fmt.Errorf("set $%s: %w", k, err)
			}
		}
	}
	return nil
}

// DaemonErrors refuses the Stands Engine's variables where the daemon (run, reconcile) would
// otherwise ignore them: an ignored STAND__USER is another owner's backend, an ignored
// HCLOUD__TOKEN a secret in an environment. daemonKey names the variable the daemon reads instead
// of one of ours (a secret's: its _FILE), and whether it is a secret.
func DaemonErrors(getenv func(string) string, daemonKey func(ours string) string) []error {
	var errs []error
	for _, k := range names() {
		if getenv(k) == "" {
			continue
		}
		ours := "the daemon's own settings (docs/operations.md)"
		for _, m := range mappings {
			if m.theirs == k {
				ours = "$" + daemonKey(m.ours)
			}
		}
		errs = append(errs, fmt.Errorf("$%s is the Stands Engine's, for the one-shot commands (validate, create, destroy); the daemon reads %s", k, ours))
	}
	return errs
}

// ProcessEnv is the process's environment with the Stands Engine's variables found under any case.
func ProcessEnv(environ []string, getenv func(string) string) func(string) string {
	folded := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if up := strings.ToUpper(k); up != k && isName(up) {
			folded[up] = v
		}
	}
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return folded[k]
	}
}
