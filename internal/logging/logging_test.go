package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactsAndLevels(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, "info")
	log.Debug("hidden")
	log.Info("started", "endpoint", "http://127.0.0.1:1/v1", "token", "s3cr3t-token", "db_password", "pw-value")
	out := buf.String()
	if strings.Contains(out, "hidden") {
		t.Error("debug record written at info level")
	}
	if strings.Contains(out, "s3cr3t-token") || strings.Contains(out, "pw-value") {
		t.Errorf("secret logged: %s", out)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
		t.Fatalf("not JSON on a non-terminal: %v: %s", err, out)
	}
	if rec["endpoint"] != "http://127.0.0.1:1/v1" || rec["token"] != "***" {
		t.Errorf("record %v", rec)
	}
}
