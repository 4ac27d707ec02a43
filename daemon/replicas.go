package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/stands"
)

// replicaNames are the replica's name, by which the stands are shared out (--replica-id, the host's
// by default), and the holder name of this process: the name and a suffix of its own, so a replica
// restarted before its leases expired never takes them as its own while a stack lock of its
// previous life may still carry their tokens.
func replicaNames(id string) (name, holder string) {
	if id == "" {
		id, _ = os.Hostname()
	}
	name = cmp.Or(id, "replica")
	return name, name + "." + strings.ToLower(rand.Text()[:6])
}

// The documents the replicas share (docs/replicas.md#the-review-gate): the review gate's state, and
// the pull request heads the leader planned, which every replica's gate asks about.
const (
	reviewDocument = "review-gate"
	plansDocument  = "planned-heads"
)

// seeded is a document the replicas share that, until one of them writes it, reads as the file this
// reconciler kept without replicas: turning --replicas on keeps what the gate let through, the
// approvals it used and the pull requests planned. The first save of any replica creates the
// document; another's seed then loses the race, and reads the document.
type seeded struct {
	*lease.Document
	file string
}

func (s seeded) Load(ctx context.Context, known int64) ([]byte, int64, error) {
	body, version, err := s.Document.Load(ctx, known)
	if err != nil || version != 0 {
		return body, version, err
	}
	data, err := os.ReadFile(s.file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("read %s, what this reconciler kept without replicas: %w", s.file, err)
	}
	return data, 0, nil
}

// leaseCheck is, with replicas, how the engine judges a stack lock taken under a lease: abandoned
// once the stand's lease has another token. The member is joined before any operation runs.
func (d *Daemon) leaseCheck() engine.LeaseCheck {
	if !d.s.Replicas {
		return nil
	}
	return func(ctx context.Context, ref stands.StackRef, token int64) (bool, error) {
		return d.member.TokenLive(ctx, ref.Stand(d.s.Engine.Owner), token) // a stand's lease is named by its id
	}
}

// joinReplicas makes this reconciler a member of the replicas on the backend's database, for as
// long as the daemon is open: its Close gives every lease up (the drain has ended what ran under
// them) and leaves, after the loop's drain.
func (d *Daemon) joinReplicas(ctx context.Context, eng *engine.Engine, name, holder string) (*lease.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := eng.OpenStateDB(ctx)
	if err != nil {
		return nil, fmt.Errorf("--replicas: %w", err)
	}
	d.own(db)
	// The member's rounds, a cycle's claims, status writes and the leader's reads: a few at a time.
	db.SetMaxOpenConns(4)
	store, err := lease.New(ctx, db, holder, lease.WithName(name), lease.WithTTL(d.s.LeaseTTL), lease.WithGrace(d.s.LeaseGrace))
	if err != nil {
		return nil, fmt.Errorf("--replicas: %w", err)
	}
	m := lease.NewMember(store, lease.WithLogger(d.log), lease.WithMetrics(d.metrics))
	run := goAsLongAs(m.Run)
	d.own(closerFunc(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := m.ReleaseAll(ctx)
		run.Close()
		return err
	}))
	d.log.Info("joined the replicas", "lease_ttl", d.s.LeaseTTL, "lease_grace", d.s.LeaseGrace)
	return m, nil
}
