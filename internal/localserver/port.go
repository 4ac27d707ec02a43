package localserver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for servers that cannot be
// handed a listener.
func FreePort() (int, error) {
	// Below the kernel's ephemeral range: a server stopped and started again on the same port (Gitea,
	// Vault) must not find it taken by an outgoing connection meanwhile, which the ephemeral range is
	// for (seen: Gitea's SSH port, busy with a client's socket after a restart).
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 200 {
		port := 10000 + mrand.IntN(low-10000)
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port below %d", low)
}

// RandomHex is n random bytes in hex, for names and credentials made up on the spot.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Tail returns the last lines of log files, for failure messages.
func Tail(files ...string) string {
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}
