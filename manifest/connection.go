package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
)

// A stand's connection record goes into its status file, committed to the repository, so nothing in
// it may be a function of a secret's value (docs/manifest.md#the-connection-record-in-a-status-file). Matching the real
// values in the output cannot promise that: a template can encode a value, cut it, count it or branch
// on one of its characters. So the record a status shows is not rendered from the secrets at all:
// the connection templates are rendered under the two placeholder sets (PlaceholderSecrets), with the
// real addresses, and joined. A value the two renders agree on does not depend on a secret and is
// shown as rendered (under placeholders: a template that branches on a secret in a way both sets
// take alike shows the placeholders' branch, which says nothing of the value); a value they differ
// on depends on one and is masked whole; a key, or an array's length, they differ on is an error
// naming its place, since a secret would decide the record's shape.

// MaskedValue is what a value a secret decides becomes in a blind record.
const MaskedValue = "***"

// BlindConnections renders the stand's connection templates under both placeholder sets with the
// addresses addr and returns its instances, each Connection the join of the two. A render that
// fails, or a shape a secret decides, is an error naming the template.
func BlindConnections(fsys fs.FS, s *Stand, addr Addresses) ([]*RenderedInstance, error) {
	var renders [2][]*RenderedInstance
	for variant := range renders {
		rep := &Report{}
		if renders[variant] = connections(fsys, s, PlaceholderSecrets(s, variant), addr, rep); rep.err() != nil {
			return nil, rep.err()
		}
	}
	rep := &Report{}
	out := joinConnections(s, renders, rep)
	return out, rep.err()
}

// joinConnections joins two renders of the same instances (connections lists them from the
// manifest, whatever the secrets).
func joinConnections(s *Stand, renders [2][]*RenderedInstance, rep *Report) []*RenderedInstance {
	a, b := renders[0], renders[1]
	files := map[string]string{}
	for _, app := range s.Apps {
		if app.Package != nil {
			files[app.Name] = app.Package.Connection
		}
	}
	for i, in := range a {
		if in.Connection == nil && b[i].Connection == nil {
			continue
		}
		joined, where, err := joinBlind(in.Connection, b[i].Connection)
		if err != nil {
			rep.addf(Pos{File: files[in.App], Line: 1}, RuleConnection, "connection of %s: %s depends on a secret's value; keys and the "+
				"number of items must not (a value may: it is shown masked)", in.ConnectionName, where)
			continue
		}
		in.Connection = joined
	}
	return a
}

// checkBlindConnections reports a connection template whose record's shape a secret decides, in
// validation: the same join the status's record is made with, under the preflight's addresses.
func checkBlindConnections(fsys fs.FS, s *Stand, rep *Report) {
	if len(s.SecretUses()) == 0 {
		return
	}
	var renders [2][]*RenderedInstance
	for variant := range renders {
		r := &Report{}
		if renders[variant] = connections(fsys, s, PlaceholderSecrets(s, variant), PreflightAddresses(s), r); r.err() != nil {
			return // the render itself is reported by the real render's check
		}
	}
	joinConnections(s, renders, rep)
}

// joinBlind joins two renders of one JSON value: equal scalars as they are, different ones masked,
// objects key by key in order, arrays item by item. where names the first place the two differ in
// shape.
func joinBlind(a, b json.RawMessage) (json.RawMessage, string, error) {
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	var out bytes.Buffer
	if where, err := joinValue(da, db, &out, "the record"); err != nil {
		return nil, where, err
	}
	return out.Bytes(), "", nil
}

var errShape = errors.New("shape differs")

func joinValue(da, db *json.Decoder, out *bytes.Buffer, where string) (string, error) {
	ta, err := da.Token()
	if err != nil {
		return where, err
	}
	tb, err := db.Token()
	if err != nil {
		return where, err
	}
	dA, isDelimA := ta.(json.Delim)
	dB, isDelimB := tb.(json.Delim)
	switch {
	case isDelimA != isDelimB || isDelimA && dA != dB:
		return where, errShape
	case !isDelimA:
		if ta == tb {
			v, _ := json.Marshal(ta)
			out.Write(v)
		} else {
			out.WriteString(strconv.Quote(MaskedValue))
		}
		return "", nil
	}
	open, end := byte(dA), byte('}')
	if dA == '[' {
		end = ']'
	}
	out.WriteByte(open)
	for i := 0; ; i++ {
		moreA, moreB := da.More(), db.More()
		if moreA != moreB {
			return where, errShape
		}
		if !moreA {
			break
		}
		if i > 0 {
			out.WriteByte(',')
		}
		at := fmt.Sprintf("%s[%d]", where, i)
		if dA == '{' {
			ka, err := da.Token()
			if err != nil {
				return where, err
			}
			kb, err := db.Token()
			if err != nil {
				return where, err
			}
			if ka != kb {
				return fmt.Sprintf("key %d of %s (%q under one placeholder set)", i+1, where, ka), errShape
			}
			k, _ := json.Marshal(ka)
			out.Write(k)
			out.WriteByte(':')
			at = fmt.Sprintf("%s.%s", where, ka)
		}
		if w, err := joinValue(da, db, out, at); err != nil {
			return w, err
		}
	}
	if _, err := da.Token(); err != nil {
		return where, err
	}
	if _, err := db.Token(); err != nil {
		return where, err
	}
	out.WriteByte(end)
	return "", nil
}

func hasConnection(r *Rendered) bool {
	for _, in := range r.Instances {
		if in.Connection != nil {
			return true
		}
	}
	return false
}
