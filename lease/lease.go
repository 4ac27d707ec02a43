// Package lease gives several reconcilers on one PostgreSQL exclusive, expiring leases with fencing
// tokens: a stand is operated by the replica holding its lease, a takeover gets a larger token than
// any before it, and a write that carries a stale token is refused by the database itself.
//
// Time is the database's: expiry is compared with now() in SQL, so the replicas' clocks may disagree.
// A holder's own deadline is local instead, counted from before it sent the renewal (the database
// set the expiry from a later now()), so it is never later than the expiry the others see.
package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	_ "github.com/lib/pq" // the driver the Pulumi CLI's postgres backend uses
	"github.com/stands-engine/stands-reconciler/stands"
)

// Store is one replica's view of the leases. A replica has a name, stable across its restarts, by
// which the stands are shared out among the live replicas (Owner), and an id, its holder name for
// this process's life: a restarted replica never takes a lease of its previous life as its own (a
// stack lock taken under it may still carry its token), and waits for it to expire like any other.
type Store struct {
	db    *sql.DB
	id    string
	name  string
	ttl   time.Duration
	grace time.Duration
	now   func() time.Time
}

// Option tunes a Store.
type Option func(*Store)

// WithTTL is how long a lease lasts unrenewed (default 30 s).
func WithTTL(d time.Duration) Option { return func(s *Store) { s.ttl = d } }

// WithName is the replica's name, stable across restarts (default: its id): what Owner shares the
// stands out by.
func WithName(name string) Option { return func(s *Store) { s.name = name } }

// WithGrace is how long after its expiry a lease stays unclaimed (default 10 s): longer than a
// holder takes to stop what it started once it sees its deadline pass.
func WithGrace(d time.Duration) Option { return func(s *Store) { s.grace = d } }

// New uses db (its own pool; the caller closes it) for replica id, creating the tables if needed.
func New(ctx context.Context, db *sql.DB, id string, opts ...Option) (*Store, error) {
	if id == "" {
		return nil, errors.New("lease: a replica id is required")
	}
	s := &Store{db: db, id: id, name: id, ttl: 30 * time.Second, grace: 10 * time.Second, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	if s.name == "" {
		return nil, errors.New("lease: a replica name is required")
	}
	if s.ttl <= 0 || s.grace <= 0 {
		return nil, errors.New("lease: TTL and grace must be above 0")
	}
	if err := migrate(ctx, db); err != nil {
		return nil, err
	}
	return s, nil
}

// ID is this replica's id: its holder name for this process's life.
func (s *Store) ID() string { return s.id }

// Name is this replica's name, stable across restarts.
func (s *Store) Name() string { return s.name }

// TTL is the lease time.
func (s *Store) TTL() time.Duration { return s.ttl }

// schemaLock serialises the replicas' first CREATEs: concurrent CREATE ... IF NOT EXISTS of one
// table can still fail on the catalogue's unique index.
const schemaLock = 0x7374616e6473 // "stands"

const schema = `
CREATE SEQUENCE IF NOT EXISTS stands_lease_token;
CREATE TABLE IF NOT EXISTS stands_leases (
	name        TEXT PRIMARY KEY,
	holder      TEXT NOT NULL,
	token       BIGINT NOT NULL,
	expires_at  TIMESTAMPTZ NOT NULL,
	acquired_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS stands_replicas (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	expires_at TIMESTAMPTZ NOT NULL,
	started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);`

func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("lease: create tables: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", schemaLock); err != nil {
		return fmt.Errorf("lease: create tables: %w", err)
	}
	if _, err := tx.ExecContext(ctx, schema+recordSchema+documentSchema); err != nil {
		return fmt.Errorf("lease: create tables: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("lease: create tables: %w", err)
	}
	return nil
}

func interval(d time.Duration) string { return fmt.Sprintf("%d microseconds", d.Microseconds()) }

// Acquire takes the lease if it is free (never held, released, or expired longer than the grace ago)
// or already this replica's; held: ok is false and holder names who holds it. A lease this replica
// still holds is renewed and keeps its token; any other is taken with a new one.
func (s *Store) Acquire(ctx context.Context, name string) (l stands.Lease, ok bool, holder string, err error) {
	sent := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return stands.Lease{}, false, "", fmt.Errorf("acquire lease %s: %w", name, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if _, err := tx.ExecContext(ctx, `INSERT INTO stands_leases (name, holder, token, expires_at, acquired_at)
		VALUES ($1, '', 0, '-infinity', now()) ON CONFLICT (name) DO NOTHING`, name); err != nil {
		return stands.Lease{}, false, "", fmt.Errorf("acquire lease %s: %w", name, err)
	}
	var token int64
	var live, free bool
	if err := tx.QueryRowContext(ctx, `SELECT holder, token, expires_at > now(), holder = '' OR expires_at + $2::interval < now()
		FROM stands_leases WHERE name = $1 FOR UPDATE`, name, interval(s.grace)).Scan(&holder, &token, &live, &free); err != nil {
		return stands.Lease{}, false, "", fmt.Errorf("acquire lease %s: %w", name, err)
	}
	l = stands.Lease{Name: name, Token: token}
	switch {
	case holder == s.id && live:
		_, err = tx.ExecContext(ctx, `UPDATE stands_leases SET expires_at = now() + $2::interval WHERE name = $1`, name, interval(s.ttl))
	case free || holder == s.id:
		if holder != s.id && holder != "" {
			l.Took = holder
		}
		err = tx.QueryRowContext(ctx, `UPDATE stands_leases SET holder = $2, token = nextval('stands_lease_token'),
			expires_at = now() + $3::interval, acquired_at = now() WHERE name = $1 RETURNING token`,
			name, s.id, interval(s.ttl)).Scan(&l.Token)
	default:
		return stands.Lease{}, false, holder, nil
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return stands.Lease{}, false, "", fmt.Errorf("acquire lease %s: %w", name, err)
	}
	l.Deadline = sent.Add(s.ttl)
	return l, true, s.id, nil
}

// Renew extends every lease this replica holds, in one statement, and returns them as they are now
// (with new deadlines), by name: a lease the caller holds that is missing was lost (taken over or
// expired). An error means nothing was renewed: the deadlines stand.
func (s *Store) Renew(ctx context.Context) (map[string]stands.Lease, error) {
	sent := s.now()
	rows, err := s.db.QueryContext(ctx, `UPDATE stands_leases SET expires_at = now() + $2::interval
		WHERE holder = $1 AND expires_at > now() RETURNING name, token`, s.id, interval(s.ttl))
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	defer rows.Close()
	out := map[string]stands.Lease{}
	for rows.Next() {
		l := stands.Lease{Deadline: sent.Add(s.ttl)}
		if err := rows.Scan(&l.Name, &l.Token); err != nil {
			return nil, fmt.Errorf("renew leases: %w", err)
		}
		out[l.Name] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	return out, nil
}

// Release gives the lease up at once (what its holder started has stopped): the next Acquire needs
// no grace. A lease no longer held is ErrLost.
func (s *Store) Release(ctx context.Context, l stands.Lease) error {
	res, err := s.db.ExecContext(ctx, `UPDATE stands_leases SET holder = '', expires_at = '-infinity'
		WHERE name = $1 AND holder = $2 AND token = $3`, l.Name, s.id, l.Token)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("release lease %s: %w", l.Name, stands.ErrLeaseLost)
	}
	return nil
}

// Holder is the lease's holder while it lasts ("" when free or expired) and its token.
func (s *Store) Holder(ctx context.Context, name string) (holder string, token int64, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT CASE WHEN expires_at > now() THEN holder ELSE '' END, token
		FROM stands_leases WHERE name = $1`, name).Scan(&holder, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("read lease %s: %w", name, err)
	}
	return holder, token, nil
}

// Current reports whether token is the live token of the lease: the fence a write checks, in the
// same statement, as CurrentSQL does.
func (s *Store) Current(ctx context.Context, name string, token int64) (bool, error) {
	var ok bool
	err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM stands_leases WHERE `+CurrentSQL("$1", "$2")+`)`, name, token).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check lease %s: %w", name, err)
	}
	return ok, nil
}

// CurrentSQL is the condition, on stands_leases, that the lease named by the name placeholder is held
// with the token placeholder and has not expired: a conditional write puts it in its WHERE clause.
func CurrentSQL(name, token string) string {
	return "stands_leases.name = " + name + " AND stands_leases.token = " + token + " AND stands_leases.expires_at > now()"
}

// Heartbeat says this replica is alive for one TTL more: Live lists it meanwhile.
func (s *Store) Heartbeat(ctx context.Context) error {
	// A replica killed without leaving stays listed, expired: the rows of lives past a day are dropped.
	_, err := s.db.ExecContext(ctx, `WITH gone AS (DELETE FROM stands_replicas WHERE expires_at < now() - interval '1 day')
		INSERT INTO stands_replicas (id, name, expires_at) VALUES ($1, $3, now() + $2::interval)
		ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at`, s.id, interval(s.ttl), s.name)
	if err != nil {
		return fmt.Errorf("replica heartbeat: %w", err)
	}
	return nil
}

// Leave removes this replica from the live ones at once (a clean stop).
func (s *Store) Leave(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM stands_replicas WHERE id = $1`, s.id); err != nil {
		return fmt.Errorf("replica leave: %w", err)
	}
	return nil
}

// Live lists the names of the replicas whose heartbeat has not expired, sorted.
func (s *Store) Live(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT name FROM stands_replicas WHERE expires_at > now() ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// Owner is the replica a name belongs to among the live ones (rendezvous hashing): every replica
// computes the same answer from the same list, and a replica that leaves moves only its own names.
func Owner(name string, replicas []string) string {
	best, bestScore := "", uint64(0)
	for _, r := range replicas {
		h := fnv.New64a()
		h.Write([]byte(r))
		h.Write([]byte{0})
		h.Write([]byte(name))
		if score := mix(h.Sum64()); best == "" || score > bestScore {
			best, bestScore = r, score
		}
	}
	return best
}

// mix spreads FNV's output (its high bits barely move for names differing at the end).
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
