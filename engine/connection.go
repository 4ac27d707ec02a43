package engine

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// ConnectionRecord builds the connection record (docs/stands-engine.md#connection-record), {"id_stand": ..., "<connection name>": {...}},
// in deploy order, from instances rendered with the servers' real addresses.
func ConnectionRecord(standID string, r *manifest.Rendered) (json.RawMessage, error) {
	var b bytes.Buffer
	id, _ := json.Marshal(standID)
	b.WriteString(`{"id_stand":`)
	b.Write(id)
	for _, in := range r.Instances {
		if in.Connection == nil {
			continue
		}
		name, _ := json.Marshal(in.ConnectionName)
		b.WriteByte(',')
		b.Write(name)
		b.WriteByte(':')
		b.Write(in.Connection)
	}
	b.WriteByte('}')
	if !json.Valid(b.Bytes()) {
		return nil, fmt.Errorf("connection record of %s is not valid JSON", standID)
	}
	return b.Bytes(), nil
}

// PublicConnection is the connection record a status file shows: made from the stand's connection
// templates rendered under two placeholder sets with the servers' addresses, never from a secret's
// value, each value the sets disagree on masked whole (manifest.BlindConnections). A record whose
// shape a secret decides (validation refuses it) shows every connection of the stand masked; a stand
// the placeholders cannot render shows none. MaskConnection runs on it too.
func PublicConnection(fsys fs.FS, s *manifest.Stand, addr manifest.Addresses) (json.RawMessage, error) {
	blind, err := manifest.BlindConnections(fsys, s, addr)
	if blind == nil {
		return ConnectionRecord(s.ID, &manifest.Rendered{})
	}
	if err != nil {
		for i, in := range blind {
			if in.Connection != nil {
				c := *in
				c.Connection = json.RawMessage(strconv.Quote(Masked))
				blind[i] = &c
			}
		}
	}
	return ConnectionRecord(s.ID, &manifest.Rendered{Instances: blind})
}

// Masked is the string every masked value becomes.
const Masked = manifest.MaskedValue

// MaskConnection returns the record with secrets masked (stricter than the Stands Engine: docs/stands-engine.md#connection-record): every
// value under a "credentials" key, every "url", and any value that contains a resolved secret value
// (a DSN under another key). Key order is kept.
func MaskConnection(record json.RawMessage, secretValues []string) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(record))
	dec.UseNumber()
	var out bytes.Buffer
	if err := maskValue(dec, &out, false, secretValues); err != nil {
		return nil, fmt.Errorf("mask connection: %w", err)
	}
	return out.Bytes(), nil
}

func maskValue(dec *json.Decoder, out *bytes.Buffer, mask bool, secrets []string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out.WriteByte('{')
			first := true
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := kt.(string)
				if !first {
					out.WriteByte(',')
				}
				first = false
				k, _ := json.Marshal(key)
				out.Write(k)
				out.WriteByte(':')
				lk := strings.ToLower(key)
				if err := maskValue(dec, out, mask || lk == "credentials" || lk == "url", secrets); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			first := true
			for dec.More() {
				if !first {
					out.WriteByte(',')
				}
				first = false
				if err := maskValue(dec, out, mask, secrets); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			out.WriteByte(']')
		}
		return nil
	case string:
		if mask || isSecret(t, secrets) {
			out.WriteString(`"` + Masked + `"`)
			return nil
		}
		b, _ := json.Marshal(t)
		out.Write(b)
	case nil:
		out.WriteString("null")
	default:
		b, _ := json.Marshal(t)
		if mask || isSecret(string(b), secrets) {
			out.WriteString(`"` + Masked + `"`)
			return nil
		}
		out.Write(b)
	}
	return nil
}

// isSecret reports whether a value holds a secret anywhere, plainly or in a form a DSN or a header
// carries it in (redis://:PW@host, a URL-escaped or base64 one): the whole value is masked.
func isSecret(s string, secrets []string) bool {
	for _, v := range secrets {
		if v == "" {
			continue
		}
		for _, form := range []string{v, url.QueryEscape(v), url.PathEscape(v), base64.StdEncoding.EncodeToString([]byte(v)),
			base64.RawStdEncoding.EncodeToString([]byte(v)), base64.URLEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(s, form) {
				return true
			}
		}
	}
	return false
}

// WriteConnectionFile writes a stand's full connection record to <dir>/<id>.json, indented with its
// keys in their order, readable by its owner only: apply's --output-dir, and local mode's store.
func WriteConnectionFile(dir, id string, record []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create output folder: %w", err)
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(orderedRecord(record)); err != nil {
		return err
	}
	p := filepath.Join(dir, id+".json")
	if err := os.WriteFile(p, []byte(buf.String()), 0o600); err != nil {
		return fmt.Errorf("write connection file: %w", err)
	}
	return os.Chmod(p, 0o600)
}

// orderedRecord keeps the record's key order when it is indented.
type orderedRecord json.RawMessage

func (o orderedRecord) MarshalJSON() ([]byte, error) { return o, nil }
