package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"

	"github.com/stands-engine/stands-reconciler/stands"
)

// deployment is the part of a stack's exported state the engine reads: resources and the operations a
// killed run left pending.
type deployment struct {
	Secrets struct {
		Type  string `json:"type"`
		State struct {
			Salt string `json:"salt"`
		} `json:"state"`
	} `json:"secrets_providers"`
	Resources []struct {
		URN     string         `json:"urn"`
		Type    string         `json:"type"`
		ID      string         `json:"id"`
		Outputs map[string]any `json:"outputs"`
	} `json:"resources"`
	Pending []struct {
		Type     string `json:"type"`
		Resource struct {
			URN string `json:"urn"`
		} `json:"resource"`
	} `json:"pending_operations"`
}

// stackType is the type of the stack's own resource, whose outputs are the stack's.
const stackType = "pulumi:pulumi:Stack"

// secretSig marks a secret value in a deployment exported with --show-secrets: the value is the
// JSON text in "plaintext" (Pulumi's resource.SecretSig).
const secretSig = "1b47061264138c4ac30d75fd1eb44270"

// outputs are the stack's outputs as the export holds them, as `pulumi stack output --json
// --show-secrets` would print them and with the secret ones marked: what auto.Stack.Outputs returns
// after two CLI runs, from the export the engine reads anyway (TestOutputsFromTheExport holds the two
// equal on the real CLI).
func (d *deployment) outputs() (auto.OutputMap, error) {
	out := auto.OutputMap{}
	for _, r := range d.Resources {
		if r.Type != stackType {
			continue
		}
		for k, v := range r.Outputs {
			plain, secret, err := revealed(v)
			if err != nil {
				return nil, fmt.Errorf("output %s: %w", k, err)
			}
			out[k] = auto.OutputValue{Value: plain, Secret: secret}
		}
	}
	return out, nil
}

// revealed is v with every secret in it replaced by its plaintext value, and whether it held one.
func revealed(v any) (any, bool, error) {
	switch v := v.(type) {
	case map[string]any:
		if v[sigKey] == secretSig {
			text, ok := v["plaintext"].(string)
			if !ok {
				return nil, true, errors.New("a secret with neither ciphertext nor plaintext")
			}
			var plain any
			if err := json.Unmarshal([]byte(text), &plain); err != nil {
				return nil, true, errors.New("a secret that is not JSON") // its text is not shown: a secret
			}
			inner, _, err := revealed(plain)
			return inner, true, err
		}
		out, secret := make(map[string]any, len(v)), false
		for k, e := range v {
			p, s, err := revealed(e)
			if err != nil {
				return nil, false, err
			}
			out[k], secret = p, secret || s
		}
		return out, secret, nil
	case []any:
		out, secret := make([]any, len(v)), false
		for i, e := range v {
			p, s, err := revealed(e)
			if err != nil {
				return nil, false, err
			}
			out[i], secret = p, secret || s
		}
		return out, secret, nil
	}
	return v, false, nil
}

// sigKey is the key of a special value's signature in Pulumi's serialized properties.
const sigKey = "4dabf18193072939515e22adb298388d"

// readDeployment is a stack's deployment as `pulumi stack export --show-secrets` prints it (its
// checkpoint's latest, each secret's plaintext beside its signature), read from the state file and
// decrypted here rather than by a CLI: a Pulumi process less on every operation. The file's place
// and shape are statelayout.go's; TestOutputsFromTheState holds the result equal to the CLI's export
// and outputs. A stack without a state yet is an empty deployment.
func (e *Engine) readDeployment(ctx context.Context, ref stands.StackRef) (*deployment, error) {
	data, err := e.stackBytes(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("read the state of %s/%s: %w", ref.Project, ref.Env, err)
	}
	d := &deployment{}
	if data == nil {
		return d, nil
	}
	var cp struct {
		Checkpoint struct {
			Latest json.RawMessage `json:"latest"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, fmt.Errorf("parse the state of %s/%s: %w", ref.Project, ref.Env, err)
	}
	if len(cp.Checkpoint.Latest) == 0 || string(cp.Checkpoint.Latest) == "null" {
		return d, nil
	}
	if err := json.Unmarshal(cp.Checkpoint.Latest, d); err != nil {
		return nil, fmt.Errorf("parse the state of %s/%s: %w", ref.Project, ref.Env, err)
	}
	decrypter := e.decrypterFor(d.Secrets.Type, d.Secrets.State.Salt)
	for i := range d.Resources {
		if d.Resources[i].Outputs == nil {
			continue
		}
		outs, err := revealAll(ctx, decrypter, d.Resources[i].Outputs)
		if err != nil {
			return nil, fmt.Errorf("the state of %s/%s: %w", ref.Project, ref.Env, err)
		}
		d.Resources[i].Outputs, _ = outs.(map[string]any)
	}
	return d, nil
}

// revealAll is v with each encrypted secret in it turned into the form an export with
// --show-secrets gives: the signature and the plaintext.
func revealAll(ctx context.Context, decrypter func() (config.Decrypter, error), v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if x[sigKey] == secretSig {
			ct, ok := x["ciphertext"].(string)
			if !ok {
				return x, nil // already plaintext
			}
			dec, err := decrypter()
			if err != nil {
				return nil, err
			}
			plain, err := dec.DecryptValue(ctx, ct)
			if err != nil {
				return nil, fmt.Errorf("decrypt a secret: %w", err)
			}
			return map[string]any{sigKey: secretSig, "plaintext": plain}, nil
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			var err error
			if out[k], err = revealAll(ctx, decrypter, e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = revealAll(ctx, decrypter, e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}
