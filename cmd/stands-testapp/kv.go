package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Redis part: `stands-testapp redis-server CONF` serves the few commands the example kv app's
// hook and the web app use (AUTH, PING, ECHO, GET, SET, QUIT), inline or as RESP arrays, with the
// port, bind address and requirepass of a redis.conf. It lets the example stand run unchanged on a
// test image.

type kvConfig struct {
	addr, password string
}

func readKVConfig(file string) (kvConfig, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return kvConfig{}, err
	}
	c := kvConfig{}
	port, bind := "6379", "0.0.0.0"
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToLower(f[0]) {
		case "port":
			port = f[1]
		case "bind":
			bind = f[1]
		case "requirepass":
			c.password = f[1]
		}
	}
	c.addr = net.JoinHostPort(bind, port)
	return c, nil
}

func runKV(ctx context.Context, file string) error {
	cfg, err := readKVConfig(file)
	if err != nil {
		return fmt.Errorf("redis config: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	slog.Info("stands-testapp kv listening", "addr", cfg.addr)
	go func() { <-ctx.Done(); ln.Close() }()
	s := &kvStore{data: map[string]string{}}
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go s.serve(c, cfg.password)
	}
}

type kvStore struct {
	mu   sync.Mutex
	data map[string]string
}

func (s *kvStore) serve(c net.Conn, password string) {
	defer c.Close()
	r := bufio.NewReader(c)
	authed := password == ""
	for {
		_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
		args, err := readCommand(r)
		if err != nil || len(args) == 0 {
			return
		}
		cmd := strings.ToUpper(args[0])
		reply := ""
		switch {
		case cmd == "QUIT":
			fmt.Fprint(c, "+OK\r\n")
			return
		case cmd == "AUTH":
			if len(args) > 1 && args[len(args)-1] == password {
				authed, reply = true, "+OK\r\n"
			} else {
				reply = "-WRONGPASS invalid username-password pair\r\n"
			}
		case !authed:
			reply = "-NOAUTH Authentication required.\r\n"
		case cmd == "PING":
			reply = "+PONG\r\n"
		case cmd == "ECHO" && len(args) == 2:
			reply = bulk(args[1])
		case cmd == "SET" && len(args) == 3:
			s.mu.Lock()
			s.data[args[1]] = args[2]
			s.mu.Unlock()
			reply = "+OK\r\n"
		case cmd == "GET" && len(args) == 2:
			s.mu.Lock()
			v, ok := s.data[args[1]]
			s.mu.Unlock()
			reply = "$-1\r\n"
			if ok {
				reply = bulk(v)
			}
		default:
			reply = "-ERR unknown command '" + args[0] + "'\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// readCommand reads a RESP array of bulk strings or an inline command line.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 64 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, 0, n)
	for range n {
		hdr, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimRight(strings.TrimPrefix(hdr, "$"), "\r\n"))
		if err != nil || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("bad bulk header %q", hdr)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args = append(args, string(buf[:size]))
	}
	return args, nil
}

// askKV sends AUTH (when a password is given) and one command to a kv server and returns the reply
// line: what the web app's /backend shows.
func askKV(addr, password string, cmd ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	send := func(args ...string) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			b.WriteString(bulk(a))
		}
		if _, err := io.WriteString(c, b.String()); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if err == nil && strings.HasPrefix(line, "$") && line != "$-1" {
			var v string
			v, err = r.ReadString('\n')
			line = strings.TrimRight(v, "\r\n")
		}
		return line, err
	}
	if password != "" {
		if reply, err := send("AUTH", password); err != nil || reply != "+OK" {
			return "", fmt.Errorf("auth: %q %v", reply, err)
		}
	}
	return send(cmd...)
}
