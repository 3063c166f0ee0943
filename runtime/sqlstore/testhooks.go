package sqlstore

import (
	"database/sql"
	"math"
	"time"

	"github.com/gooutbox/outbox/internal/testhooks"
)

// init gives this package's tests, which live in module internal/coretest,
// the state they inspect (see package testhooks).
func init() {
	h := &testhooks.Sqlstore
	h.StallRenewals = func(s any, stall func()) { s.(*Store).inRenew = stall }
	h.LateLock = func(s any, owner string) (answer func()) {
		o := s.(*Store).owner(owner)
		o.mu.Lock()
		defer o.mu.Unlock()
		l := o.lock
		if l == nil {
			return nil
		}
		l.shownUntil, l.unanswered = time.Now().Add(-time.Second), true
		l.suspended(o, time.Now())
		return func() {
			o.mu.Lock()
			l.unanswered = false
			o.mu.Unlock()
		}
	}
	h.StaleWake = func(w any) {
		wk := w.(*Writer).wake
		wk.until.Store(0)
		wk.next.Store(math.MaxInt64)
	}
	h.CountsBytesInDatabase = func(s any) bool { return s.(*Store).largeRows.Load() }
	h.TakeEvery = func(s any, owner string) time.Duration {
		o := s.(*Store).owner(owner)
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.takeEvery
	}
	h.NextRenewal = func(s any, owner string) (time.Time, bool) {
		o := s.(*Store).owner(owner)
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.nextRenew, o.renewing != nil
	}
	h.ScanHolders = func(rows *sql.Rows, err error) (map[string]int, error) { return scanHolders(rows, err) }
	h.PostgresStatements = func(owner string) map[string]testhooks.Statement {
		d, t := postgresDialect{}, tablesOf(DefaultTable)
		t.queue = queueTable(DefaultTable)
		set, _ := d.publishedSet()
		small, smallArgs := d.claimSmallQuery(t, "", 1000, 8<<10, true)
		claim, claimArgs := d.claimQuery(t, "", 1000, 8<<20)
		return map[string]testhooks.Statement{
			"mark":          {SQL: d.fencedSQL(t, set, 0, false), Args: []any{[]int64{1, 2, 3}, owner, int64(1), int64(3)}},
			"mark retried":  {SQL: d.fencedSQL(t, set, 1, false), Args: []any{[]int64{2}, []int64{1, 2, 3}, owner, int64(1), int64(3)}},
			"claim":         {SQL: claim, Args: claimArgs},
			"claim small":   {SQL: small, Args: smallArgs},
			"stats by type": {SQL: statsByTypeQuery(d, t)},
		}
	}
	h.MySQLErrorNumber = mysqlErrorNumber
	h.IsDuplicateKey = isDuplicateKey
	h.Transient = transient
}
