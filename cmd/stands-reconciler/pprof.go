//go:build pprof

package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // the profiles, on the default mux of this listener alone
	"os"
)

// A build with the pprof tag (bench/profile_test.go) serves Go's profiles on the loopback address
// STANDS_PPROF_LISTEN: what a cycle spends its time and memory on, at a size the bench makes. A
// release build has no such listener.
func init() {
	addr := os.Getenv("STANDS_PPROF_LISTEN")
	if addr == "" {
		return
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(os.Stderr, "STANDS_PPROF_LISTEN=%q: want a loopback address and port\n", addr)
		os.Exit(2)
	}
	go func() {
		err := http.ListenAndServe(addr, nil)
		fmt.Fprintf(os.Stderr, "pprof listener: %v\n", err)
	}()
}
