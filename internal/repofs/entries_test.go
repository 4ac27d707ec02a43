package repofs

import (
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"
)

// TestEntriesRoundTrip: a commit's tree listed and put back together reads as it did: files, links
// that refuse to be read, large files that refuse to open. Entries are the same only where they read
// the same.
func TestEntriesRoundTrip(t *testing.T) {
	tree := Tree(fstest.MapFS{"a/f": {Data: []byte("f")}, "g": {Data: []byte("g")}},
		map[string]string{"a/link": "../g"}, map[string]int64{"big": MaxFileSize + 5})
	entries, err := Entries(tree)
	if err != nil {
		t.Fatal(err)
	}
	back := FromEntries(entries)
	if data, err := fs.ReadFile(back, "a/f"); err != nil || string(data) != "f" {
		t.Errorf("a/f: %q %v", data, err)
	}
	if _, err := fs.ReadFile(back, "a/link"); !errors.Is(err, ErrSymlink) {
		t.Errorf("a link reads: %v", err)
	}
	if _, err := back.Open("big"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a large file opens: %v", err)
	}
	again, err := Entries(back)
	if err != nil || len(again) != len(entries) {
		t.Fatalf("%d entries, then %d: %v", len(entries), len(again), err)
	}
	for p, e := range entries {
		if !e.Same(again[p]) {
			t.Errorf("%s changed in the round trip", p)
		}
	}
	// The same through the generic walk, on a plain MapFS with a link.
	plain, err := Entries(fstest.MapFS{"a/f": {Data: []byte("f")}, "a/link": {Data: []byte("../g"), Mode: fs.ModeSymlink}})
	if err != nil || !plain["a/f"].Same(entries["a/f"]) || !plain["a/link"].Same(entries["a/link"]) {
		t.Errorf("a plain tree lists %+v: %v", plain, err)
	}
	for _, c := range []struct {
		a, b Entry
		same bool
	}{
		{Entry{Data: []byte("x")}, Entry{Data: []byte("x")}, true},
		{Entry{Data: []byte("x")}, Entry{Data: []byte("y")}, false},
		{Entry{Data: []byte("../g")}, Entry{IsLink: true, Link: "../g"}, false},
		{Entry{IsLink: true, Link: "a"}, Entry{IsLink: true, Link: "b"}, false},
		{Entry{Large: true}, Entry{Large: true}, true},
		{Entry{Large: true}, Entry{}, false},
	} {
		if c.a.Same(c.b) != c.same || c.b.Same(c.a) != c.same {
			t.Errorf("%+v same as %+v: want %v", c.a, c.b, c.same)
		}
	}
}
