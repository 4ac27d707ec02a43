# Vault policy of stands-reconciler: the least it needs, for the defaults --vault-mount=secret and
# --vault-prefix=stands. With others, replace "secret" (the mount) and the first "stands" of each
# path (the prefix); the second "stands" of the connection path is the folder connection records
# always live in under the prefix. Bind it alone to the
# reconciler's AppRole (token_no_default_policy=true): the two token paths at the end are all it
# needs of Vault's default policy. vault/policy_test.go proves on a real Vault that this grants
# exactly what is listed here.
#
#   vault policy write stands-reconciler deploy/vault-policy.hcl
#   vault write auth/approle/role/stands-reconciler token_policies=stands-reconciler \
#       token_no_default_policy=true token_ttl=1h token_max_ttl=24h

# The stands' secrets: `!secret NAME` reads secret/data/stands/NAME. Read only: the reconciler never
# writes, lists or deletes them.
path "secret/data/stands/*" {
  capabilities = ["read"]
}

# Each stand's unmasked connection record, stands/<stand-id>/connection under the prefix: written
# after every apply. "+" is one path segment, so nothing else under stands/stands/ is writable.
path "secret/data/stands/stands/+/connection" {
  capabilities = ["create", "read", "update"]
}

# Its own login: look it up (token auth) and renew it until its max TTL.
path "auth/token/lookup-self" {
  capabilities = ["read"]
}

path "auth/token/renew-self" {
  capabilities = ["update"]
}
