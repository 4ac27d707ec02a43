package credential

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/wait"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string // substring; "" for none
	}{
		{"value", map[string]string{"TOK": "v"}, "v", ""},
		{"file, trimmed", map[string]string{"TOK_FILE": file}, "from-file", ""},
		{"both: an error naming both", map[string]string{"TOK": "v", "TOK_FILE": file}, "", "both TOK and TOK_FILE are set"},
		{"neither", nil, "", "TOK (or TOK_FILE) is not set"},
		{"missing file", map[string]string{"TOK_FILE": filepath.Join(dir, "nope")}, "", "read TOK_FILE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) string { return c.env[k] }
			got, err := Read(getenv, "TOK")
			if c.wantErr == "" && (err != nil || got != c.want) {
				t.Fatalf("Read = %q, %v; want %q", got, err, c.want)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("Read error %v, want %q", err, c.wantErr)
			}
			if c.name == "neither" && !errors.Is(err, ErrNotSet) {
				t.Errorf("not ErrNotSet: %v", err)
			}
			// Watch follows the same rule, except that neither set is an empty credential.
			w, err := Watch(getenv, "TOK", slog.New(slog.DiscardHandler))
			switch {
			case c.wantErr != "" && c.name != "neither":
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("Watch error %v, want %q", err, c.wantErr)
				}
			case err != nil:
				t.Errorf("Watch: %v", err)
			default:
				if v, _ := w.Value(); v != c.want || w.Set() != (c.want != "") {
					t.Errorf("Watch value %q set %v", v, w.Set())
				}
				w.Close()
			}
		})
	}
}

// TestWatchRotatesAndCloses: a replaced file is picked up without a restart; after Close nothing
// reads the file any more.
func TestWatchRotatesAndCloses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	write := func(v string) {
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil { // as systemd and credential managers do
			t.Fatal(err)
		}
	}
	write("one")
	c, err := Watch(func(k string) string { return map[string]string{"TOK_FILE": file}[k] }, "TOK", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	write("two")
	wait.For(t, "the rotated value picked up", 10*time.Second, func() bool { v, _ := c.Value(); return v == "two" }, wait.Every(20*time.Millisecond))
	c.Close()
	write("three")
	time.Sleep(300 * time.Millisecond) // three debounce periods
	if v, _ := c.Value(); v != "two" {
		t.Errorf("read after Close: %q", v)
	}
}
