package node

import (
	"os/exec"
	"strings"
	"testing"
)

// TestQuote: whatever the word, the remote shell sees it unchanged (checked with the local sh).
func TestQuote(t *testing.T) {
	for _, w := range []string{"plain", "it's", `a "b" $HOME $(id) ; rm -rf /`, "multi\nline", "", `back\slash'`} {
		out, err := exec.Command("sh", "-c", "printf %s "+Quote(w)).Output()
		if err != nil || string(out) != w {
			t.Errorf("Quote(%q): sh printed %q (%v)", w, out, err)
		}
	}
	got := AsApp("app", 1001, "podman ps --format '{{.Names}}'")
	if !strings.HasPrefix(got, "sudo -u 'app' -H env XDG_RUNTIME_DIR=/run/user/1001 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1001/bus sh -c ") {
		t.Errorf("AsApp: %s", got)
	}
}
