package reconcile

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// keep in a summariser expectation: the phase or reason before.
const keep = "keep"

// prevStatus is a plausible status of a stand in the phase (none for "").
func prevStatus(p reason.Phase) Status {
	if p == "" {
		return Status{}
	}
	s := Status{SchemaVersion: SchemaVersion, ID: "o_p_e", Phase: p, Reason: "PrevReason", Message: "before", SpecHash: "spec-1",
		File: "stands/old/stand.yml", LastSuccessfulCommit: "c-ok", LastAttemptedCommit: "c-tried",
		Nodes: []stands.Node{{Name: "main", ServerID: 7}}, Connection: []byte(`{"id_stand":"o_p_e"}`)}
	if p == reason.Failed {
		next := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		s.NextAttempt, s.Failures = &next, 1
	}
	return s
}

// TestSummarise covers every outcome kind against every previous phase (and no status at all):
// phase and reason, and what each kind must and must not touch.
func TestSummarise(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	p := policy{stallAfter: 3, backoff: func(n int) time.Duration { return time.Duration(n) * time.Minute }}
	res := &stands.Result{SpecHash: "spec-2", Changed: true, Changes: map[string]int{"create": 1}, NodesMode: "skipped",
		Nodes: []stands.Node{{Name: "main", ServerID: 9}}, Masked: []byte(`{"id_stand":"o_p_e","kv":{"password":"***"}}`)}
	clean := &stands.Result{SpecHash: "spec-1"}
	type want struct {
		phase  reason.Phase  // or keep
		reason reason.Reason // or keep
	}
	cases := []struct {
		name  string
		o     outcome
		rt    retries
		want  func(prev reason.Phase) want
		check func(t *testing.T, prev, got Status, rt retries)
	}{
		{name: "declared moves the file only", o: outcome{kind: outDeclared, file: "stands/new/stand.yml"},
			want: func(prev reason.Phase) want {
				if prev == reason.Expired { // its end moved beyond now
					return want{reason.Ready, reason.UpToDate}
				}
				return want{keep, keep}
			},
			check: func(t *testing.T, prev, got Status, _ retries) {
				if prev.Phase != "" && got.File != "stands/new/stand.yml" {
					t.Errorf("file %q", got.File)
				}
			}},
		{name: "declared past its end", o: outcome{kind: outDeclared, file: "stands/old/stand.yml", ended: "ended at 2026-12-01 07:00 UTC"},
			want: func(prev reason.Phase) want {
				if prev == reason.Ready || prev == reason.Expired {
					return want{reason.Expired, reason.Ended}
				}
				return want{keep, keep} // an operation's or a check's phase says more
			},
			check: func(t *testing.T, prev, got Status, _ retries) {
				if got.Phase == reason.Expired && (got.Message != "ended at 2026-12-01 07:00 UTC" || got.LastSuccessfulCommit != prev.LastSuccessfulCommit || got.Nodes == nil) {
					t.Errorf("%+v", got)
				}
			}},
		{name: "invalid", o: outcome{kind: outInvalid, detail: "stands/x/stand.yml:3:5: bad", commit: "c-2", file: "stands/x/stand.yml"},
			want: func(reason.Phase) want { return want{reason.Failed, reason.Invalid} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if got.Message != "stands/x/stand.yml:3:5: bad" || got.LastAttemptedCommit != "c-2" || got.NextAttempt != nil || got.File != "stands/x/stand.yml" {
					t.Errorf("%+v", got)
				}
			}},
		{name: "held, spec unknown", o: outcome{kind: outHeld},
			want: func(prev reason.Phase) want {
				if prev == reason.Stalled {
					return want{keep, keep}
				}
				return want{reason.Progressing, reason.VaultUnavailable}
			},
			check: func(t *testing.T, prev, got Status, _ retries) {
				if prev.Phase != reason.Stalled && (!strings.Contains(got.Message, "vault is unavailable") || got.NextAttempt != nil) {
					t.Errorf("%+v", got)
				}
			}},
		{name: "held, the stalled spec", o: outcome{kind: outHeld, spec: "spec-1"},
			want: func(prev reason.Phase) want {
				if prev == reason.Stalled {
					return want{keep, keep}
				}
				return want{reason.Progressing, reason.VaultUnavailable}
			}},
		{name: "held, a new spec", o: outcome{kind: outHeld, spec: "spec-2"},
			want: func(reason.Phase) want { return want{reason.Progressing, reason.VaultUnavailable} }},
		{name: "blocked by a guard", o: outcome{kind: outBlocked, reason: reason.Protected},
			want: func(reason.Phase) want { return want{reason.Blocked, reason.Protected} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if !strings.Contains(got.Message, "protect: false") || got.NextAttempt != nil {
					t.Errorf("%+v", got)
				}
			}},
		{name: "blocked by its owner", o: outcome{kind: outBlocked, reason: reason.OtherOwner, detail: `stand.owner is "x"`},
			want: func(reason.Phase) want { return want{reason.Blocked, reason.OtherOwner} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if got.Message != `stand.owner is "x"` {
					t.Errorf("message %q", got.Message)
				}
			}},
		{name: "suspended", o: outcome{kind: outSuspended},
			want: func(reason.Phase) want { return want{reason.Suspended, reason.SuspendedByRepo} }},
		{name: "gone without a stack", o: outcome{kind: outGone},
			want: func(reason.Phase) want { return want{reason.Destroyed, reason.Removed} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if got.Nodes != nil || got.Connection != nil || !strings.Contains(got.Message, "no stack") {
					t.Errorf("%+v", got)
				}
			}},
		{name: "apply started", o: outcome{kind: outStarted, op: opApply, commit: "c-2", spec: "spec-2", file: "stands/x/stand.yml"},
			want: func(reason.Phase) want { return want{reason.Progressing, reason.Applying} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if got.SpecHash != "spec-2" || got.LastAttemptedCommit != "c-2" || got.Message != "" {
					t.Errorf("%+v", got)
				}
			}},
		{name: "destroy started", o: outcome{kind: outStarted, op: opDestroy, commit: "c-2"},
			want: func(reason.Phase) want { return want{reason.Progressing, reason.Destroying} }},
		{name: "applied", o: outcome{kind: outSucceeded, op: opApply, commit: "c-2", res: res, started: now.Add(-time.Minute), file: "stands/x/stand.yml"},
			rt:   retries{failures: 2, waits: 1, spec: "spec-2", next: now},
			want: func(reason.Phase) want { return want{reason.Ready, reason.Applied} },
			check: func(t *testing.T, _, got Status, rt retries) {
				if got.Message != "1 create" || got.SpecHash != "spec-2" || got.LastSuccessfulCommit != "c-2" || got.Failures != 0 || got.NextAttempt != nil ||
					got.Timings == nil || got.Timings.Seconds != 60 || string(got.Connection) != string(res.Masked) || rt != (retries{spec: "spec-2"}) {
					t.Errorf("%+v %+v", got, rt)
				}
			}},
		{name: "observed", o: outcome{kind: outSucceeded, op: opObserve, commit: "c-2", res: clean},
			want: func(prev reason.Phase) want {
				if prev == reason.Ready {
					return want{reason.Ready, keep}
				}
				return want{reason.Ready, reason.UpToDate}
			}},
		{name: "drift found", o: outcome{kind: outSucceeded, op: opDrift, res: res},
			want: func(reason.Phase) want { return want{reason.Drifted, reason.DriftDetected} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if !strings.HasPrefix(got.Message, "the stand differs from its last apply: 1 create") {
					t.Errorf("message %q", got.Message)
				}
			}},
		{name: "no drift", o: outcome{kind: outSucceeded, op: opDrift, res: clean},
			want: func(prev reason.Phase) want {
				if prev == reason.Drifted {
					return want{reason.Ready, reason.UpToDate}
				}
				return want{keep, keep}
			}},
		{name: "destroyed", o: outcome{kind: outSucceeded, op: opDestroy, commit: "c-2", res: &stands.Result{Changes: map[string]int{"delete": 2}}},
			want: func(reason.Phase) want { return want{reason.Destroyed, reason.Removed} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if got.Message != "2 delete" || got.SpecHash != "" || got.Nodes != nil || got.Connection != nil || got.LastSuccessfulCommit != "c-2" {
					t.Errorf("%+v", got)
				}
			}},
		{name: "failed, generic", o: outcome{kind: outFailed, op: opApply, reason: reason.Failure, detail: "exit status 1", commit: "c-2"},
			want: func(reason.Phase) want { return want{reason.Failed, reason.Failure} },
			check: func(t *testing.T, _, got Status, rt retries) {
				if got.Failures != 1 || got.NextAttempt == nil || !got.NextAttempt.Equal(now.Add(time.Minute)) || rt.failures != 1 || got.Message != "exit status 1" {
					t.Errorf("%+v %+v", got, rt)
				}
			}},
		{name: "failed, waiting", o: outcome{kind: outFailed, op: opApply, reason: reason.UpdateConflict, detail: "locked"},
			rt:   retries{waits: 2},
			want: func(reason.Phase) want { return want{reason.Failed, reason.UpdateConflict} },
			check: func(t *testing.T, prev, got Status, rt retries) {
				if got.Failures != prev.Failures || rt.failures != 0 || rt.waits != 3 || !got.NextAttempt.Equal(now.Add(3*time.Minute)) {
					t.Errorf("%+v %+v", got, rt)
				}
			}},
		{name: "failed, stalling", o: outcome{kind: outFailed, op: opApply, reason: reason.Passphrase, detail: "incorrect passphrase"},
			want: func(reason.Phase) want { return want{reason.Failed, reason.Passphrase} }},
		{name: "failed the third time", o: outcome{kind: outFailed, op: opApply, reason: reason.Failure, detail: "exit status 1"},
			rt:   retries{failures: 2},
			want: func(reason.Phase) want { return want{reason.Stalled, reason.Failure} },
			check: func(t *testing.T, _, got Status, _ retries) {
				if got.NextAttempt != nil || got.Failures != 3 || !strings.HasPrefix(got.Message, "3 attempts failed on this spec") {
					t.Errorf("%+v", got)
				}
			}},
		{name: "waiting after the stall", o: outcome{kind: outFailed, op: opApply, reason: reason.Canceled, detail: "context canceled"},
			rt:   retries{failures: 3},
			want: func(reason.Phase) want { return want{reason.Stalled, reason.Canceled} }},
		{name: "an operator's retry", o: outcome{kind: outRetried, detail: "alice (uid 0)"},
			rt:   retries{failures: 3, waits: 2, spec: "spec-1", next: now.Add(time.Hour)},
			want: func(reason.Phase) want { return want{keep, keep} },
			check: func(t *testing.T, prev, got Status, rt retries) {
				if rt != (retries{spec: "spec-1"}) || got.NextAttempt != nil {
					t.Errorf("%+v %+v", got, rt)
				}
				if prev.Phase != "" && (got.Operator == nil || got.Operator.Action != "retry" || got.Operator.By != "alice (uid 0)" || !got.Operator.At.Equal(now)) {
					t.Errorf("operator %+v", got.Operator)
				}
			}},
		{name: "a health check finds an instance down", o: outcome{kind: outHealth, health: &stands.Health{Instances: []stands.InstanceHealth{
			{Instance: "web--front", Server: "s-web", Problems: []string{"unit inactive", "port 8080/tcp not listening in the pod"}}, {Instance: "kv--cache", Server: "s-db"}}}},
			want: func(prev reason.Phase) want {
				if prev == reason.Ready || prev == reason.Degraded || prev == reason.Expired {
					return want{reason.Degraded, reason.InstanceUnhealthy}
				}
				return want{keep, keep} // an operation's phase: not the check's to change
			},
			check: func(t *testing.T, prev, got Status, _ retries) {
				if got.Phase == reason.Degraded && (got.Message != "web--front: unit inactive, port 8080/tcp not listening in the pod" ||
					got.Health == nil || len(got.Health.Instances) != 1 || got.LastSuccessfulCommit != prev.LastSuccessfulCommit) {
					t.Errorf("%q %+v", got.Message, got.Health)
				}
			}},
		{name: "a health check finds a server unreachable", o: outcome{kind: outHealth, health: &stands.Health{Unreachable: []stands.UnreachableNode{{Server: "s-web", Error: "i/o timeout"}}}},
			want: func(prev reason.Phase) want {
				if prev == reason.Ready || prev == reason.Degraded || prev == reason.Expired {
					return want{reason.Degraded, reason.NodeUnreachable}
				}
				return want{keep, keep}
			},
			check: func(t *testing.T, _, got Status, _ retries) {
				if got.Phase == reason.Degraded && (got.Message != "s-web: unreachable over SSH" || strings.Contains(got.Message, "timeout")) {
					t.Errorf("%q: the server, and no error text that changes from one check to the next", got.Message)
				}
			}},
		{name: "a health check passes", o: outcome{kind: outHealth, health: &stands.Health{Instances: []stands.InstanceHealth{{Instance: "kv--cache"}}}},
			want: func(prev reason.Phase) want {
				if prev == reason.Degraded {
					return want{reason.Ready, reason.Recovered}
				}
				return want{keep, keep}
			}},
		{name: "a heal step", o: outcome{kind: outHealed, heal: &HealStep{Instance: "web--front", Action: "restart", At: now, Result: "restarted"}},
			want: func(reason.Phase) want { return want{keep, keep} },
			check: func(t *testing.T, prev, got Status, _ retries) {
				if prev.Phase != "" && (len(got.Healing) != 1 || got.Healing[0].Action != "restart") {
					t.Errorf("healing %+v", got.Healing)
				}
			}},
		{name: "connection not stored", o: outcome{kind: outUnsaved},
			want: func(reason.Phase) want { return want{keep, keep} },
			check: func(t *testing.T, _, _ Status, rt retries) {
				if rt.waits != 1 || !rt.next.Equal(now.Add(time.Minute)) {
					t.Errorf("retries %+v", rt)
				}
			}},
	}
	covered := map[outcomeKind]bool{}
	for _, c := range cases {
		covered[c.o.kind] = true
		for _, pp := range append([]reason.Phase{""}, reason.Phases...) {
			t.Run(c.name+"/after "+cmpOr(string(pp), "none"), func(t *testing.T) {
				prev := prevStatus(pp)
				before := prevStatus(pp)
				got, rt := summarise(c.o, prev, c.rt, now, p)
				w := c.want(pp)
				wantPhase, wantReason := w.phase, w.reason
				if wantPhase == keep {
					wantPhase = pp
				}
				if wantReason == keep {
					wantReason = prev.Reason
				}
				if got.Phase != wantPhase || got.Reason != wantReason {
					t.Fatalf("%s, %s; want %s, %s", got.Phase, got.Reason, wantPhase, wantReason)
				}
				if got.Phase != "" && (got.SchemaVersion != SchemaVersion || (pp != "" && got.ID != "o_p_e")) {
					t.Errorf("schema %d id %q", got.SchemaVersion, got.ID)
				}
				if got.NextAttempt != nil && got.Phase != reason.Failed {
					t.Errorf("a next attempt in phase %s", got.Phase)
				}
				if prev.Message != before.Message || len(prev.Nodes) != len(before.Nodes) {
					t.Error("summarise edited the previous status")
				}
				if c.check != nil {
					c.check(t, prev, got, rt)
				}
			})
		}
	}
	for _, k := range outcomeKinds {
		if !covered[k] {
			t.Errorf("outcome kind %s has no case", k)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestMessagesKeepUTF8: a long error is cut on a rune boundary, in the status and in STATUS.md.
func TestMessagesKeepUTF8(t *testing.T) {
	detail := strings.Repeat("é", maxMessage) // two bytes each: a byte cut would split one
	got, _ := summarise(outcome{kind: outFailed, reason: reason.Failure, detail: detail}, Status{}, retries{}, time.Now(),
		policy{stallAfter: 3, backoff: func(int) time.Duration { return time.Minute }})
	if !utf8.ValidString(got.Message) || len(got.Message) > maxMessage+len("…") || !strings.HasSuffix(got.Message, "…") {
		t.Errorf("message of %d bytes, valid %v", len(got.Message), utf8.ValidString(got.Message))
	}
	for _, n := range []int{155, 156, 157, 158, 159, 160, 161} {
		in := strings.Repeat("a", n) + "жжж"
		line := mdtext.FirstLine(in)
		if !utf8.ValidString(line) || len(line) > 160 || (len(in) <= 160 && line != in) {
			t.Errorf("firstLine of %d bytes: %d bytes %q", len(in), len(line), line)
		}
	}
	if mdtext.Truncate("short", 10) != "short" || mdtext.Truncate("", 0) != "" {
		t.Error("truncate changed a short string")
	}
}

// TestDriftMessageNamesWhatDrifted: a drift check's status names each resource a refresh found
// changed on its server, and why, after the step counts.
func TestDriftMessageNamesWhatDrifted(t *testing.T) {
	res := &stands.Result{Changed: true, Changes: map[string]int{"update": 2}, Steps: []stands.Step{
		{Op: "update", Kind: "instance", Instance: "web--front", Node: "web", Drift: "unit inactive"},
		{Op: "update", Kind: "images", Node: "db", ServerName: "demo-demo-two-node-db", Drift: "image registry.test/kv:7 missing"},
		{Op: "update", Kind: "instance", Instance: "kv--cache", Node: "db", Changed: "configHash"},
	}}
	got, _ := summarise(outcome{kind: outSucceeded, op: opDrift, res: res}, prevStatus(reason.Ready), retries{}, time.Now(), policy{stallAfter: 3, backoff: func(int) time.Duration { return time.Minute }})
	want := "the stand differs from its last apply: 2 update; web--front: unit inactive; demo-demo-two-node-db: image registry.test/kv:7 missing"
	if got.Phase != reason.Drifted || got.Message != want {
		t.Errorf("%s %q\nwant %q", got.Phase, got.Message, want)
	}
}
