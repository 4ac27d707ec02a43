// Command stands-testapp is the app the end-to-end tests deploy into stands: an HTTP server and a TCP
// echo server configured by environment variables and a mounted config file, able to call a peer, so
// a test can prove that the app on one node reaches the app on another ("B reaches A").
//
//	LISTEN       HTTP address (":8080")
//	ECHO_LISTEN  TCP echo address (":9000"; "off": none)
//	CONFIG_FILE  a file whose first line is the greeting (else GREETING, else "hello")
//	PEER         base URL of another instance, fetched by GET /peer
//	BACKEND_ADDR, BACKEND_PASSWORD  a kv server (below), asked by GET /backend
//	ENV_FILE     a file of KEY=VALUE lines giving any of the above (the environment wins)
//
// GET / answers "<greeting> from <hostname>"; GET /peer answers "peer said: <the peer's />";
// GET /backend answers "backend <addr> said: <reply to PING>"; GET /healthz answers "ok".
//
// `stands-testapp redis-server CONF` is a small Redis-protocol server instead (kv.go).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) == 3 && os.Args[1] == "redis-server" {
		if err := runKV(ctx, os.Args[2]); err != nil {
			slog.Error("stands-testapp kv", "err", err)
			os.Exit(1)
		}
		return
	}
	getenv, err := withEnvFile(os.Getenv)
	if err != nil {
		slog.Error("stands-testapp", "err", err)
		os.Exit(1)
	}
	if err := run(ctx, getenv); err != nil {
		slog.Error("stands-testapp", "err", err)
		os.Exit(1)
	}
}

func env(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

// withEnvFile reads ENV_FILE's KEY=VALUE lines (# comments) as defaults under the environment.
func withEnvFile(getenv func(string) string) (func(string) string, error) {
	file := getenv("ENV_FILE")
	if file == "" {
		return getenv, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("ENV_FILE: %w", err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			vars[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return vars[k]
	}, nil
}

func greeting(getenv func(string) string) string {
	if f := getenv("CONFIG_FILE"); f != "" {
		if data, err := os.ReadFile(f); err == nil {
			line, _, _ := strings.Cut(string(data), "\n")
			return strings.TrimSpace(line)
		}
	}
	return env(getenv, "GREETING", "hello")
}

func handler(getenv func(string) string) http.Handler {
	host, _ := os.Hostname()
	client := &http.Client{Timeout: 10 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s from %s\n", greeting(getenv), host)
	})
	mux.HandleFunc("GET /backend", func(w http.ResponseWriter, _ *http.Request) {
		addr := getenv("BACKEND_ADDR")
		if addr == "" {
			http.Error(w, "no BACKEND_ADDR configured", http.StatusNotFound)
			return
		}
		reply, err := askKV(addr, getenv("BACKEND_PASSWORD"), "PING")
		if err != nil {
			http.Error(w, "backend "+addr+": "+err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, "backend %s said: %s\n", addr, reply)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /peer", func(w http.ResponseWriter, _ *http.Request) {
		peer := getenv("PEER")
		if peer == "" {
			http.Error(w, "no PEER configured", http.StatusNotFound)
			return
		}
		resp, err := client.Get(strings.TrimSuffix(peer, "/") + "/")
		if err != nil {
			http.Error(w, "peer: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		fmt.Fprintf(w, "peer said: %s", body)
	})
	return mux
}

func run(ctx context.Context, getenv func(string) string) error {
	srv := &http.Server{Addr: env(getenv, "LISTEN", ":8080"), Handler: handler(getenv), ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- srv.ListenAndServe() }()
	if addr := env(getenv, "ECHO_LISTEN", ":9000"); addr != "off" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() { errs <- echo(ln) }()
	}
	slog.Info("stands-testapp listening", "http", srv.Addr, "greeting", greeting(getenv))
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errs:
		return err
	}
}

// echo answers each line with the same line.
func echo(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				if _, err := fmt.Fprintf(c, "%s\n", sc.Text()); err != nil {
					return
				}
			}
		}()
	}
}
