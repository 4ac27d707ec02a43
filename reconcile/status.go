package reconcile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// SchemaVersion of status/<stand-id>.json. Readers must check it; it grows only when a field changes
// meaning or goes away.
const SchemaVersion = 1

// Status is one stand's status file. It never holds a secret value: the connection block is masked
// and messages are scrubbed of every resolved value.
type Status struct {
	SchemaVersion        int             `json:"schemaVersion"`
	ID                   string          `json:"id"`
	Phase                reason.Phase    `json:"phase"`
	Reason               reason.Reason   `json:"reason,omitempty"`
	Message              string          `json:"message,omitempty"`
	File                 string          `json:"file,omitempty"` // the stand.yml, when the repository has it
	LastAttemptedCommit  string          `json:"lastAttemptedCommit,omitempty"`
	LastSuccessfulCommit string          `json:"lastSuccessfulCommit,omitempty"`
	SpecHash             string          `json:"specHash,omitempty"`
	Failures             int             `json:"consecutiveFailures,omitempty"`
	NextAttempt          *time.Time      `json:"nextAttempt,omitempty"`
	Timings              *Timings        `json:"timings,omitempty"`
	Changes              map[string]int  `json:"changes,omitempty"` // Pulumi's step counts of the last operation
	NodesMode            string          `json:"nodesMode,omitempty"`
	Nodes                []stands.Node   `json:"nodes,omitempty"`
	Connection           json.RawMessage `json:"connection,omitempty"` // masked (docs/stands-engine.md#connection-record)
	// StateDigest names the stack state this status was made from, once its connection record is
	// stored: while the backend holds that state, a restarted reconciler trusts the status.
	StateDigest string          `json:"stateDigest,omitempty"`
	Operator    *OperatorAction `json:"operator,omitempty"` // the last operator action on the stand
	// Authorised is what let the last change applied or destroyed through the review gate
	// (review.go): its pull requests and their approvers, or ctl approve with its reason.
	Authorised *Authorised `json:"authorised,omitempty"`
	// Health is what the live health check found on a Degraded stand (health.go); Healing the last
	// steps --heal took on it.
	Health  *HealthFinding `json:"health,omitempty"`
	Healing []HealStep     `json:"healing,omitempty"`
	// Expires is when the stand ends (docs/lifetime.md) and ExpiresBy what says so: stand.expires, or
	// the repository's default, which counts from DeclaredSince, when a reconciler first made the
	// stand a status. MonthlyCost is its servers' at list prices.
	Expires       *time.Time `json:"expires,omitempty"`
	ExpiresBy     string     `json:"expiresBy,omitempty"`
	DeclaredSince *time.Time `json:"declaredSince,omitempty"`
	// EndHeld says why the end the tracked branch asks for is not the one in force (Expires): its
	// change was not reviewed (docs/lifetime.md#only-reviewed-ends-take-effect).
	EndHeld     string `json:"endHeld,omitempty"`
	MonthlyCost *Cost  `json:"monthlyCost,omitempty"`
}

// Cost is a monthly amount at Hetzner's list prices, gross, as its API states them.
type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// Timings of the last operation.
type Timings struct {
	Operation string    `json:"operation"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished,omitzero"`
	Seconds   float64   `json:"seconds,omitempty"`
}

// encode is the file's exact bytes: indented, keys in struct order, a final newline.
func (s *Status) encode() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // every field marshals
	return buf.Bytes()
}

// endCell is when a stand ends, absolute: STATUS.md changes only when a status does.
func endCell(s *Status) mdtext.Markup {
	held := mdtext.Markup("")
	if s.EndHeld != "" {
		held = " (a change of it is held: unreviewed)"
	}
	if s.Expires == nil {
		return "never" + held
	}
	at := mdtext.Code(s.Expires.UTC().Format("2006-01-02 15:04 UTC"))
	if s.ExpiresBy == manifest.ByDefault {
		return at + " (default)" + held
	}
	return at + held
}

// totalCost adds up the stands' monthly costs for STATUS.md; a stand of unknown cost is counted
// as such.
type totalCost struct {
	amount   float64
	currency string
	unknown  int
	mixed    bool
}

func (t *totalCost) add(s *Status) mdtext.Markup {
	if s.MonthlyCost == nil {
		if s.Phase != reason.Destroyed {
			t.unknown++
		}
		return ""
	}
	if t.currency != "" && t.currency != s.MonthlyCost.Currency {
		t.mixed = true
	}
	t.currency = s.MonthlyCost.Currency
	t.amount += s.MonthlyCost.Amount
	return mdtext.Code(fmt.Sprintf("%.2f %s", s.MonthlyCost.Amount, s.MonthlyCost.Currency))
}

func (t *totalCost) line() mdtext.Markup {
	switch {
	case t.mixed:
		return "\nTotal monthly cost: not added up (the prices are in several currencies).\n"
	case t.currency == "":
		return ""
	case t.unknown > 0:
		return mdtext.F("\n**Total monthly cost: %s**, and %d stand(s) of unknown cost (Hetzner's list prices, gross).\n",
			fmt.Sprintf("%.2f %s", t.amount, t.currency), t.unknown)
	}
	return mdtext.F("\n**Total monthly cost: %s** (Hetzner's list prices, gross).\n", fmt.Sprintf("%.2f %s", t.amount, t.currency))
}

// loadStatuses reads the status files a snapshot carries, so a restarted reconciler continues from
// what it published instead of rewriting every file. Unreadable or newer files are ignored: they are
// rewritten from what the reconciler observes.
func loadStatuses(files fs.FS) map[string]*Status {
	out := map[string]*Status{}
	entries, err := fs.ReadDir(files, stands.StatusDir)
	if err != nil {
		return out
	}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".json" {
			continue
		}
		data, err := fs.ReadFile(files, path.Join(stands.StatusDir, e.Name()))
		if err != nil {
			continue
		}
		var s Status
		if json.Unmarshal(data, &s) != nil || s.SchemaVersion != SchemaVersion || s.ID+".json" != e.Name() {
			continue
		}
		out[s.ID] = &s
	}
	return out
}

// statusTable renders STATUS.md of at most pageRows stands: one row per stand, for on-call reading
// Git. Ids, node names, messages and unreadable paths come from the repository: mdtext renders them
// inert.
func statusTable(all map[string]*Status, unreadable []string, banner mdtext.Markup) []byte {
	var d mdtext.Doc
	statusHeader(&d, banner)
	var total totalCost
	standRows(&d, sortedIDs(all), all, "", &total)
	d.Add(total.line())
	unreadableList(&d, unreadable)
	return []byte(d.Markup())
}

func statusHeader(d *mdtext.Doc, banner mdtext.Markup) {
	d.Add("# Stands\n\nWritten by stands-reconciler; do not edit. Details and connection info (secrets masked) are in `status/<stand-id>.json`.\n\n")
	d.Add(banner)
}

// standRows is a table of the stands ids names, in that order, their status files linked from dir
// (the folder of the file the table is in, relative to the repository's root).
func standRows(d *mdtext.Doc, ids []string, all map[string]*Status, dir string, total *totalCost) {
	d.Add("| Stand | Phase | Reason | Nodes | Ends | Monthly cost | Last successful commit | Authorised by | Message |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, id := range ids {
		s := all[id]
		var nodes []mdtext.Markup
		for _, n := range s.Nodes {
			nodes = append(nodes, mdtext.F("%s %s", n.Name, n.PublicIPv4))
		}
		d.Add(mdtext.Row(mdtext.Link(mdtext.Code(id), relative(dir, stands.StatusPath(id))), s.Phase, s.Reason,
			mdtext.Join(nodes, ", "), endCell(s), total.add(s), mdtext.Short(s.LastSuccessfulCommit), s.Authorised.short(), mdtext.FirstLine(s.Message)))
	}
}

func unreadableList(d *mdtext.Doc, unreadable []string) {
	if len(unreadable) > 0 {
		d.Add("\n## Manifests that could not be read\n\nWhile any is listed, no stand is destroyed: a stand whose id cannot be read might be one of them.\n\n")
		for _, u := range unreadable {
			d.F("- %s\n", u)
		}
	}
}

func sortedIDs(all map[string]*Status) []string {
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
