package main

import (
	"bufio"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
)

// TestServeAndRestart runs the command, talks to it with hcloud-go, stops it with a cancelled
// context, and starts it again on the same state file.
func TestServeAndRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	serve := func() (string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-token", "tok", "-state", state, "-action-delay", "10ms", "-example-project"}, pw, io.Discard)
			pw.Close()
		}()
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil {
			t.Fatalf("no endpoint printed: %v", err)
		}
		go io.Copy(io.Discard, pr)
		return strings.TrimSpace(line), func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("exit code %d", code)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("did not stop")
			}
		}
	}
	endpoint, stop := serve()
	c := hcloud.NewClient(hcloud.WithEndpoint(endpoint), hcloud.WithToken("tok"))
	ctx := context.Background()
	if _, _, err := c.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "kept", ServerType: &hcloud.ServerType{Name: "cx22"}, Image: &hcloud.Image{Name: "debian-12"}}); err != nil {
		t.Fatal(err)
	}
	stop()
	endpoint, stop = serve()
	defer stop()
	c = hcloud.NewClient(hcloud.WithEndpoint(endpoint), hcloud.WithToken("tok"))
	srv, _, err := c.Server.GetByName(ctx, "kept")
	if err != nil || srv == nil {
		t.Fatalf("server lost over a restart: %v", err)
	}
	// Seeding twice keeps one network and one key.
	nets, err := c.Network.All(ctx)
	keys, err2 := c.SSHKey.All(ctx)
	if err != nil || err2 != nil || len(nets) != 1 || nets[0].Name != "stands-net" || len(keys) != 1 || keys[0].Name != "stands-admin" {
		t.Fatalf("the example project: %d networks, %d keys (%v %v)", len(nets), len(keys), err, err2)
	}
}

func TestBadFlags(t *testing.T) {
	if code := run(context.Background(), []string{"-machine", "nope"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("unknown backend: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"-bogus"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
}
