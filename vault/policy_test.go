package vault

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/hashicorp/hcl"
	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// policyName is what the docs call the operators' policy.
const policyName = "stands-reconciler"

// policyRole makes an AppRole under the policy the docs give operators (deploy/vault-policy.hcl, as
// is) alone — no default policy, as the docs advise — and returns its login.
func policyRole(t *testing.T, v *testenv.Vault, params map[string]any) AppRole {
	t.Helper()
	roleID, secretID := v.AppRole(t, policyName, testenv.ReconcilerPolicy(t), params)
	return AppRole{RoleID: roleID, SecretIDFile: writeFile(t, "secret-id", secretID)}
}

// TestLeastPrivilegePolicy: the reconciler's AppRole under the docs' policy reads the stands' secrets
// and reads and writes connection records through this package, and can do nothing else: Vault's
// own account of the token's capabilities on the paths around them matches the table exactly, and
// the refusals are real (403 on the calls themselves).
func TestLeastPrivilegePolicy(t *testing.T) {
	v := testenv.StartVault(t)
	ctx := context.Background()
	admin := v.Client(t)
	put(t, admin, "stands/registry-password", map[string]any{"value": "reg-pw"})
	put(t, admin, "stands/db/main", map[string]any{"user": "app", "value": "db-pw"})
	put(t, admin, "other-team/db", map[string]any{"value": "not-ours"})

	c, err := New(ctx, v.Addr, policyRole(t, v, nil), WithPrefix("stands"))
	if err != nil {
		t.Fatal(err)
	}
	// What the reconciler does, done through this package.
	for in, want := range map[string]string{"registry-password": "reg-pw", "db/main#user": "app"} {
		if got, err := c.Secret(ctx, ref(t, in)); err != nil || got != want {
			t.Errorf("read %s: %q %v", in, got, err)
		}
	}
	for _, rec := range []string{`{"id_stand":"o_p_e","v":1}`, `{"id_stand":"o_p_e","v":2}`} { // create, then update
		if err := c.WriteConnection(ctx, "o_p_e", json.RawMessage(rec)); err != nil {
			t.Fatalf("write connection: %v", err)
		}
	}
	tok := c.api.Token()
	self := v.Client(t)
	self.SetToken(tok)
	if got, err := self.KVv2("secret").Get(ctx, "stands/stands/o_p_e/connection"); err != nil || got.Data["value"] != `{"id_stand":"o_p_e","v":2}` {
		t.Errorf("read back the connection record: %+v %v", got, err)
	}
	if s, err := self.Auth().Token().LookupSelfWithContext(ctx); err != nil {
		t.Error(err)
	} else if pol, _ := s.TokenPolicies(); !slices.Equal(pol, []string{policyName}) {
		t.Errorf("token policies %v, want only %s", pol, policyName)
	}

	// The file grants these rules and no other: a stanza added for another path would pass the
	// probes below unless one happened to name it.
	var rules struct {
		Path map[string]struct {
			Capabilities []string `hcl:"capabilities"`
		} `hcl:"path"`
	}
	if err := hcl.Decode(&rules, testenv.ReconcilerPolicy(t)); err != nil {
		t.Fatalf("parse deploy/vault-policy.hcl: %v", err)
	}
	granted := map[string][]string{}
	for path, r := range rules.Path {
		granted[path] = slices.Sorted(slices.Values(r.Capabilities))
	}
	if want := map[string][]string{
		"secret/data/stands/*":                   {"read"},
		"secret/data/stands/stands/+/connection": {"create", "read", "update"},
		"auth/token/lookup-self":                 {"read"},
		"auth/token/renew-self":                  {"update"},
	}; !maps.EqualFunc(granted, want, slices.Equal) {
		t.Errorf("deploy/vault-policy.hcl grants %v, want exactly %v", granted, want)
	}

	// Everything else, as Vault itself judges the token. "deny" is Vault's word for none.
	deny := []string{"deny"}
	for path, want := range map[string][]string{
		"secret/data/stands/registry-password":           {"read"},
		"secret/data/stands/db/main":                     {"read"},
		"secret/data/stands/stands/o_p_e/connection":     {"create", "read", "update"},
		"secret/data/stands/stands/o_p_e/other":          {"read"}, // under the prefix, so a secret
		"secret/data/stands/stands/o_p_e/connection/x":   {"read"},
		"secret/data/stands-other/x":                     deny,
		"secret/data/other-team/db":                      deny,
		"secret/data/x":                                  deny,
		"secret/metadata/stands/registry-password":       deny, // no list, no version history
		"secret/metadata/stands":                         deny,
		"secret/metadata/stands/stands/o_p_e/connection": deny,
		"secret/delete/stands/stands/o_p_e/connection":   deny,
		"secret/destroy/stands/stands/o_p_e/connection":  deny,
		"secret/undelete/stands/registry-password":       deny,
		"secret/config":                                  deny,
		"kv/data/stands/registry-password":               deny, // another mount of the same layout
		"sys/wrapping/wrap":                              deny,
		"sys/leases/renew":                               deny,
		"auth/token/revoke-self":                         deny,
		"cubbyhole/x":                                    deny,
		"auth/token/lookup-self":                         {"read"},
		"auth/token/renew-self":                          {"update"},
		"auth/token/create":                              deny,
		"auth/token/lookup":                              deny,
		"auth/approle/role/" + policyName + "/secret-id": deny,
		"auth/approle/role/" + policyName + "/role-id":   deny,
		"sys/policy/" + policyName:                       deny,
		"sys/policies/acl/" + policyName:                 deny,
		"sys/mounts":                                     deny,
		"sys/mounts/secret/tune":                         deny,
		"sys/auth":                                       deny,
		"sys/seal":                                       deny,
		"sys/capabilities-self":                          deny,
		"sys/leases/lookup":                              deny,
		"identity/entity":                                deny,
	} {
		got, err := admin.Sys().CapabilitiesWithContext(ctx, tok, path)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("capabilities on %s: %v %v, want %v", path, got, err, want)
		}
	}

	// The refusals are enforced, not only reported.
	forbidden := func(what string, err error) {
		t.Helper()
		var re *vaultapi.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
			t.Errorf("%s: want 403, got %v", what, err)
		}
	}
	_, err = self.KVv2("secret").Put(ctx, "stands/registry-password", map[string]any{"value": "overwritten"})
	forbidden("overwrite a stand's secret", err)
	_, err = self.KVv2("secret").Get(ctx, "other-team/db")
	forbidden("read outside the prefix", err)
	_, err = self.Logical().ListWithContext(ctx, "secret/metadata/stands")
	forbidden("list the stands' secrets", err)
	forbidden("delete a connection record", self.KVv2("secret").DeleteMetadata(ctx, "stands/stands/o_p_e/connection"))
	forbidden("widen its own policy", self.Sys().PutPolicyWithContext(ctx, policyName, `path "*" { capabilities = ["sudo", "read"] }`))
	_, err = self.Auth().Token().CreateWithContext(ctx, &vaultapi.TokenCreateRequest{})
	forbidden("mint a token", err)
	if got, err := admin.KVv2("secret").Get(ctx, "stands/registry-password"); err != nil || got.Data["value"] != "reg-pw" {
		t.Errorf("the stand's secret after the refused overwrite: %+v %v", got, err)
	}
}
