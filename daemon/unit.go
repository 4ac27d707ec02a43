package daemon

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// UnitName is the systemd unit deploy/ installs.
const UnitName = "stands-reconciler.service"

// UnitDirs are where systemd looks for an installed unit, the one that wins first: the
// administrator's, then the packages'.
var UnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// Unit is what the daemon's settings must fit in its systemd unit.
type Unit struct {
	// Path is the unit file; Where is the file:line that set TimeoutStop (a drop-in's, perhaps).
	Path, Where string
	// TimeoutStop is how long systemd waits for a stop before it kills the daemon; 0: not set (the
	// manager's default, 90 s), -1: infinity.
	TimeoutStop time.Duration
}

// InstalledUnit reads the unit installed under UnitDirs, with its drop-ins; ok is false when none is.
func InstalledUnit() (u Unit, ok bool, err error) {
	for _, dir := range UnitDirs {
		path := filepath.Join(dir, UnitName)
		if _, err := os.Stat(path); err == nil {
			u, err := ReadUnit(path, UnitDirs...)
			return u, err == nil, err
		}
	}
	return Unit{}, false, nil
}

// ReadUnit reads the unit file at path and the drop-ins (<name>.d/*.conf) of the folders dropIns,
// in systemd's order: by file name, a later one's setting over an earlier one's.
func ReadUnit(path string, dropIns ...string) (Unit, error) {
	u := Unit{Path: path}
	if err := u.read(path); err != nil {
		return Unit{}, err
	}
	byName := map[string]string{}
	for _, dir := range slices.Backward(dropIns) { // the first folder's file of a name wins
		matches, _ := filepath.Glob(filepath.Join(dir, filepath.Base(path)+".d", "*.conf"))
		for _, m := range matches {
			byName[filepath.Base(m)] = m
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := u.read(byName[n]); err != nil {
			return Unit{}, err
		}
	}
	return u, nil
}

// read takes the [Service] section's stop timeout from one file.
func (u *Unit) read(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read unit: %w", err)
	}
	defer f.Close()
	section, line := "", 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "[") {
			section = text
			continue
		}
		key, value, ok := strings.Cut(text, "=")
		key = strings.TrimSpace(key)
		if !ok || section != "[Service]" || key != "TimeoutStopSec" && key != "TimeoutSec" {
			continue
		}
		d, err := parseTimespan(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, line, key, err)
		}
		u.TimeoutStop, u.Where = d, fmt.Sprintf("%s:%d", path, line)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read unit %s: %w", path, err)
	}
	return nil
}

var timespanPart = regexp.MustCompile(`^(\d+(?:\.\d+)?)\s*([a-z]*)`)

// timespanUnits are systemd.time(7)'s, in seconds.
var timespanUnits = map[string]float64{
	"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1,
	"ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6, "µs": 1e-6,
	"m": 60, "min": 60, "minute": 60, "minutes": 60,
	"h": 3600, "hr": 3600, "hour": 3600, "hours": 3600,
	"d": 86400, "day": 86400, "days": 86400, "w": 604800, "week": 604800, "weeks": 604800,
}

// parseTimespan parses a systemd time span ("15min", "900", "5min 30s", "infinity"): -1 for
// infinity, 0 for the empty value (the default again).
func parseTimespan(s string) (time.Duration, error) {
	switch s {
	case "":
		return 0, nil
	case "infinity":
		return -1, nil
	}
	var total float64
	for rest := s; rest != ""; rest = strings.TrimSpace(rest) {
		m := timespanPart.FindStringSubmatch(rest)
		if m == nil {
			return 0, fmt.Errorf("%q is not a time span", s)
		}
		n, _ := strconv.ParseFloat(m[1], 64)
		unit, ok := timespanUnits[m[2]]
		if !ok {
			return 0, fmt.Errorf("%q: unknown unit %q", s, m[2])
		}
		total += n * unit
		rest = rest[len(m[0]):]
	}
	return time.Duration(total * float64(time.Second)), nil
}
