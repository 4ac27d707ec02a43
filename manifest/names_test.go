package manifest

import "testing"

func TestStandID(t *testing.T) {
	for _, c := range []struct {
		id                  string
		owner, project, env string
		ok                  bool
	}{
		{"local_web_dev", "local", "web", "dev", true},
		{"qa-team_a-b_x1", "qa-team", "a-b", "x1", true},
		{"local_web", "", "", "", false},
		{"local_web_dev_x", "", "", "", false}, // a part never holds "_"
		{"local__dev", "", "", "", false},
		{"", "", "", "", false},
	} {
		owner, project, env, ok := ParseStandID(c.id)
		if owner != c.owner || project != c.project || env != c.env || ok != c.ok {
			t.Errorf("ParseStandID(%q) = %q %q %q %v, want %q %q %q %v", c.id, owner, project, env, ok, c.owner, c.project, c.env, c.ok)
		}
		if c.ok && StandID(owner, project, env) != c.id {
			t.Errorf("StandID(%q, %q, %q) = %q, want %q", owner, project, env, StandID(owner, project, env), c.id)
		}
	}
}
