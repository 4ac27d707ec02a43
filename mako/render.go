package mako

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// Render renders a Mako template with a context through python, within 30 s.
func Render(ctx context.Context, python, src string, data map[string]any) ([]byte, error) {
	job, err := json.Marshal(map[string]any{"template": src, "context": data})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", script)
	cmd.Stdin = bytes.NewReader(job)
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
