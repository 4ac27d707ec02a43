package sandbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a sandbox child for the jobs below.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		job, err := Child(os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		in, _ := io.ReadAll(os.Stdin)
		switch job {
		case "echo":
			fmt.Printf("%s|%d", in, len(os.Environ()))
		case "spin":
			sum := sha256.Sum256(in)
			for {
				sum = sha256.Sum256(sum[:])
			}
		case "grow":
			var keep [][]byte
			for {
				keep = append(keep, make([]byte, 64<<20))
				keep[len(keep)-1][0] = 1
			}
		case "sleep":
			time.Sleep(time.Hour)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLimits: each limit stops its kind of runaway child and says which; a child within them
// answers, and gets none of the parent's environment.
func TestLimits(t *testing.T) {
	t.Setenv("SANDBOX_TEST_TOKEN", "token-SENTINEL")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A second of CPU time takes longer than that on a busy machine: only the sleeping child meets
	// the wall limit.
	lim := Limits{CPU: time.Second, Memory: 256 << 20, Wall: 30 * time.Second}
	for _, c := range []struct{ job, want string }{
		{"echo", ""},
		{"spin", "it used more than 1s of CPU time"},
		{"grow", "it needed more than 256 MiB of memory"},
		{"sleep", "it ran longer than 3s"},
	} {
		lim := lim
		if c.job == "sleep" {
			lim.Wall = 3 * time.Second
		}
		t.Run(c.job, func(t *testing.T) {
			var got string
			start := time.Now()
			used, err := Run(context.Background(), exe, c.job, lim,
				func(w io.Writer) error { _, err := io.WriteString(w, "hello"); return err },
				func(r io.Reader) error { b, err := io.ReadAll(r); got = string(b); return err })
			if c.want == "" {
				if err != nil || got != "hello|0" {
					t.Errorf("answer %q (input|environment variables), err %v", got, err)
				}
				return
			}
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want %q", err, c.want)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("stopped after %s", took)
			}
			// The CPU time a child used is what plans charge to a pull request's budget.
			if c.job == "spin" && used < lim.CPU {
				t.Errorf("the spinning child used %s of CPU time, reported as less than its limit of %s", used, lim.CPU)
			}
		})
	}
}
