package diff

import (
	"fmt"
	"github.com/stands-engine/stands-reconciler/reason"
	"strings"
	"testing"
)

func owned(id, hash string) Actual { return Actual{ID: id, Owned: true, SpecHash: hash} }

// render shows a plan as "kind:id[:reason prefix]" for compact expectations.
func render(actions []Action) string {
	var parts []string
	for _, a := range actions {
		s := string(a.Kind) + ":" + a.ID
		if a.Kind == Blocked || a.Kind == Noop {
			s += ":" + string(a.Reason)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestPlan(t *testing.T) {
	five := []Actual{owned("a", "1"), owned("b", "1"), owned("c", "1"), owned("d", "1"), owned("e", "1")}
	desiredOf := func(ids ...string) []Desired {
		var d []Desired
		for _, id := range ids {
			d = append(d, Desired{ID: id, SpecHash: "1"})
		}
		return d
	}
	cases := []struct {
		name string
		in   Input
		want string
	}{
		{"create, update, noop", Input{SourceOK: true,
			Desired: []Desired{{ID: "a", SpecHash: "1"}, {ID: "b", SpecHash: "2"}, {ID: "c", SpecHash: "1"}},
			Actual:  []Actual{owned("a", "1"), owned("b", "1")}},
			"create:c update:b noop:a:UpToDate"},
		{"suspended: neither applied nor destroyed", Input{SourceOK: true,
			Desired: []Desired{{ID: "a", SpecHash: "2", Suspend: true}}, Actual: []Actual{owned("a", "1")}},
			"noop:a:Suspended"},
		{"invalid manifest fails alone, its stack stays", Input{SourceOK: true,
			Desired: []Desired{{ID: "a", Invalid: true}, {ID: "b", SpecHash: "2"}}, Actual: []Actual{owned("a", "1"), owned("b", "1")}},
			"update:b blocked:a:InvalidManifest"},
		{"foreign stack with the same id is never replaced", Input{SourceOK: true,
			Desired: desiredOf("a"), Actual: []Actual{{ID: "a", Owned: false}}},
			"blocked:a:ForeignStack"},
		{"foreign stack without a stand is left alone", Input{SourceOK: true,
			Desired: desiredOf("a"), Actual: []Actual{owned("a", "1"), {ID: "old", Owned: false}}},
			"noop:a:UpToDate noop:old:ForeignStack"},
		{"one removal of five", Input{SourceOK: true, Desired: desiredOf("a", "b", "c", "d"), Actual: five},
			"destroy:e noop:a:UpToDate noop:b:UpToDate noop:c:UpToDate noop:d:UpToDate"},
		{"two of five within the 50% share", Input{SourceOK: true, Desired: desiredOf("a", "b", "c"), Actual: five},
			"destroy:d destroy:e noop:a:UpToDate noop:b:UpToDate noop:c:UpToDate"},
		{"three of five: over the share, all refused", Input{SourceOK: true, Desired: desiredOf("a", "b"), Actual: five},
			"noop:a:UpToDate noop:b:UpToDate blocked:c:MassDeletionGuard blocked:d:MassDeletionGuard blocked:e:MassDeletionGuard"},
		{"one destroy is always allowed", Input{SourceOK: true, Desired: desiredOf("a"), Actual: []Actual{owned("a", "1"), owned("b", "1")}, MaxDestroyShare: 0.1},
			"destroy:b noop:a:UpToDate"},
		{"never to zero", Input{SourceOK: true, Actual: []Actual{owned("a", "1")}},
			"blocked:a:WouldRemoveAllStands"},
		{"all removed: refused", Input{SourceOK: true, Actual: five},
			"blocked:a:WouldRemoveAllStands blocked:b:WouldRemoveAllStands blocked:c:WouldRemoveAllStands blocked:d:WouldRemoveAllStands blocked:e:WouldRemoveAllStands"},
		{"all removed with the committed override", Input{SourceOK: true, Actual: five, AllowDestroy: map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true}},
			"destroy:a destroy:b destroy:c destroy:d destroy:e"},
		{"override for some: the rest still guarded", Input{SourceOK: true, Actual: five, AllowDestroy: map[string]bool{"a": true}},
			"destroy:a blocked:b:WouldRemoveAllStands blocked:c:WouldRemoveAllStands blocked:d:WouldRemoveAllStands blocked:e:WouldRemoveAllStands"},
		{"flag override", Input{SourceOK: true, Actual: five[:2], AllowMassDestroy: true},
			"destroy:a destroy:b"},
		{"source unavailable: no destroy at all", Input{SourceOK: false, Actual: five, AllowMassDestroy: true},
			"blocked:a:SourceUnavailable blocked:b:SourceUnavailable blocked:c:SourceUnavailable blocked:d:SourceUnavailable blocked:e:SourceUnavailable"},
		{"protected is never destroyed, even approved", Input{SourceOK: true, Desired: desiredOf("a"),
			Actual: []Actual{owned("a", "1"), {ID: "p", Owned: true, Protected: true}}, AllowDestroy: map[string]bool{"p": true}},
			"noop:a:UpToDate blocked:p:Protected"},
		{"protect set alone: recorded by an update", Input{SourceOK: true,
			Desired: []Desired{{ID: "a", SpecHash: "1", Protect: true}}, Actual: []Actual{owned("a", "1")}},
			"update:a"},
		{"held (Vault down): no destroy, updates still planned", Input{SourceOK: true, Hold: "VaultUnavailable",
			Desired: []Desired{{ID: "a", SpecHash: "2"}}, Actual: []Actual{owned("a", "1"), owned("b", "1")}},
			"update:a blocked:b:VaultUnavailable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := render(Decide(c.in)); got != c.want {
				t.Errorf("\n got: %s\nwant: %s", got, c.want)
			}
		})
	}
}

func TestMassDeletionReasonSaysWhy(t *testing.T) {
	var actual []Actual
	for i := range 10 {
		actual = append(actual, owned(fmt.Sprint(i), "1"))
	}
	plan := Decide(Input{SourceOK: true, Desired: []Desired{{ID: "0", SpecHash: "1"}}, Actual: actual})
	for _, a := range plan {
		if a.Kind == Blocked && (a.Reason != reason.MassDeletion || !strings.Contains(a.Detail, "9 stands removed at once, more than 5 (50% of 10)")) {
			t.Errorf("reason %s, detail %q", a.Reason, a.Detail)
		}
	}
}
