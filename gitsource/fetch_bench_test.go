package gitsource

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// BenchmarkFetch: the tracked branch of a repository of 1,000 stands fetched into the store on disk
// (the daemon's) and into memory (the baseline, as before the store moved to disk), side by side in
// each iteration: after one new commit, and when the branch did not move (a no-op cycle). The
// ratios disk/memory are reported.
func BenchmarkFetch(b *testing.B) {
	g := testenv.StartGitea(b)
	p := g.CreateRepo(b, "stands")
	files := map[string]string{}
	for i := range 1000 {
		files[fmt.Sprintf("stands/s%04d/stand.yml", i)] = fmt.Sprintf("stand: {project: s%04d, env: dev}\napps: {web: {image: nginx}}\n", i)
	}
	p.Change("1,000 stands", files)
	token := WithToken(g.User, func() (string, error) { return g.Token, nil })
	ctx := context.Background()
	srcs := map[string]*Source{
		"memory": New(p.Info.CloneURL, "main", token),
		"disk":   New(p.Info.CloneURL, "main", token, WithWorkDir(b.TempDir())),
	}
	fetch := func(name string) time.Duration {
		t0 := time.Now()
		if _, err := srcs[name].Fetch(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	fetch("memory") // the first fetch, the whole history, is not what a cycle does
	fetch("disk")
	took := map[string]time.Duration{}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		p.Commit(fmt.Sprintf("stands/s%04d/stand.yml", i%1000), fmt.Sprintf("stand: {project: s%04d, env: qa%d}\n", i%1000, i), "a change")
		b.StartTimer()
		for _, name := range []string{"memory", "disk"} {
			took[name+"-commit"] += fetch(name)
			took[name+"-noop"] += fetch(name)
		}
	}
	for _, m := range []string{"commit", "noop"} {
		mem, disk := took["memory-"+m], took["disk-"+m]
		b.ReportMetric(float64(mem.Microseconds())/float64(b.N)/1000, "ms/memory-"+m)
		b.ReportMetric(float64(disk.Microseconds())/float64(b.N)/1000, "ms/disk-"+m)
		b.ReportMetric(float64(disk)/float64(mem), "disk/memory-"+m)
	}
}
