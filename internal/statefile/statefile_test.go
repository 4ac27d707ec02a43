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
