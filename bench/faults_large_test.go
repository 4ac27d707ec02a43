//go:build faults

package bench

import (
	"crypto/rand"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"code.gitea.io/sdk/gitea"
)

// faultLargeFiles: pull requests bringing a 300 MB file, and 20 files of 50 MB, are planned (the
// files listed, never fetched) while the daemon's RSS stays within 100 MiB of its baseline, and it
// is back within 10 MiB of it a minute after they close. The control runs a daemon built with
// stands_pull_unfiltered (the head fetched whole into memory, as go-git's memory store held it) on a
// third such pull request: its RSS grows past the bound, which shows the sampling can see it.
func faultLargeFiles(s *suite, c *caseRun) {
	api := s.w.gitea.API(s.t)
	owner, repo := s.w.repo.Info.Owner.UserName, s.w.repo.Info.Name
	baseline := s.d.rss()
	var causes []string
	// try opens a pull request of files, waits for its plan and closes it; peak is the RSS meanwhile.
	try := func(branch string, files map[string]int64, fixed int) (peak float64, st *gitea.Status) {
		head := s.pushLarge(c, branch, files, standPath("fbase"), benchStand("fbase", fixed))
		if head == "" {
			return 0, &gitea.Status{State: "none"}
		}
		idx := s.w.repo.Open(api, branch, branch)
		stop := s.sampleRSS()
		st = s.planState(c, head, 5*time.Minute)
		peak = stop()
		closed := gitea.StateClosed
		if _, _, err := api.EditPullRequest(owner, repo, idx, gitea.EditPullRequestOption{State: &closed}); err != nil {
			c.fail(s, "close #%d: %v", idx, err)
		}
		// The branch goes too, as a merged or abandoned one would: the cases after this one clone
		// every branch of the repository (noSecret), and its files would make each clone 300 MB
		// more (the whole suite once ran past its timeout so).
		if _, _, err := api.DeleteRepoBranch(owner, repo, branch); err != nil {
			c.fail(s, "delete branch %s: %v", branch, err)
		}
		return peak, st
	}
	for _, pr := range []struct {
		branch string
		files  map[string]int64
	}{
		{"one-300mb-file", map[string]int64{"apps/blob.bin": 300 << 20}},
		{"twenty-50mb-files", func() map[string]int64 {
			m := map[string]int64{}
			for i := range 20 {
				m[fmt.Sprintf("data/part%02d.bin", i)] = 50 << 20
			}
			return m
		}()},
	} {
		peak, st := try(pr.branch, pr.files, 7700+len(causes))
		closed := time.Now()
		s.wait(c, pr.branch+": RSS back within 10 MiB of its baseline", time.Minute, func() bool { return s.d.rss() <= baseline+10 })
		back, after := time.Since(closed), s.d.rss()
		if st.State != gitea.StatusSuccess {
			c.fail(s, "%s: stands/plan %s %q, want success (the files listed, never read)", pr.branch, st.State, st.Description)
		}
		if peak > baseline+100 {
			c.fail(s, "%s: RSS peaked at %.0f MiB, baseline %.0f MiB: over 100 MiB more", pr.branch, peak, baseline)
		}
		if after > baseline+10 {
			c.fail(s, "%s: RSS %.0f MiB a minute after the pull request closed, baseline %.0f MiB", pr.branch, after, baseline)
		}
		causes = append(causes, fmt.Sprintf("%s: RSS %.0f → peak %.0f → %.0f MiB %s after the close", pr.branch, baseline, peak, after, roundDuration(back)))
	}

	// The control: the head fetched whole.
	bin := s.w.bin
	s.w.bin = buildReconcilerTags(s.t, "stands_pull_unfiltered")
	s.d.stop()
	s.d.start()
	s.logs = append(s.logs, s.d.logFile)
	defer func() { s.d.stop(); s.w.bin = bin; s.start() }()
	time.Sleep(5 * time.Second)
	controlBase := s.d.rss()
	peak, st := try("control-300mb-file", map[string]int64{"apps/blob.bin": 300 << 20}, 7790)
	if st.State != gitea.StatusSuccess {
		c.fail(s, "control: stands/plan %s %q, want success", st.State, st.Description)
	}
	if peak <= controlBase+100 {
		c.fail(s, "control: a head fetched whole peaked at %.0f MiB from %.0f MiB: the growth is not seen", peak, controlBase)
	}
	causes = append(causes, fmt.Sprintf("control (fetched whole): RSS %.0f → peak %.0f MiB", controlBase, peak))
	c.cause = strings.Join(causes, "; ")
}

// sampleRSS samples the daemon's RSS every 200 ms until the returned func is called; that returns
// the largest sample.
func (s *suite) sampleRSS() func() float64 {
	var (
		mu   sync.Mutex
		peak float64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			v := s.d.rss()
			mu.Lock()
			peak = max(peak, v)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() float64 {
		close(done)
		wg.Wait()
		return peak
	}
}

// pushLarge pushes branch, main with files of random bytes of the given sizes and path set to
// content, with the git command line (the test's own go-git would hold them in memory); it returns
// the head, "" when the push failed.
func (s *suite) pushLarge(c *caseRun, branch string, files map[string]int64, path, content string) string {
	dir := s.t.TempDir()
	u, _ := url.Parse(s.w.repo.Info.CloneURL)
	u.User = url.UserPassword(s.w.gitea.User, s.w.gitea.Token)
	run := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-c", "core.compression=0", "-c", "pack.compression=0"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=dev", "GIT_AUTHOR_EMAIL=dev@example.test", "GIT_COMMITTER_NAME=dev", "GIT_COMMITTER_EMAIL=dev@example.test")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("clone", "--quiet", "--depth", "1", "--branch", "main", u.String(), "."); err != nil {
		c.fail(s, "clone: %v: %s", err, strings.ReplaceAll(out, s.w.gitea.Token, "***"))
		return ""
	}
	for p, size := range files {
		if err := writeRandom(filepath.Join(dir, p), size); err != nil {
			c.fail(s, "write %s: %v", p, err)
			return ""
		}
	}
	if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
		c.fail(s, "write %s: %v", path, err)
		return ""
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "--quiet", "-m", branch}, {"push", "--quiet", "origin", "HEAD:refs/heads/" + branch}} {
		if out, err := run(args...); err != nil {
			c.fail(s, "git %s: %v: %s", args[0], err, strings.ReplaceAll(out, s.w.gitea.Token, "***"))
			return ""
		}
	}
	head, _ := run("rev-parse", "HEAD")
	return head
}

func writeRandom(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
