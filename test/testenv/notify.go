package testenv

import (
	"net"
	"path/filepath"
	"testing"
)

// NotifySocket listens where systemd would for a service's sd_notify messages: a datagram socket
// whose path goes in NOTIFY_SOCKET. Each message read arrives on the channel; the socket closes with
// the test.
func NotifySocket(t testing.TB) (path string, got <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	out := make(chan string, 1000)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			out <- string(buf[:n])
		}
	}()
	return path, out
}
