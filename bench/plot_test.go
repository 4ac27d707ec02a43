//go:build bench

package bench

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// panel is one measurement across the sizes, with the target docs/performance.md holds it to (0:
// none).
type panel struct {
	title, unit string
	value       func(point) float64
	target      float64
}

var panels = []panel{
	{"no-op cycle, warm", "ms", func(p point) float64 { return ms(p.warm) }, 1000},
	{"first cycle after a restart", "s", func(p point) float64 { return p.restart.Seconds() }, 10},
	{"RSS after 1,000 no-op cycles", "MiB", func(p point) float64 { return p.rss }, 300},
	{"one changed stand to Ready", "s", func(p point) float64 { return p.ready.Seconds() }, 0},
	{"one-stand pull request to its plan", "s", func(p point) float64 { return p.pr.Seconds() }, 30},
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writePlot draws the curve (docs/img/bench-curve.svg): one panel per measurement, the number of
// stands on a logarithmic axis, each point labelled with its value and each target as a dashed line.
func writePlot(t *testing.T, curve []point) {
	t.Helper()
	const w, h, pad = 260.0, 220.0, 40.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w*float64(len(panels)), h+30)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="8" y="%.0f" fill="#555">stands-reconciler, make bench %s: number of stands (log scale) against each measurement; dashed: the target</text>`+"\n",
		h+22, time.Now().UTC().Format("2006-01-02"))
	lo, hi := math.Log10(float64(curve[0].stands)), math.Log10(float64(curve[len(curve)-1].stands))
	for i, p := range panels {
		x0 := float64(i) * w
		top := p.target
		for _, c := range curve {
			top = max(top, p.value(c))
		}
		top *= 1.2
		sx := func(n int) float64 {
			if hi == lo {
				return x0 + w/2
			}
			return x0 + pad + (math.Log10(float64(n))-lo)/(hi-lo)*(w-2*pad)
		}
		sy := func(v float64) float64 { return h - pad - v/top*(h-2*pad) }
		fmt.Fprintf(&b, `<text x="%.0f" y="18" font-weight="bold">%s (%s)</text>`+"\n", x0+8, html.EscapeString(p.title), p.unit)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`+"\n", x0+pad/2, h-pad, x0+w-pad/2, h-pad)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`+"\n", x0+pad/2, pad, x0+pad/2, h-pad)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#555">0</text>`+"\n", x0+4, h-pad+4)
		if p.target > 0 {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#c33" stroke-dasharray="5,4"/>`+"\n", x0+pad/2, sy(p.target), x0+w-pad/2, sy(p.target))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="#c33" text-anchor="end">target %s</text>`+"\n", x0+w-pad/2, sy(p.target)-4, label(p.target))
		}
		var pts []string
		for _, c := range curve {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(c.stands), sy(p.value(c))))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#2266bb" stroke-width="2"/>`+"\n", strings.Join(pts, " "))
		for _, c := range curve {
			x, y := sx(c.stands), sy(p.value(c))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#2266bb"/>`+"\n", x, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y-8, label(p.value(c)))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`+"\n", x, h-pad+15, thousands(c.stands))
		}
	}
	b.WriteString("</svg>\n")
	out := filepath.Join(testenv.RepoRoot(), "docs", "img", "bench-curve.svg")
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// label is a value with the digits a reader needs: 72, 2.4, 0.31.
func label(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// thousands is n as a reader counts stands: 1,000, 10,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
