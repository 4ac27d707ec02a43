// Package sdnotify tells systemd the daemon's state, as sd_notify(3) does, for a unit of
// Type=notify: READY=1 once it serves, STOPPING=1 when it drains, and WATCHDOG=1 while its loop makes
// progress, so that WatchdogSec= restarts a daemon that is frozen or wedged and not one that is busy.
// Outside systemd (no $NOTIFY_SOCKET) every call does nothing.
package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Notify sends state ("READY=1", "STOPPING=1", …) to $NOTIFY_SOCKET; sent is false without one.
func Notify(state string) (sent bool, err error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return false, nil
	}
	if path[0] == '@' { // an abstract socket
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("notify systemd: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("notify systemd: %w", err)
	}
	return true, nil
}

// WatchdogInterval is the unit's WatchdogSec= as systemd hands it to this process ($WATCHDOG_USEC,
// for $WATCHDOG_PID when set); 0 when the watchdog is off.
func WatchdogInterval() time.Duration {
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	return time.Duration(usec) * time.Microsecond
}

// Watchdog sends WATCHDOG=1 every third of interval while healthy says so, until ctx ends: a process
// that is frozen, or whose healthy stays false, misses the pings and systemd restarts it.
func Watchdog(ctx context.Context, interval time.Duration, healthy func() bool) error {
	if interval <= 0 {
		return nil
	}
	t := time.NewTicker(interval / 3)
	defer t.Stop()
	for {
		if healthy() {
			if _, err := Notify("WATCHDOG=1"); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
