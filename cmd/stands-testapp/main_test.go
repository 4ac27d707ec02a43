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

	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
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
		return wait.Value(t, fmt.Sprintf("an answer on %d", port), 10*time.Second, func() (string, bool) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
			if err != nil {
				return "", false
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(body), true
		}, wait.Every(20*time.Millisecond))
	}
	if got := get(a, "/"); !strings.HasPrefix(got, "hello from A from ") {
		t.Errorf("A: %q", got)
	}
	if got := get(b, "/peer"); !strings.HasPrefix(got, "peer said: hello from A") {
		t.Errorf("B's peer call: %q", got)
	}
	// The echo port is bound after the HTTP server starts: dialled until it answers too.
	c := wait.Value(t, "the echo port", 10*time.Second, func() (net.Conn, bool) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", aEcho))
		return c, err == nil
	}, wait.Every(20*time.Millisecond))
	defer c.Close()
	fmt.Fprintln(c, "ping 42")
	if line, _ := bufio.NewReader(c).ReadString('\n'); line != "ping 42\n" {
		t.Errorf("echo: %q", line)
	}
}

// TestKVAndBackend: the kv mode answers the example kv hook's PING after AUTH and refuses without
// it; the web mode reads its env file and reports the backend's reply.
func TestKVAndBackend(t *testing.T) {
	dir := t.TempDir()
	kv := testenv.FreePort(t)
	conf := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("# test\nport %d\nbind 127.0.0.1\nrequirepass s3cret\n", kv)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = runKV(ctx, conf) }()
	addr := fmt.Sprintf("127.0.0.1:%d", kv)
	var reply string
	var err error
	for range 100 {
		if reply, err = askKV(addr, "s3cret", "PING"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if reply != "+PONG" {
		t.Fatalf("PING after AUTH: %q %v", reply, err)
	}
	if reply, err := askKV(addr, "", "PING"); !strings.HasPrefix(reply, "-NOAUTH") {
		t.Errorf("PING without AUTH: %q %v", reply, err)
	}
	if _, err := askKV(addr, "wrong", "PING"); err == nil {
		t.Error("a wrong password was accepted")
	}
	if _, err := askKV(addr, "s3cret", "SET", "k", "v w"); err != nil {
		t.Fatal(err)
	}
	if reply, _ := askKV(addr, "s3cret", "GET", "k"); reply != "v w" {
		t.Errorf("GET: %q", reply)
	}

	web := testenv.FreePort(t)
	env := filepath.Join(dir, "web.env")
	if err := os.WriteFile(env, []byte(fmt.Sprintf("# comment\nLISTEN=127.0.0.1:%d\nGREETING=hi\nBACKEND_ADDR=%s\nBACKEND_PASSWORD=s3cret\n", web, addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv, err := withEnvFile(func(k string) string { return map[string]string{"ENV_FILE": env, "ECHO_LISTEN": "off"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = run(ctx, getenv) }()
	var body string
	for range 100 {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/backend", web))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if want := "backend " + addr + " said: +PONG\n"; body != want {
		t.Errorf("/backend: %q, want %q", body, want)
	}
}
