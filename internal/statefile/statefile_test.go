package statefile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "state.json")
	var got map[string]int
	if found, err := Read(p, &got); found || err != nil {
		t.Fatalf("a missing file: found %v, %v", found, err)
	}
	if err := Write(p, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if found, err := Read(p, &got); !found || err != nil || got["a"] != 1 {
		t.Fatalf("read back: %v %v %v", got, found, err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the file written aside is left: %v", err)
	}
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if found, err := Read(p, &got); !found || err == nil {
		t.Errorf("a broken file: found %v, err %v; want an error", found, err)
	}
	if found, err := Read("", &got); found || err != nil || Write("", got) != nil {
		t.Errorf("\"\" keeps nothing: %v %v", found, err)
	}
}

// TestDoc: a document in one file reads what the last process saved, and nothing more at the
// version it gave.
func TestDoc(t *testing.T) {
	p := filepath.Join(t.TempDir(), "doc.json")
	ctx := t.Context()
	d := NewDoc(p)
	if body, v, err := d.Load(ctx, -1); body != nil || v != 1 || err != nil {
		t.Fatalf("a missing file: %q, version %d, %v", body, v, err)
	}
	if next, ok, err := d.Save(ctx, []byte(`{"a":1}`), 1); next != 1 || !ok || err != nil {
		t.Fatalf("save: %d %v %v", next, ok, err)
	}
	if body, _, err := NewDoc(p).Load(ctx, -1); string(body) != `{"a":1}` || err != nil {
		t.Errorf("read by the next process: %q, %v", body, err)
	}
	if body, _, _ := d.Load(ctx, 1); body != nil {
		t.Errorf("a load at the known version read %q", body)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the file: %v, %v", st, err)
	}
}
