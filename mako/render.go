package mako

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// The other half of a proof: rendering a template the way the Stands Engine did, with Mako itself.

// script renders {"template", "context"} from stdin; mappings answer m['k'] and m.k alike, as the
// Stands Engine's context objects did.
const script = `import json, sys
from mako.template import Template
class Obj(dict):
    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k)
def wrap(v):
    if isinstance(v, dict):
        return Obj({k: wrap(x) for k, x in v.items()})
    if isinstance(v, list):
        return [wrap(x) for x in v]
    return v
job = json.load(sys.stdin)
sys.stdout.write(Template(job["template"]).render(**wrap(job["context"])))
`

// ErrNoMako: no python3 here has Mako.
var ErrNoMako = errors.New("no python3 with Mako here (Debian: apt-get install python3-mako; or set STANDS_PYTHON)")

// FindPython finds a python3 that has Mako: $STANDS_PYTHON, Debian's, then PATH's.
func FindPython() (string, error) {
	for _, p := range []string{os.Getenv("STANDS_PYTHON"), "/usr/bin/python3", "python3"} {
		if p != "" && exec.Command(p, "-c", "import mako").Run() == nil {
			return p, nil
		}
	}
	return "", ErrNoMako
}

// Render renders a Mako template with a context through python, within 30 s. keys gives each
// mapping's keys in the order Python's dict is to have them (the manifest's: what the Stands Engine's
// templates iterated in); nil sorts them.
func Render(ctx context.Context, python, src string, data map[string]any, keys func(map[string]any) []string) ([]byte, error) {
	var job bytes.Buffer
	job.WriteString(`{"template":`)
	if err := writeJSON(&job, src, keys); err != nil {
		return nil, err
	}
	job.WriteString(`,"context":`)
	if err := writeJSON(&job, data, keys); err != nil {
		return nil, err
	}
	job.WriteString("}")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", script)
	cmd.Stdin = &job
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:] // the exception, not the traceback
		}
		return nil, fmt.Errorf("mako: %v: %s", err, msg)
	}
	return out.Bytes(), nil
}

// writeJSON writes v as JSON with each mapping's keys in keys' order (json.Marshal sorts them, and
// Python's json keeps the order it reads).
func writeJSON(b *bytes.Buffer, v any, keys func(map[string]any) []string) error {
	switch x := v.(type) {
	case map[string]any:
		order := slices.Sorted(maps.Keys(x))
		if keys != nil {
			order = keys(x)
		}
		b.WriteByte('{')
		for i, k := range order {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, k, keys); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := writeJSON(b, x[k], keys); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, e, keys); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b.Write(data)
	return nil
}
