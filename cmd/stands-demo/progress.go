package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
)

// progress follows the reconciler's JSON log and picks out what an apply is doing (a resource
// created, a node connected to, set up, deployed to), so that minutes of VM boots are not minutes of
// silence. Only the reconciler's own words are shown: the log is what its operators read, scrubbed
// of secrets by the reconciler (secretsShown checks it).
type progress struct {
	path string
	off  int64
}

// progressLine is an event of an apply, as the reconciler logs it.
type progressLine struct {
	Msg      string `json:"msg"`
	Stand    string `json:"stand"`
	Op       string `json:"step"`
	Type     string `json:"type"`
	Name     string `json:"name"`
	Message  string `json:"message"`
	Planning bool   `json:"planning"`
}

// next returns the events logged since the last call, as "name: what" per stand, in order.
func (p *progress) next() []progressLine {
	f, err := os.Open(p.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(p.off, io.SeekStart); err != nil {
		return nil
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil
	}
	// A line still being written waits for the next call.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	p.off += int64(len(data))
	var out []progressLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l progressLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Stand == "" || l.Planning {
			continue
		}
		switch l.Msg {
		case "resource done", "node work":
			out = append(out, l)
		}
	}
	return out
}

// String is the event as the story prints it.
func (l progressLine) String() string {
	if l.Msg == "node work" {
		return l.Name + ": " + l.Message
	}
	return l.Op + "d " + shortType(l.Type) + " " + l.Name
}

// shortType is the resource type's last part: stands:index:Server → Server.
func shortType(t string) string {
	if i := strings.LastIndexByte(t, ':'); i >= 0 {
		return t[i+1:]
	}
	return t
}
