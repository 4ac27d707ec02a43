// Package stands holds the plain types the packages exchange: what an operation takes, what it
// returns, what the inventory lists (stands.go); a snapshot of the repository, a pull request and a
// commit status (repo.go); a lease and what is written under it (lease.go). It has no behaviour and
// imports no Git, Gitea, PostgreSQL or Pulumi library, so the loop (package reconcile) and the pull
// request plans (package prplan) depend on these and on small interfaces only.
package stands

import (
	"cmp"
	"encoding/json"
	"io/fs"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// Input is what Apply and Preview take: a validated stand, the repository it came from, its resolved
// secrets and its spec hash.
type Input struct {
	FS       fs.FS
	Stand    *manifest.Stand
	Secrets  manifest.Secrets
	SpecHash string
	// Print is judge.Print of the stand when a review gates it: the engine records it with the
	// stack, so a later change of secret values alone needs no review.
	Print string
	// Untrusted marks a pull request's input (its secrets are placeholders): the engine renders it
	// only as the render sandbox did (the same fixed addresses), logs none of Pulumi's steps or
	// messages about it, and returns its errors without the CLI's output, which would show
	// Pulumi's verdict on what a secret feeds.
	Untrusted bool
	// Repair makes a forced Apply read the servers and their instances back first (pulumi up
	// --refresh), so what drifted or died on them is put back: a drift repair, a heal.
	Repair bool
}

// Result is the outcome of an operation on a stand.
type Result struct {
	StandID    string          `json:"id_stand"`
	Operation  string          `json:"operation"` // apply, preview, destroy
	Changed    bool            `json:"changed"`   // false: nothing to do (no-op)
	Changes    map[string]int  `json:"changes,omitempty"`
	Nodes      []Node          `json:"nodes,omitempty"`
	SpecHash   string          `json:"specHash,omitempty"`
	NodesMode  string          `json:"nodesMode,omitempty"`
	Connection SecretJSON      `json:"-"` // full values: secret
	Masked     json.RawMessage `json:"connection,omitempty"`
	Steps      []Step          `json:"steps,omitempty"` // previews: the planned steps on the servers
	// Protected, on a preview of a stand protected at its last apply, names the servers the apply
	// would replace or delete, which it refuses: "" when there are none.
	Protected string `json:"protected,omitempty"`
	// StateDigest names the stack's state the result was read from, as StackInfo.StateDigest does.
	StateDigest string `json:"-"`
}

// Node is a server of the stand as its stack records it.
type Node struct {
	Name       string `json:"name"`
	ServerName string `json:"serverName"`
	ServerID   int64  `json:"serverId"`
	PublicIPv4 string `json:"publicIPv4"`
	PrivateIP  string `json:"privateIP"`
}

// SecretJSON is a JSON document holding secret values. It prints as *** with every fmt verb, so a
// result logged or printed with %v or %+v does not show them; use it as []byte on purpose.
type SecretJSON []byte

func (SecretJSON) String() string   { return "***" }
func (SecretJSON) GoString() string { return "***" }

// StackRef names a stand's stack: project = stand.project, stack = stand.env.
type StackRef struct {
	Project string
	Env     string
	// StandID, when set, is the stand the caller expects the stack to hold: Destroy refuses a stack
	// that records another (another owner's stand on a shared backend).
	StandID string
}

// Stand is the id of the stand the stack holds: the one the caller expects, else owner's stand of
// its project and env.
func (r StackRef) Stand(owner string) string {
	return cmp.Or(r.StandID, manifest.StandID(owner, r.Project, r.Env))
}

// Step is one planned or applied change to a stand: what a reviewer needs to see, never an input's
// value beyond a server's name, type and location or an instance's name and configuration hash.
type Step struct {
	Op       string `json:"op"`             // create, update, replace, delete
	Kind     string `json:"kind,omitempty"` // "" a server; node (its setup), images, instance
	Node     string `json:"node"`
	Instance string `json:"instance,omitempty"` // <app>--<instance>
	Changed  string `json:"changed,omitempty"`  // an instance's or node's changed inputs, comma-separated
	// ConfigUnknown: the instance's configuration depends on servers not made yet, so whether it
	// changes is only known during the apply.
	ConfigUnknown bool `json:"configUnknown,omitempty"`
	// MayChange: a pull request's plan cannot tell whether the change happens, because a secret's
	// value decides it; the plan never reads secret values.
	MayChange     bool   `json:"mayChange,omitempty"`
	ServerName    string `json:"serverName,omitempty"`
	ServerType    string `json:"serverType,omitempty"`
	OldServerType string `json:"oldServerType,omitempty"` // a replace or delete: the type going away
	Location      string `json:"location,omitempty"`
	OldLocation   string `json:"oldLocation,omitempty"`
	// Drift is what a refresh found changed on the server for a node resource ("unit inactive"):
	// places and states, never a value. Only drift checks refresh: a plan never has it.
	Drift string `json:"drift,omitempty"`
}

// StackInfo is one stack of the backend as the inventory sees it.
type StackInfo struct {
	Project  string `json:"project"`
	Env      string `json:"env"`
	StandID  string `json:"standId,omitempty"`
	Owned    bool   `json:"owned"` // carries the reconciler's mark; a foreign stack is never touched
	SpecHash string `json:"specHash,omitempty"`
	// Print is the applied spec's print (judge.Print: secrets as placeholders), what its review
	// approved; "" for a stack applied before prints were recorded.
	Print   string `json:"print,omitempty"`
	Protect bool   `json:"protect,omitempty"` // stand.protect at the last apply
	// Known is false when the stack has no readable stack file (never updated, or compressed).
	Known      bool   `json:"known"`
	Resources  int    `json:"resources"`
	LastUpdate string `json:"lastUpdate,omitempty"`
	Pending    int    `json:"pendingOperations"`
	Locked     bool   `json:"locked"`
	// LastOperation and LastResult come from the stack's newest history entry, e.g. update/failed.
	LastOperation string `json:"lastOperation,omitempty"`
	LastResult    string `json:"lastResult,omitempty"`
	// NodesMode is the stack's nodesMode output: the node mode of its last apply.
	NodesMode string `json:"nodesMode,omitempty"`
	// StateDigest names the version of the stack's state file (engine.stateDigest): any update
	// changes it, reads do not.
	StateDigest string `json:"stateDigest,omitempty"`
}

// Stand is the id of the stand the stack holds: the one it records, else owner's stand of its
// project and env (a stack applied before stacks recorded their stand).
func (s StackInfo) Stand(owner string) string {
	return cmp.Or(s.StandID, manifest.StandID(owner, s.Project, s.Env))
}

// Price is a server type's monthly list price at a location, gross, as the Hetzner API states it.
type Price struct {
	Monthly  float64
	Currency string
}

// Prices maps server type → location → monthly price, from the API's server types.
type Prices map[string]map[string]Price

// Of is the price of a server type at a location (false when unknown).
func (p Prices) Of(serverType, location string) (Price, bool) {
	pr, ok := p[serverType][location]
	return pr, ok
}

// Server is a server of a stand as Hetzner has it.
type Server struct {
	Name       string `json:"name"`
	ServerType string `json:"serverType"`
	Location   string `json:"location"`
}

// Health is what a health check found on a stand's servers: every instance's state, and the servers
// it could not reach. It names places (instances, units, ports, files), never a value.
type Health struct {
	Instances   []InstanceHealth  `json:"instances,omitempty"`
	Unreachable []UnreachableNode `json:"unreachable,omitempty"`
}

// Healthy reports whether every server answered and every instance is as deployed.
func (h *Health) Healthy() bool {
	if len(h.Unreachable) > 0 {
		return false
	}
	for _, in := range h.Instances {
		if len(in.Problems) > 0 {
			return false
		}
	}
	return true
}

// InstanceHealth is one instance as its server runs it.
type InstanceHealth struct {
	Instance string   `json:"instance"` // <app>--<instance>
	Server   string   `json:"server"`
	Unit     string   `json:"unit"`
	State    string   `json:"state"`    // the unit's ActiveState[/SubState]
	Restarts int      `json:"restarts"` // systemd's NRestarts
	Problems []string `json:"problems,omitempty"`
}

// UnreachableNode is a server the check could not talk to, and why.
type UnreachableNode struct {
	Server string `json:"server"`
	Error  string `json:"error"`
}
