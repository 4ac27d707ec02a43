package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/testenv"
)

func TestAppAndPeer(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "app.conf")
	if err := os.WriteFile(cfg, []byte("hello from A\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, aEcho := testenv.FreePort(t), testenv.FreePort(t)
	b := testenv.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func(vars map[string]string) {
		go func() { _ = run(ctx, func(k string) string { return vars[k] }) }()
	}
	start(map[string]string{"LISTEN": fmt.Sprintf("127.0.0.1:%d", a), "ECHO_LISTEN": fmt.Sprintf("127.0.0.1:%d", aEcho), "CONFIG_FILE": cfg})
	start(map[string]string{"LISTEN": fmt.Sprintf("127.0.0.1:%d", b), "ECHO_LISTEN": "off", "GREETING": "B", "PEER": fmt.Sprintf("http://127.0.0.1:%d", a)})
	get := func(port int, path string) string {
		t.Helper()
		for range 100 {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return string(body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no answer on %d", port)
		return ""
	}
	if got := get(a, "/"); !strings.HasPrefix(got, "hello from A from ") {
		t.Errorf("A: %q", got)
	}
	if got := get(b, "/peer"); !strings.HasPrefix(got, "peer said: hello from A") {
		t.Errorf("B's peer call: %q", got)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", aEcho))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintln(c, "ping 42")
	if line, _ := bufio.NewReader(c).ReadString('\n'); line != "ping 42\n" {
		t.Errorf("echo: %q", line)
	}
}
