package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestReadUnit: the stop timeout of a unit, with its drop-ins in systemd's order (a [Service] one
// only), as systemd.time(7) writes time spans.
func TestReadUnit(t *testing.T) {
	shipped, err := ReadUnit(filepath.Join(testenv.RepoRoot(), "deploy", "stands-reconciler.service"))
	if err != nil || shipped.TimeoutStop != 15*time.Minute {
		t.Errorf("deploy's unit: %+v, %v; want TimeoutStopSec 15min", shipped, err)
	}
	alone, err := ReadUnit(filepath.Join("testdata", "unit", "short.service"))
	if err != nil || alone.TimeoutStop != 5*time.Minute || alone.Where != filepath.Join("testdata", "unit", "short.service")+":6" {
		t.Errorf("without drop-ins: %+v, %v", alone, err)
	}
	dropped, err := ReadUnit(filepath.Join("testdata", "unit", "short.service"), filepath.Join("testdata", "unit"))
	if err != nil || dropped.TimeoutStop != 20*time.Minute+30*time.Second || !strings.HasSuffix(dropped.Where, "10-longer.conf:3") {
		t.Errorf("with its drop-ins: %+v, %v", dropped, err)
	}
	for in, want := range map[string]time.Duration{"900": 15 * time.Minute, "15min": 15 * time.Minute, "1h 2m 3s": time.Hour + 2*time.Minute + 3*time.Second,
		"infinity": -1, "": 0, "1.5s": 1500 * time.Millisecond, "250ms": 250 * time.Millisecond} {
		if got, err := parseTimespan(in); err != nil || got != want {
			t.Errorf("parseTimespan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"soon", "5 fortnights", "-3s"} {
		if _, err := parseTimespan(in); err == nil {
			t.Errorf("parseTimespan(%q): no error", in)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.service")
	if err := os.WriteFile(bad, []byte("[Service]\nTimeoutStopSec=soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadUnit(bad); err == nil || !strings.Contains(err.Error(), "bad.service:2: TimeoutStopSec") {
		t.Errorf("a bad time span: %v", err)
	}
}
