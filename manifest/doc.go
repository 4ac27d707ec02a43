// Package manifest is the stand manifest model: it parses stand.yml files (YAML with `!secret`
// references), merges from_dep_manifest bases, loads app packages, validates everything that can be
// checked without a cloud (Preflight), renders templates for given addresses (Render) and computes a
// stand's spec hash (SpecHash).
//
// It is pure: it reads only the fs.FS it is handed (a working tree, a Git snapshot, or an in-memory
// repository in tests) and resolves secrets through the SecretSource it is given. Problems come back
// as a *Report of Diagnostics, each with the file and line at fault and the rule it broke, and never
// with a secret value.
package manifest
