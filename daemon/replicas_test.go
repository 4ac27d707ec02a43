package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestSeededDocument: until a replica writes a shared document, it reads as the file the reconciler
// kept without replicas; the first save creates it, and from then on the file is not read.
func TestSeededDocument(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	store, err := lease.New(ctx, pg.DB(t), "r0.a", lease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "reviews.json")
	doc := seeded{store.Document(reviewDocument), file}
	if body, v, err := doc.Load(ctx, -1); body != nil || v != 0 || err != nil {
		t.Fatalf("no document, no file: %q, version %d, %v", body, v, err)
	}
	if err := os.WriteFile(file, []byte(`{"baseline":"kept"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	body, v, err := doc.Load(ctx, -1)
	if string(body) != `{"baseline":"kept"}` || v != 0 || err != nil {
		t.Fatalf("no document, the file: %q, version %d, %v", body, v, err)
	}
	if _, ok, err := doc.Save(ctx, []byte(`{"baseline":"shared"}`), v); !ok || err != nil {
		t.Fatalf("the first save: %v %v", ok, err)
	}
	if body, v, err := doc.Load(ctx, -1); string(body) != `{"baseline":"shared"}` || v != 1 || err != nil {
		t.Errorf("once saved: %q, version %d, %v", body, v, err)
	}
	other := seeded{store.Document(reviewDocument), filepath.Join(t.TempDir(), "other.json")}
	if _, ok, _ := other.Save(ctx, []byte(`{"baseline":"late"}`), 0); ok {
		t.Error("a second replica's seed overwrote the document")
	}
}
