// Package version is the one version every binary of the project reports: stamped at link time by
// make (-X github.com/stands-engine/stands-reconciler/internal/version.Version=$(VERSION), from git
// describe), else the module's version (go install …@v1.2.3), else the commit Go recorded at build.
package version

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// Version is stamped at link time; empty when it was not.
var Version = ""

// String is the binary's version: the stamped one, the module's, "devel+<commit>[-dirty]", or "devel".
func String() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "devel"
	}
	return "devel+" + rev + dirty
}

var semverForm = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Semver is String as a semantic version, for what requires one (a Pulumi plugin's version):
// itself without a leading v when it is one, else 0.0.0-devel with it as build metadata.
func Semver() string {
	v := strings.TrimPrefix(String(), "v")
	if semverForm.MatchString(v) {
		return v
	}
	meta := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '.' {
			return r
		}
		return '.'
	}, strings.TrimPrefix(v, "devel+"))
	if meta == "" || meta == "devel" {
		return "0.0.0-devel"
	}
	return "0.0.0-devel+" + meta
}
