package sqlstore

import (
	"database/sql"
	"math"
	"time"
)

// StallRenewals makes s call stall inside its lease transaction, after the
// leases are written and before the commit, as a relay paused there would.
func StallRenewals(s *Store, stall func()) { s.inRenew = stall }

// StaleWake makes w's view of the wake-up register say that no relay
// waits, and keeps w from reading the register again: w then writes as a
// writer that read it just before a relay asked for a wake-up.
func StaleWake(w *Writer) {
	w.wake.until.Store(0)
	w.wake.next.Store(math.MaxInt64)
}

// CountsBytesInDatabase reports whether s's claims add payload sizes up
// row by row (see selectClaimable).
func CountsBytesInDatabase(s *Store) bool { return s.largeRows.Load() }

// TakeEvery is how soon owner, short of its share, renews again to take
// shards over (0 when it holds its share).
func TakeEvery(s *Store, owner string) time.Duration {
	o := s.owner(owner)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.takeEvery
}

// NextRenewal is when owner's next lease renewal falls due on its
// schedule, and whether a renewal runs now (in the background).
func NextRenewal(s *Store, owner string) (due time.Time, running bool) {
	o := s.owner(owner)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nextRenew, o.renewing != nil
}

// ScanHolders reads rows of an owner and how many shards it holds.
func ScanHolders(rows *sql.Rows, err error) (map[string]int, error) { return scanHolders(rows, err) }

// PostgresStatements are the statements a relay's store runs at every
// batch on PostgreSQL, on the default table, by name: the mark (its
// arguments: the ids, the owner, the lowest and the highest id) and the
// two claims (the limit and a byte size), with arguments for them.
func PostgresStatements(owner string) map[string]struct {
	SQL  string
	Args []any
} {
	d, t := postgresDialect{}, tablesOf(DefaultTable)
	set, _ := d.publishedSet()
	small, smallArgs := d.claimSmallQuery(t, "", 1000, 8<<10)
	claim, claimArgs := d.claimQuery(t, "", 1000, 8<<20)
	type stmt = struct {
		SQL  string
		Args []any
	}
	return map[string]stmt{
		"mark":        {d.fencedSQL(t, set, 0, false), []any{[]int64{1, 2, 3}, owner, int64(1), int64(3)}},
		"claim":       {claim, claimArgs},
		"claim small": {small, smallArgs},
	}
}
