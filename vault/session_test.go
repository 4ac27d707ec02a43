package vault

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestSessionLogsInLateAndCloses: a session opened while Vault is down waits for it (ErrUnavailable,
// no panic, no exit) and logs in once it answers; Close stops the renewal it started and returns.
func TestSessionLogsInLateAndCloses(t *testing.T) {
	v := testenv.StartVault(t)
	put(t, v.Client(t), "stands/kv-password", map[string]any{"value": "kv-SENTINEL"})
	v.Stop(t)
	s := Open(v.Addr, TokenFile(writeFile(t, "token", v.RootToken)), slog.New(slog.DiscardHandler), WithPrefix("stands"))
	ctx := context.Background()
	r := manifest.SecretRef{Path: "kv-password", Field: "value"}
	if _, err := s.Secret(ctx, r); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Vault down: %v", err)
	}
	v.Start(t)
	v.Unseal(t)
	if got, err := s.Secret(ctx, r); err != nil || got != "kv-SENTINEL" {
		t.Fatalf("after Vault came back: %q, %v", got, err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return: the renewal goroutine is still running")
	}
	unused := Open(v.Addr, Token(v.RootToken), slog.New(slog.DiscardHandler))
	unused.Close()
	if _, err := unused.Secret(ctx, r); err == nil {
		t.Error("a closed session logs in")
	}
}
