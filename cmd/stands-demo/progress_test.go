package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The story shows an apply's events from the reconciler's log as they are written: each once, a
// line being written only when it is whole, a preview's steps and other messages not at all.
func TestProgress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stands-reconciler.log")
	p := progress{path: path}
	if got := p.next(); got != nil {
		t.Errorf("no log yet: %v", got)
	}
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	strs := func(ls []progressLine) (out []string) {
		for _, l := range ls {
			out = append(out, l.Stand+" "+l.String())
		}
		return out
	}
	write(`{"msg":"cycle planned","create":1}
{"msg":"resource done","stand":"a","step":"create","type":"stands:index:Server","name":"main"}
{"msg":"resource done","stand":"pr","step":"create","type":"stands:index:Server","name":"x","planning":true}
not json
{"msg":"node work","stand":"a","name":"main","message":"connecting to 127.0.10.1:22"}
{"msg":"node work","stand":"a","name":"main","mess`)
	want := []string{"a created Server main", "a main: connecting to 127.0.10.1:22"}
	if got := strs(p.next()); !slices.Equal(got, want) {
		t.Errorf("first read: %q, want %q", got, want)
	}
	write(`age":"setting up 127.0.10.1"}
`)
	want = []string{"a main: setting up 127.0.10.1"}
	if got := strs(p.next()); !slices.Equal(got, want) {
		t.Errorf("after the line was finished: %q, want %q", got, want)
	}
	if got := p.next(); got != nil {
		t.Errorf("nothing new: %v", got)
	}
}
