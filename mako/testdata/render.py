# Renders a Mako template with a JSON context, as the Stands Engine did: reads {"template": …,
# "context": …} on stdin, prints the output. Mappings answer both m['k'] and m.k.
import json, sys
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
