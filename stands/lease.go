package stands

import (
	"context"
	"errors"
	"time"
)

// Lease is one held lease of several replicas on one PostgreSQL (package lease,
// docs/replicas.md).
type Lease struct {
	Name  string
	Token int64 // larger for every new holder; a renewal keeps it
	// Deadline is, by this process's clock, when the lease may have expired for the others: what
	// its holder started must have stopped before then. Renew moves it.
	Deadline time.Time
	// Took is the replica it was taken over from: one whose lease expired without a release.
	Took string
}

// LeaseRecord is a record written under a lease: a stand's status, as its holder last wrote it.
type LeaseRecord struct {
	Name    string // the lease's name
	Token   int64
	Holder  string
	Body    []byte
	Version int64 // one more at each write: a reader tells what changed since it last read
	Updated time.Time
}

// ErrLeaseLost: the lease was taken over, released, or expired before it was renewed.
var ErrLeaseLost = errors.New("lease lost")

// LeaderLease is the lease of the replica that commits the status files and plans pull requests.
const LeaderLease = "leader"

// Fence is the lease an operation runs under, with several replicas (package lease): its token is
// recorded beside every stack lock the operation's Pulumi CLIs take, and Stop closes when the lease
// is about to expire, at which the engine kills those CLIs at once (engine/fence.go).
type Fence struct {
	Token int64           // the lease's fencing token
	Stop  <-chan struct{} // closed when the operation's CLIs must be gone
}

type fenceKey struct{}

// WithFence runs the operations under ctx under the lease f.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceOf is the lease the operations under ctx run under, if any.
func FenceOf(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}
