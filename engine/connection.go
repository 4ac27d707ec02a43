package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// ConnectionRecord builds the seed's connection record, {"id_stand": ..., "<connection name>": {...}},
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

// Masked is the string every masked value becomes.
const Masked = "***"

// MaskConnection returns the record with secrets masked (DESIGN.md, stricter than seed §11): every
// value under a "credentials" key, every "url", and any string equal to a resolved secret value. Key
// order is kept.
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
		if mask {
			out.WriteString(`"` + Masked + `"`)
			return nil
		}
		b, _ := json.Marshal(t)
		out.Write(b)
	}
	return nil
}

func isSecret(s string, secrets []string) bool {
	for _, v := range secrets {
		if v != "" && s == v {
			return true
		}
	}
	return false
}
