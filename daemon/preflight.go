package daemon

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/engine"
)

// stopSlack is what a stop takes beyond the drain: the Pulumi CLIs' grace to cancel, then the last
// status commit (one Gitea push, 30 s at most, and its retry).
const stopSlack = engine.CancelGrace + time.Minute

// Preflight reports what the daemon could start with but should not run with: a credential file
// that other users can read, and a drain that the unit's stop timeout cuts short (systemd kills the
// daemon, and its Pulumi CLIs with it, mid-apply: a lock and a pending operation left). `config
// check` refuses them; `run` logs them. unit is the installed unit, or nil when none is.
func (s *Settings) Preflight(env Env, o Origins, unit *Unit) []error {
	var errs []error
	for _, c := range Credentials {
		file := env(c.Key + "_FILE")
		if file == "" {
			continue
		}
		if dir := env("CREDENTIALS_DIRECTORY"); dir != "" && strings.HasPrefix(file, dir+"/") {
			continue // systemd's copy (LoadCredential=): only the service's user reaches it
		}
		fi, err := os.Stat(file)
		if err != nil {
			continue // Check says it cannot be read, where the setting needs it
		}
		if perm := fi.Mode().Perm(); perm&0o044 != 0 {
			errs = append(errs, fmt.Errorf("credential %s from %s is readable by %s (mode %04o): chmod 600 %s, owned by the daemon's user, "+
				"or give it with systemd's LoadCredential= (docs/operations.md)", c.Name, o.Credential(c), readers(perm), perm, file))
		}
	}
	if unit == nil {
		return errs
	}
	stop, where := unit.TimeoutStop, unit.Where
	if stop == 0 {
		stop, where = defaultTimeoutStop, unit.Path+", which does not set it: systemd's default"
	}
	if need := s.Drain + stopSlack; stop > 0 && need > stop {
		fix := fmt.Sprintf("raise TimeoutStopSec to %s or more", need)
		if stop > stopSlack {
			fix = fmt.Sprintf("lower --drain-timeout to %s or less, or %s", stop-stopSlack, fix)
		}
		errs = append(errs, fmt.Errorf("--drain-timeout (from %s): %s, but TimeoutStopSec=%s (%s) has systemd kill the daemon first, Pulumi "+
			"mid-apply with it: a stop takes the drain plus %s (Pulumi's cancel, the last status commit); %s", o.Setting("drain-timeout"), s.Drain, stop, where, stopSlack, fix))
	}
	return errs
}

// defaultTimeoutStop is systemd's DefaultTimeoutStopSec.
const defaultTimeoutStop = 90 * time.Second

// readers names who besides the owner may read a file of mode perm.
func readers(perm os.FileMode) string {
	switch {
	case perm&0o044 == 0o044:
		return "its group and every user"
	case perm&0o004 != 0:
		return "every user"
	}
	return "its group"
}
