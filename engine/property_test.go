package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

var (
	propSeed   = flag.Uint64("prop-seed", 20261201, "seed of TestValidateImpliesApply's generated repositories")
	propRounds = flag.Int("prop-rounds", 3, "repositories TestValidateImpliesApply generates")
)

// genRepo generates a repository of stands on the example's base: names drawn so that some collide
// (env two + node node-db against env two-node + node db), some are too long for a label or a unit,
// node counts of one to three, kv instances sharing ports on a node, ids declared twice.
func genRepo(rng *rand.Rand, base fstest.MapFS, owner string, n int) fstest.MapFS {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	fsys := fstest.MapFS{}
	for p, f := range base {
		if !strings.HasPrefix(p, "stands/") {
			fsys[p] = f
		}
	}
	long := func(k int) string { return strings.Repeat("e", k) }
	for i := range n {
		env := pick("two", "two-node", "x", "y", "z", long(40+rng.IntN(20)))
		if owner == "r0" && i < 2 {
			// The known hard case first: both make the server <owner>-p-two-node-db.
			env = []string{"two", "two-node"}[i]
			fsys[fmt.Sprintf("stands/s%d/stand.yml", i)] = &fstest.MapFile{Data: []byte(fmt.Sprintf(
				"from_dep_manifest: ../../bases/common.yml\nstand:\n  project: p\n  env: %s\n  owner: %s\nnodes:\n  %s:\n    profile: small\n    apps: [kv/cache]\napps:\n  kv:\n    instances:\n      cache: {preferences: {port: 6379}}\n",
				env, owner, []string{"node-db", "db"}[i]))}
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "from_dep_manifest: ../../bases/common.yml\nstand:\n  project: %s\n  env: %s\n  owner: %s\nnodes:\n",
			pick("p", "shop", "p-x", "q", "web"), env, owner)
		var nodes []string
		for range 1 + rng.IntN(3) {
			if nd := pick("db", "node-db", "web", "n"); !slices.Contains(nodes, nd) {
				nodes = append(nodes, nd)
			}
		}
		placed := map[string][]string{}
		var insts []string
		for k := range 1 + rng.IntN(3) { // the base's kv needs an instance
			name := pick("cache", "store", fmt.Sprintf("c%d", k), "cache", "store", strings.Repeat("q-", 60)+"q")
			if slices.Contains(insts, name) {
				continue
			}
			insts = append(insts, name)
			nd := nodes[rng.IntN(len(nodes))]
			placed[nd] = append(placed[nd], "kv/"+name)
		}
		for _, nd := range nodes {
			fmt.Fprintf(&b, "  %s:\n    profile: small\n    apps: [%s]\n", nd, strings.Join(placed[nd], ", "))
		}
		if len(insts) > 0 {
			b.WriteString("apps:\n  kv:\n    instances:\n")
			for _, in := range insts {
				fmt.Fprintf(&b, "      %s:\n        preferences: {port: %s}\n", in, pick("6379", "6380"))
			}
		}
		fsys[fmt.Sprintf("stands/s%d/stand.yml", i)] = &fstest.MapFile{Data: []byte(b.String())}
	}
	return fsys
}

// TestValidateImpliesApply is a property over generated repositories: when validate passes a stand, a
// servers-only apply of it against hcloudsim, after the stands before it, succeeds (not only its
// preflight); when validate fails one, every diagnostic names a rule of manifest.Rules.
func TestValidateImpliesApply(t *testing.T) {
	f := newFixture(t)
	base, err := testfs.Dir("../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(*propSeed, 0))
	ctx := context.Background()
	src := manifest.EnvSource{Lookup: func(k string) (string, bool) { v, ok := exampleSecrets[k]; return v, ok }}
	valid, invalid := 0, 0
	rules := map[string]int{}
	for round := range *propRounds {
		fsys := genRepo(rng, base, fmt.Sprintf("r%d", round), 5)
		paths, err := manifest.Discover(fsys)
		if err != nil || len(paths) != 5 {
			t.Fatalf("discover: %v %v", paths, err)
		}
		results, err := manifest.PreflightAll(ctx, fsys, paths, manifest.PreflightOptions{Secrets: src})
		var rep *manifest.Report
		if err != nil && !errors.As(err, &rep) {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, res := range results {
			if res.Err != nil {
				invalid++
				for _, d := range res.Err.Diags {
					rules[d.Rule]++
					if !slices.Contains(manifest.Rules, d.Rule) {
						t.Errorf("round %d %s: a diagnostic without a known rule: %v", round, res.File, d)
					}
				}
				continue
			}
			valid++
			hash, err := manifest.SpecHash(fsys, res.Stand, res.Secrets, "prop")
			if err != nil {
				t.Fatal(err)
			}
			in := stands.Input{FS: fsys, Stand: res.Stand, Secrets: res.Secrets, SpecHash: hash}
			if _, err := f.eng.Apply(ctx, in, false); err != nil {
				t.Errorf("round %d: validate passed %s (%s) but its apply failed: %v\n%s", round, res.File, res.Stand.ID, err, fsys[res.File].Data)
			}
		}
	}
	// The corpus must exercise both sides, or the property says nothing.
	if valid < 3 || invalid < 3 {
		t.Fatalf("the generated corpus has %d valid and %d invalid stands: change -prop-seed or the generator", valid, invalid)
	}
	t.Logf("%d stands applied, %d refused by validate (diagnostics by rule: %v)", valid, invalid, rules)
}
