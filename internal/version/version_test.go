package version

import "testing"

func TestSemver(t *testing.T) {
	for _, c := range []struct{ stamped, want string }{
		{"v1.4.0", "1.4.0"},
		{"1.4.0-rc.1", "1.4.0-rc.1"},
		{"v1.4.0-3-g5eb47d7", "1.4.0-3-g5eb47d7"},
		{"5eb47d7", "0.0.0-devel+5eb47d7"},
		{"5eb47d7-dirty", "0.0.0-devel+5eb47d7-dirty"},
		{"devel+5eb47d7a1b2c", "0.0.0-devel+5eb47d7a1b2c"},
		{"my build/1", "0.0.0-devel+my.build.1"},
	} {
		Version = c.stamped
		if got := Semver(); got != c.want {
			t.Errorf("Semver of %q: %q, want %q", c.stamped, got, c.want)
		}
	}
	Version = ""
	if String() == "" || !semverForm.MatchString(Semver()) {
		t.Errorf("unstamped: %q, %q", String(), Semver())
	}
}
