package vm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// qmp runs one command on a QEMU Machine Protocol socket: read the greeting, negotiate
// capabilities, execute, return "return" (events in between are skipped).
func qmp(sock, command string, args map[string]any) (any, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("vm: qmp: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	enc := json.NewEncoder(c)
	read := func() (map[string]any, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return nil, fmt.Errorf("vm: qmp: %w", err)
			}
			var msg map[string]any
			if err := json.Unmarshal(line, &msg); err != nil {
				return nil, fmt.Errorf("vm: qmp: %w", err)
			}
			if _, event := msg["event"]; !event {
				return msg, nil
			}
		}
	}
	if _, err := read(); err != nil { // greeting
		return nil, err
	}
	run := map[string]any{"execute": command}
	if len(args) > 0 { // a nil map held in an interface is not nil: "arguments": null is refused
		run["arguments"] = args
	}
	for _, cmd := range []map[string]any{{"execute": "qmp_capabilities"}, run} {
		if err := enc.Encode(cmd); err != nil {
			return nil, fmt.Errorf("vm: qmp: %w", err)
		}
		msg, err := read()
		if err != nil {
			return nil, err
		}
		if e, ok := msg["error"]; ok {
			return nil, fmt.Errorf("vm: qmp %s: %v", cmd["execute"], e)
		}
		if cmd["execute"] == command {
			return msg["return"], nil
		}
	}
	return nil, nil
}
