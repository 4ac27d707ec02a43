package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
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

// TestFormats: --log-format text writes text (no colour codes off a terminal, nor with NO_COLOR),
// json writes JSON, whatever the writer is.
func TestFormats(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	for format, check := range map[string]func(string) bool{
		"text": func(s string) bool {
			return strings.Contains(s, "hello") && !strings.HasPrefix(s, "{") && !strings.Contains(s, "\x1b[")
		},
		"json": func(s string) bool { return strings.HasPrefix(s, `{"time":`) && strings.Contains(s, `"msg":"hello"`) },
		"auto": func(s string) bool { return strings.HasPrefix(s, "{") }, // not a terminal: JSON
	} {
		var b strings.Builder
		NewWithFormat(&b, "info", format).Info("hello", "k", "v")
		if !check(b.String()) {
			t.Errorf("%s: %q", format, b.String())
		}
	}
}

// TestDurationsReadAsDurations: a duration is written as Go writes it ("1m30s"), in JSON as in
// text: JSON's default is an integer of nanoseconds nobody on call can read.
func TestDurationsReadAsDurations(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		NewWithFormat(&buf, "info", format).Info("apply done", "took", 90*time.Second+500*time.Millisecond)
		if out := buf.String(); !strings.Contains(out, "1m30.5s") || strings.Contains(out, "90500000000") {
			t.Errorf("%s: %s", format, out)
		}
	}
}
