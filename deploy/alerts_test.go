// Package deploy holds what an installation takes besides the binary (the unit, the alert rules,
// the install script); its tests check the alert rules with Prometheus's own promtool.
package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T, data []byte) []rule {
	t.Helper()
	var doc struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var out []rule
	for _, g := range doc.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) < 10 {
		t.Fatalf("alerts.yml holds %d alerts", len(out))
	}
	return out
}

// promtool finds Debian's promtool (scripts/install-deps.sh installs it); CI fails without it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool not found (scripts/install-deps.sh installs Debian's prometheus package)")
	}
	return p
}

// testRules runs promtool test rules on cases against rules, in a folder of their own.
func testRules(t *testing.T, rules, cases []byte) (string, error) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{"alerts.yml": rules, "alerts_test.yml": cases} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool(t), "test", "rules", "alerts_test.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// alertsFor runs alerts.sh for job and the runbooks at base on in.
func alertsFor(t *testing.T, in []byte, job, base string) []byte {
	t.Helper()
	cmd := exec.Command("./alerts.sh", job, base)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("alerts.sh %s: %v", job, err)
	}
	return out
}

// TestAlertsFireAndStaySilent: promtool's cases pass on the shipped rules, and each alert's cases
// fail when its expression is broken on purpose: one that can never fire (the fault an alert
// matching on a label the other side lacks had) and one that always fires. One promtool run takes
// every broken copy, each with its own cases file.
func TestAlertsFireAndStaySilent(t *testing.T) {
	shipped, cases := mustRead(t, "alerts.yml"), mustRead(t, "alerts_test.yml")
	if out, err := testRules(t, shipped, cases); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	type mutant struct{ alert, broken string }
	var mutants []mutant
	dir := t.TempDir()
	args := []string{"test", "rules"}
	for _, r := range readRules(t, shipped) {
		for _, broken := range []struct{ name, expr string }{{"never fires", "vector(1) < 0"}, {"always fires", "vector(1)"}} {
			rules := strings.Replace(string(shipped), "expr: "+r.Expr+"\n", "expr: "+broken.expr+"\n", 1)
			if rules == string(shipped) {
				t.Fatalf("the expression of %s not found to break", r.Alert)
			}
			n := len(mutants)
			mutants = append(mutants, mutant{r.Alert, broken.name})
			ruleFile, caseFile := fmt.Sprintf("rules_%d.yml", n), fmt.Sprintf("cases_%d.yml", n)
			for name, data := range map[string][]byte{ruleFile: []byte(rules), caseFile: casesOf(t, cases, r.Alert, ruleFile)} {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args = append(args, caseFile)
		}
	}
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("promtool passed every broken copy of the rules:\n%s", out)
	}
	// promtool reports each file under "Unit Testing:  <file>", then SUCCESS or FAILED with the
	// failing cases' alert names.
	reports := map[string]string{}
	for _, part := range strings.Split(string(out), "Unit Testing:")[1:] {
		file, report, _ := strings.Cut(strings.TrimSpace(part), "\n")
		reports[strings.TrimSpace(file)] = report
	}
	for n, m := range mutants {
		report, ok := reports[fmt.Sprintf("cases_%d.yml", n)]
		switch {
		case !ok:
			t.Errorf("%s broken (%s): promtool did not report its cases:\n%s", m.alert, m.broken, out)
		case !strings.Contains(report, "FAILED"):
			t.Errorf("%s with an expression that %s passes its cases: none sees it", m.alert, m.broken)
		case !strings.Contains(report, "alertname: "+m.alert+","):
			t.Errorf("%s broken (%s), the failing cases are others':\n%s", m.alert, m.broken, report)
		}
	}
}

// casesOf keeps the cases that test alert, on the rules of ruleFile.
func casesOf(t *testing.T, cases []byte, alert, ruleFile string) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(cases, &doc); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	var kept []any
	for _, c := range doc["tests"].([]any) {
		for _, a := range c.(map[string]any)["alert_rule_test"].([]any) {
			if a.(map[string]any)["alertname"] == alert {
				kept = append(kept, c)
				break
			}
		}
	}
	if len(kept) == 0 {
		t.Fatalf("alerts_test.yml has no case for %s", alert)
	}
	doc["tests"], doc["rule_files"] = kept, []string{ruleFile}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEveryAlertHasARunbook: each alert links its section of docs/runbooks.md, which tells what it
// means, how to confirm, how to fix and how to silence it safely.
func TestEveryAlertHasARunbook(t *testing.T) {
	shipped := mustRead(t, "alerts.yml")
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	for _, s := range strings.Split(string(doc), "\n## ")[1:] {
		title, body, _ := strings.Cut(s, "\n")
		sections[strings.ToLower(title)] = body
	}
	for _, r := range readRules(t, shipped) {
		want := "https://github.com/stands-engine/stands-reconciler/blob/main/docs/runbooks.md#" + strings.ToLower(r.Alert)
		if got := r.Annotations["runbook_url"]; got != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
		}
		body, ok := sections[strings.ToLower(r.Alert)]
		if !ok {
			t.Errorf("docs/runbooks.md has no section %q", "## "+r.Alert)
			continue
		}
		for _, part := range []string{"**What it means.**", "**Confirm.**", "**Fix.**", "**Silence safely.**"} {
			if !strings.Contains(body, part) {
				t.Errorf("docs/runbooks.md, %s: no %s", r.Alert, part)
			}
		}
	}
	if len(sections) != len(readRules(t, shipped)) {
		t.Errorf("docs/runbooks.md has %d sections for %d alerts", len(sections), len(readRules(t, shipped)))
	}
}

// TestAlertsForAnotherJob: alerts.sh writes the rules for a scrape job of another name; they pass
// the same cases written for that name, and name the shipped job nowhere.
func TestAlertsForAnotherJob(t *testing.T) {
	const job, base = "infra-stands", "https://git.example/ops/docs/runbooks.md"
	rules := alertsFor(t, mustRead(t, "alerts.yml"), job, base)
	if regexp.MustCompile(`stands-reconciler"|github\.com`).Match(rules) {
		t.Fatalf("alerts.sh left the shipped job or address:\n%s", rules)
	}
	cases := alertsFor(t, []byte(strings.ReplaceAll(string(mustRead(t, "alerts_test.yml")), `job: "stands-reconciler"`, `job: "`+job+`"`)), job, base)
	if out, err := testRules(t, rules, cases); err != nil {
		t.Fatalf("the rules for job %s fail their cases: %v\n%s", job, err, out)
	}
	for _, bad := range []string{"a b", `x"y`} {
		cmd := exec.Command("./alerts.sh", bad)
		cmd.Stdin = strings.NewReader("")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "job name") {
			t.Errorf("alerts.sh %q: %v %s, want a refusal naming the job name", bad, err, out)
		}
	}
}
