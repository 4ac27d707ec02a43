package judge

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// secrets is a store of the example's two secrets that counts its reads.
type secrets struct{ reads int }

func (s *secrets) Secret(_ context.Context, ref manifest.SecretRef) (string, error) {
	s.reads++
	return "a-value-of-" + ref.Path, nil
}

// TestKeptJudgement: each case judges the example repository (with its "before/" files), then a
// commit on it (its "after/" files, "delete", "symlinks", "large") twice: keeping what it can of
// the first judgement, and from nothing. Both must say the same of every stand, and the first
// must have judged anew exactly the manifests "want" names: a stand is kept only while everything
// it read reads the same.
func TestKeptJudgement(t *testing.T) {
	base, err := testfs.Dir(testenv.RepoRoot() + "/examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	cases, _ := filepath.Glob("testdata/keep/*.txt")
	if len(cases) == 0 {
		t.Fatal("no cases in testdata/keep")
	}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, file := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			a := testfs.Parse(string(data))
			before, after := overlay(base, a, "before/"), fstest.MapFS{}
			for p, f := range before {
				after[p] = f
			}
			after = overlay(after, a, "after/")
			for p := range strings.FieldsSeq(a["delete"]) {
				delete(after, p)
			}
			links, large := map[string]string{}, map[string]int64{}
			for line := range strings.Lines(a["symlinks"]) {
				from, to, _ := strings.Cut(strings.TrimSpace(line), " -> ")
				links[from] = to
				delete(after, from)
			}
			for p := range strings.FieldsSeq(a["large"]) {
				large[p] = repofs.MaxFileSize + 1
				delete(after, p)
			}
			o := Options{Owner: "local", Passphrase: "a passphrase", Now: now}
			src := &secrets{}
			o.Secrets = src
			first, err := Evaluate(context.Background(), repofs.Tree(before, nil, nil), o)
			if err != nil {
				t.Fatal(err)
			}
			if len(first.Judged) != 3 {
				t.Fatalf("the first judgement judged %v, want the three stands", first.Judged)
			}
			tree := repofs.Tree(after, links, large)
			kept := o
			kept.Previous, kept.Now, src.reads = first, now.Add(time.Minute), 0
			got, err := Evaluate(context.Background(), tree, kept)
			if err != nil {
				t.Fatal(err)
			}
			reads := src.reads
			fresh := o
			fresh.Now = kept.Now
			want, err := Evaluate(context.Background(), tree, fresh)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := verdicts(got), verdicts(want); !slices.Equal(g, w) {
				t.Errorf("kept from the first judgement:\n%s\nfrom nothing:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
			}
			if !slices.Equal(got.Unreadable, want.Unreadable) {
				t.Errorf("unreadable: %q, from nothing %q", got.Unreadable, want.Unreadable)
			}
			if w := strings.Fields(a["want"]); !slices.Equal(got.Judged, w) {
				t.Errorf("judged anew %q, want %q", got.Judged, w)
			}
			if len(got.Judged) == 0 && reads != 0 {
				t.Errorf("no stand judged anew, yet %d secret reads", reads)
			}
		})
	}
}

// TestKeptJudgementExpires: a stand is judged again once it was judged KeepFor ago, and when
// Forget names it, whatever it read.
func TestKeptJudgementExpires(t *testing.T) {
	base, err := testfs.Dir(testenv.RepoRoot() + "/examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	tree := repofs.Tree(base, nil, nil)
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	o := Options{Owner: "local", Passphrase: "a passphrase", Secrets: &secrets{}, Now: now, KeepFor: 5 * time.Minute}
	first, err := Evaluate(context.Background(), tree, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		after  time.Duration
		forget string
		want   int
	}{
		{"within KeepFor", 4 * time.Minute, "", 0},
		{"after KeepFor", 5 * time.Minute, "", 3},
		{"forgotten", time.Minute, "local_demo_single", 1},
	} {
		next := o
		next.Previous, next.Now = first, now.Add(c.after)
		next.Forget = func(id string) bool { return id == c.forget }
		ev, err := Evaluate(context.Background(), tree, next)
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.Judged) != c.want {
			t.Errorf("%s: judged anew %q, want %d stands", c.name, ev.Judged, c.want)
		}
		if c.want == 0 && !ev.Oldest().Equal(now) {
			t.Errorf("%s: oldest judgement %s, want the first's %s", c.name, ev.Oldest(), now)
		}
	}
	other := o
	other.Previous, other.Passphrase = first, "another passphrase"
	if ev, err := Evaluate(context.Background(), tree, other); err != nil || len(ev.Judged) != 3 {
		t.Errorf("another passphrase: judged anew %v (%v), want every stand", ev.Judged, err)
	}
}

// verdicts are what a judgement says of each stand, one line each.
func verdicts(ev *Evaluation) []string {
	var out []string
	for _, v := range ev.Verdicts {
		line := v.ID + " " + v.File + " " + string(v.Reason) + " " + v.Problem
		if v.Input != nil {
			line += " input " + v.Input.SpecHash
		}
		out = append(out, line)
	}
	return out
}

func overlay(base fstest.MapFS, a testfs.Archive, prefix string) fstest.MapFS {
	out := fstest.MapFS{}
	for p, f := range base {
		out[p] = f
	}
	for name, body := range a {
		if p, ok := strings.CutPrefix(name, prefix); ok {
			out[p] = &fstest.MapFile{Data: []byte(body), Mode: 0o644}
		}
	}
	return out
}

// TestKeptRecordIsItsJudgements: what reads a kept stand's files through a later judgement's input
// (another tree: a pull request's merge) is recorded for that judgement alone, never in the record
// the earlier judgement keeps for the next commit.
func TestKeptRecordIsItsJudgements(t *testing.T) {
	base, err := testfs.Dir(testenv.RepoRoot() + "/examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Owner: "local", Passphrase: "a passphrase", Secrets: &secrets{}, Now: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
	first, err := Evaluate(context.Background(), repofs.Tree(base, nil, nil), o)
	if err != nil {
		t.Fatal(err)
	}
	other := fstest.MapFS{"README.md": &fstest.MapFile{Data: []byte("another tree")}}
	for p, f := range base {
		if _, ok := other[p]; !ok {
			other[p] = f
		}
	}
	next := o
	next.Previous = first
	second, err := Evaluate(context.Background(), repofs.Tree(other, nil, nil), next)
	if err != nil {
		t.Fatal(err)
	}
	const file = "stands/single/stand.yml"
	in := second.Input("local_demo_single")
	if in == nil || slices.Contains(second.Judged, file) {
		t.Fatalf("the stand was not kept: judged anew %v", second.Judged)
	}
	kept, mine := first.judged[file].res.Reads.Len(), second.judged[file].res.Reads.Len()
	if _, err := fs.ReadFile(in.FS, "README.md"); err != nil {
		t.Fatal(err)
	}
	if n := first.judged[file].res.Reads.Len(); n != kept {
		t.Errorf("a read through the later judgement's input went into the earlier one's record: %d reads, was %d", n, kept)
	}
	if n := second.judged[file].res.Reads.Len(); n != mine+1 {
		t.Errorf("the later judgement's record has %d reads, want %d: the read is its own", n, mine+1)
	}
}
