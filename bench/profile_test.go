//go:build bench

package bench

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestProfile profiles the daemon on the large repository (BENCH_STANDS stands, 10000): a CPU
// profile of warm no-op cycles and one of the first cycles after a restart, and the heap after
// both, written to BENCH_PROFILE_DIR (a new folder under the system's temporary one when unset) for
// `go tool pprof`. Not part of make bench: it measures nothing against a baseline, it shows where
// a cycle's time and memory go (docs/performance.md#what-grows-with-the-number-of-stands-and-why).
func TestProfile(t *testing.T) {
	n := 10000
	if v := os.Getenv("BENCH_STANDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 30 {
			t.Fatalf("BENCH_STANDS=%q: want one size, 30 or more", v)
		}
	}
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "stands-profile-"); err != nil {
			t.Fatal(err)
		}
	}
	l := setUpLarge(t, buildReconcilerTags(t, "pprof"), n, nil)
	d := l.d
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	d.env = append(d.env, "STANDS_PPROF_LISTEN="+addr)
	save := func(name, path string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %s", name, err, resp.Status)
		}
		t.Logf("wrote %s", filepath.Join(dir, name))
	}

	// The first start commits STATUS.md; the cycles after it are the warm ones.
	d.start()
	d.waitFor("13 cycles", 20*time.Minute, func() bool { return d.cycles() >= 13 })
	save("cpu-warm.pprof", "/debug/pprof/profile?seconds=30")
	save("heap-warm.pprof", "/debug/pprof/heap?gc=1")
	d.stop()

	// A restart: the profile starts with the process, before its first cycle.
	d.start()
	wait := time.Now()
	for {
		if resp, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Since(wait) > time.Minute {
			t.Fatal("the pprof listener did not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}
	save("cpu-restart.pprof", "/debug/pprof/profile?seconds=30")
	save("heap-restart.pprof", "/debug/pprof/heap?gc=1")
	t.Logf("cycles in the restart's 30 s: %d", d.cycles())
	d.stop()
}
