package prplan

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/sandbox"
	"github.com/stands-engine/stands-reconciler/test/fakes"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestMain makes the test binary a render sandbox child too, as main does for the real binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Command {
		if _, err := sandbox.Child(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		if err := ServeRender(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testSandbox runs render jobs in this test binary with small limits.
func testSandbox(t *testing.T, lim sandbox.Limits) Sandbox {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, job string, cpu time.Duration, w func(io.Writer) error, r func(io.Reader) error) (time.Duration, error) {
		l := lim
		if cpu > 0 && cpu < l.CPU {
			l.CPU = cpu
		}
		return sandbox.Run(ctx, exe, job, l, w, r)
	}
}

// bombs are pull request templates that never finish or grow without bound; none writes much.
var bombs = map[string]string{
	"cpu":    "{{ range 1000000000 }}{{ range 1000000000 }}{{ end }}{{ end }}\n",
	"memory": `{{ $x := "aaaaaaaa" }}{{ range 40 }}{{ $x = printf "%s%s" $x $x }}{{ end }}` + "\n",
	"output": `{{ range 1000000000 }}aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa{{ end }}` + "\n",
}

// TestTemplateBombsStopInTheSandbox: each bomb fails its stand in the plan within seconds, naming
// the stand's file and the limit, while the pull request's other stand is planned, and the
// reconciler's own memory does not grow with the bomb.
func TestTemplateBombsStopInTheSandbox(t *testing.T) {
	for name, bomb := range bombs {
		t.Run(name, func(t *testing.T) {
			h, f := newPreviewHarness(t, "a")
			lim := sandbox.Limits{CPU: 2 * time.Second, Memory: 512 << 20, Wall: 20 * time.Second}
			if name == "memory" {
				// The memory bomb's copies cost CPU time too (page faults, the race detector's
				// shadow): on a busy machine it passed 2 s before 512 MiB. Here only the memory
				// limit may stop it.
				lim.CPU = 15 * time.Second
			}
			h.pl.cfg.Sandbox = testSandbox(t, lim)
			h.mustCycle()
			change := map[string]string{"apps/web/index.html": "", fakes.StandFile("a"): strings.Replace(fakes.StandYML("a", ""), "apps: [kv]", "apps: [kv, bomb]", 1) +
				"  bomb:\n    package: ../../apps/bomb\n    instances:\n      x: {}\n",
				"apps/bomb/app.yml":   "images: [\"registry.example.test/bomb:1\"]\nfiles:\n  - src: bomb.tmpl\n    dest: /tmp/bomb\npod: pod.yaml.tmpl\n",
				"apps/bomb/bomb.tmpl": bomb, "apps/bomb/pod.yaml.tmpl": podOf(t, h),
				fakes.StandFile("c"): fakes.StandYML("c", "")}
			f.Open(1, "head1", h.files(), change, true)
			before := peakRSS(t)
			start := time.Now()
			h.mustCycle()
			took := time.Since(start)
			grew := peakRSS(t) - before
			c := f.Comment(1)
			if !strings.Contains(c, "`local_a_dev` | ❌ invalid") || !strings.Contains(c, "`local_c_dev` | ➕ create") {
				t.Errorf("plan:\n%s", c)
			}
			want := map[string]string{"cpu": "stands/a/stand.yml:1:1: rendering this stand was stopped: sandbox limit reached: it used more than 2s of CPU time",
				"memory": "rendering this stand was stopped: sandbox limit reached: it needed more than 512 MiB of memory",
				"output": "apps/bomb/bomb.tmpl:1:"}[name]
			if !strings.Contains(c, want) {
				t.Errorf("the plan does not say %q:\n%s", want, c)
			}
			if took > 15*time.Second {
				t.Errorf("planning took %s", took)
			}
			if grew > 50<<20 {
				t.Errorf("the reconciler's peak RSS grew by %d MiB", grew>>20)
			}
			t.Logf("planned in %s; peak RSS grew by %d MiB", took.Round(time.Millisecond), grew>>20)
		})
	}
}

// TestMemoryBombWithoutSandboxGrows is the control of the RSS bound above: the same kind of
// template, bounded so it ends, rendered in this process, grows its memory past that bound.
func TestMemoryBombWithoutSandboxGrows(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	small := `{{ $x := "aaaaaaaa" }}{{ range 24 }}{{ $x = printf "%s%s" $x $x }}{{ end }}` + "\n" // 128 MiB
	f.Open(1, "head1", h.files(), map[string]string{"apps/kv/redis.conf.tmpl": small}, true)
	before := peakRSS(t)
	h.mustCycle()
	if grew := peakRSS(t) - before; grew < 100<<20 {
		t.Errorf("peak RSS grew by only %d MiB: the bound above could not see a bomb", grew>>20)
	} else {
		t.Logf("peak RSS grew by %d MiB in process", grew>>20)
	}
}

func podOf(t *testing.T, h *harness) string {
	data, err := h.files().ReadFile("apps/kv/pod.yaml.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// peakRSS is this process's peak resident set (VmHWM) since the last call, which resets it.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	peak := testenv.ProcStatus(t, os.Getpid(), "VmHWM")
	testenv.ResetPeakRSS(t, os.Getpid())
	return peak
}
