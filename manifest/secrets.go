package manifest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
)

// SecretRef is a `!secret` reference: a path relative to the secrets prefix and a field. `!secret NAME`
// means path NAME, field "value"; `!secret path#field` names the field.
type SecretRef struct {
	Path  string
	Field string
	// Plain marks a value kept in the secret store that is not itself a secret (`!secret-plain`,
	// e.g. a user name): it may be short, and messages and status files may show it.
	Plain bool
}

// MinSecretLength is the shortest secret value accepted: a shorter one could not be kept out of
// messages without blanking out ordinary words and numbers.
const MinSecretLength = 6

const defaultSecretField = "value"

func (r SecretRef) String() string {
	if r.Field == defaultSecretField {
		return r.Path
	}
	return r.Path + "#" + r.Field
}

var secretSegment = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// ParseSecretRef parses the text after `!secret`. Paths stay inside the prefix: no absolute paths, no
// `..`, no empty segments.
func ParseSecretRef(s string) (SecretRef, error) {
	s = strings.TrimSpace(s)
	path, fieldName, hasField := strings.Cut(s, "#")
	ref := SecretRef{Path: path, Field: defaultSecretField}
	if hasField {
		ref.Field = fieldName
		if !secretSegment.MatchString(fieldName) {
			return SecretRef{}, fmt.Errorf("secret %q: field must match [A-Za-z0-9_.-]+", s)
		}
	}
	if path == "" {
		return SecretRef{}, errors.New("!secret needs a name")
	}
	if strings.HasPrefix(path, "/") {
		return SecretRef{}, fmt.Errorf("secret %q: absolute paths are refused; paths are relative to the secrets prefix", s)
	}
	if first, _, _ := strings.Cut(path, "/"); first == ReservedSecretDir {
		return SecretRef{}, fmt.Errorf("secret %q: %s/ under the secrets prefix holds the reconciler's own records (each stand's connection record); a manifest cannot read them", s, ReservedSecretDir)
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == ".." || seg == "." {
			return SecretRef{}, fmt.Errorf("secret %q: %q segments are refused; paths stay inside the secrets prefix", s, seg)
		}
		if !secretSegment.MatchString(seg) {
			return SecretRef{}, fmt.Errorf("secret %q: path segments must match [A-Za-z0-9_][A-Za-z0-9_.-]*", s)
		}
	}
	return ref, nil
}

// ReservedSecretDir is the folder under the secrets prefix where the reconciler writes each stand's
// connection record (<prefix>/stands/<stand-id>/connection); no !secret reaches into it.
const ReservedSecretDir = "stands"

// SecretSource resolves secret references. Implementations: EnvSource here, Vault in package vault.
type SecretSource interface {
	// Secret returns the value, or an error wrapping ErrSecretNotFound when it does not exist. An
	// error must never contain the value.
	Secret(ctx context.Context, ref SecretRef) (string, error)
}

// ErrSecretNotFound marks a secret that does not exist, as opposed to a source that is unavailable.
var ErrSecretNotFound = errors.New("secret not found")

// EnvSource resolves secrets from the environment as the Stands Engine did: `!secret registry-password`
// reads SECRET_REGISTRY_PASSWORD. A path's `/` and `.` become `_` too, and an explicit field other than
// "value" is appended after a double underscore: `!secret db/main#user` reads SECRET_DB_MAIN__USER.
type EnvSource struct {
	// Lookup defaults to os.LookupEnv; tests set it to read from a map.
	Lookup func(string) (string, bool)
}

// EnvName is the variable EnvSource reads for ref.
func EnvName(ref SecretRef) string {
	name := "SECRET_" + envReplacer.Replace(strings.ToUpper(ref.Path))
	if ref.Field != defaultSecretField {
		name += "__" + envReplacer.Replace(strings.ToUpper(ref.Field))
	}
	return name
}

var envReplacer = strings.NewReplacer("-", "_", "/", "_", ".", "_")

func (e EnvSource) Secret(_ context.Context, ref SecretRef) (string, error) {
	lookup := e.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, ok := lookup(EnvName(ref))
	if !ok {
		return "", fmt.Errorf("%w: environment variable %s is not set", ErrSecretNotFound, EnvName(ref))
	}
	return v, nil
}

// SecretExists says whether the variable is set, without returning it.
func (e EnvSource) SecretExists(ctx context.Context, ref SecretRef) error {
	_, err := e.Secret(ctx, ref)
	return err
}

// Secrets holds resolved secret values. Its String never shows them.
type Secrets struct {
	values map[SecretRef]string
	// placeholder marks values that stand in for secrets that could not be resolved, so the checks
	// after them still run; such a set never reaches an apply (its stand has an error).
	placeholder map[SecretRef]bool
}

// withPlaceholders gives every reference of the stand that has no value a placeholder unique to it.
func (s Secrets) withPlaceholders(st *Stand) Secrets {
	out := Secrets{values: maps.Clone(s.values), placeholder: map[SecretRef]bool{}}
	if out.values == nil {
		out.values = map[SecretRef]string{}
	}
	for _, use := range st.SecretUses() {
		if _, ok := out.values[use.Ref]; !ok {
			out.values[use.Ref] = "missing-secret-" + strings.NewReplacer("/", "-", "#", "-").Replace(use.Ref.String())
			out.placeholder[use.Ref] = true
		}
	}
	return out
}

// Placeholder is the value a `!secret` takes in a pull request's plan. It is made from the reference's
// name alone, so nothing rendered from it depends on the secret, and it fits where secrets go (a host
// name label, a URL, a password): lower-case letters, digits and dashes. Variant 1 is a second value,
// different in length and content: what renders differently under the two depends on the secret.
func Placeholder(ref SecretRef, variant int) string {
	sum := sha256.Sum256([]byte(ref.String()))
	name := strings.Trim(placeholderUnsafe.ReplaceAllString(strings.ToLower(ref.String()), "-"), "-")
	if variant == 0 {
		return fmt.Sprintf("secret-%s-%x", name, sum[:3])
	}
	return fmt.Sprintf("s%x-%s-other", sum[:5], name)
}

var placeholderUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// PlaceholderSource resolves every reference to its Placeholder once Exists says the secret is
// there. It is how a pull request is planned: the secret's name is checked, its value never read.
type PlaceholderSource struct {
	Variant int
	// Exists returns nil when the secret exists, an error wrapping ErrSecretNotFound when it does
	// not, or the source's failure. Nil: every secret exists.
	Exists func(ctx context.Context, ref SecretRef) error
}

func (p PlaceholderSource) Secret(ctx context.Context, ref SecretRef) (string, error) {
	if p.Exists != nil {
		if err := p.Exists(ctx, ref); err != nil {
			return "", err
		}
	}
	return Placeholder(ref, p.Variant), nil
}

func (PlaceholderSource) placeholders() {}

// placeholders reports whether src resolves placeholders, not values.
func placeholders(src SecretSource) bool {
	if s, ok := src.(*serialSource); ok {
		src = s.src
	}
	_, ok := src.(interface{ placeholders() })
	return ok
}

// PlaceholderSecrets is the set PlaceholderSource would resolve for a stand, without asking anyone.
func PlaceholderSecrets(st *Stand, variant int) Secrets {
	out := Secrets{values: map[SecretRef]string{}, placeholder: map[SecretRef]bool{}}
	for _, use := range st.SecretUses() {
		out.values[use.Ref] = Placeholder(use.Ref, variant)
		out.placeholder[use.Ref] = true
	}
	return out
}

// blind reports whether the set holds no secret's real value: placeholders and !secret-plain values
// only, or nothing.
func (s Secrets) blind() bool {
	for ref := range s.values {
		if !s.placeholder[ref] && !ref.Plain {
			return false
		}
	}
	return true
}

// NewSecrets builds a set of resolved values, e.g. for tests and the engine.
func NewSecrets(values map[SecretRef]string) Secrets {
	return Secrets{values: values}
}

func (s Secrets) String() string { return fmt.Sprintf("Secrets(%d values)", len(s.values)) }

// Value returns a resolved value.
func (s Secrets) Value(ref SecretRef) (string, bool) {
	v, ok := s.values[ref]
	return v, ok
}

// Scrub replaces every resolved value in text, plain or quoted, URL- or base64-encoded, with ***: a
// last line of defence for messages built from outside errors (the Pulumi CLI's, the provider's).
func (s Secrets) Scrub(text string) string { return s.redactor().scrub(text) }

func (s Secrets) redactor() *redactor {
	r := &redactor{}
	r.secrets(s)
	return r
}

// ResolveSecrets looks up every secret the stand references. Missing secrets are reported together,
// each with the place that references it; a source error that is not "not found" (a Vault that is
// down) is returned as is so the caller can wait and retry instead of failing the stand.
func ResolveSecrets(ctx context.Context, s *Stand, src SecretSource) (Secrets, error) {
	out := Secrets{values: map[SecretRef]string{}, placeholder: map[SecretRef]bool{}}
	stands := placeholders(src)
	rep := &Report{}
	missing := map[SecretRef]bool{}
	for _, use := range s.SecretUses() {
		if _, done := out.values[use.Ref]; done || missing[use.Ref] {
			continue
		}
		v, err := src.Secret(ctx, use.Ref)
		switch {
		case err == nil && !use.Ref.Plain && len(v) < MinSecretLength:
			missing[use.Ref] = true
			rep.addf(use.Pos, RuleSecret, "secret %s (%s) is shorter than %d characters: it cannot be kept out of messages; use a longer one, or reference it as !secret-plain when it is no secret (a user name)", use.Ref, use.Where, MinSecretLength)
		case err == nil:
			out.values[use.Ref] = v
			out.placeholder[use.Ref] = stands
		case errors.Is(err, ErrSecretNotFound):
			missing[use.Ref] = true
			rep.addf(use.Pos, RuleSecret, "secret %s (%s) cannot be resolved: %v", use.Ref, use.Where, err)
		default:
			return Secrets{}, fmt.Errorf("resolve secret %s: %w", use.Ref, err)
		}
	}
	if err := rep.err(); err != nil {
		return out, err
	}
	return out, nil
}

// Values lists the resolved secret values (not the !secret-plain ones), for masking them wherever
// they might be shown.
func (s Secrets) Values() []string {
	out := make([]string, 0, len(s.values))
	for ref, v := range s.values {
		if !ref.Plain {
			out = append(out, v)
		}
	}
	return out
}
