package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// claimToken is the Token of the batches a Store returns.
type claimToken struct {
	owner string
	// retried are the ids of the batch's rows that have a retry schedule
	// (next_attempt_at), on a table with a queue: the published mark
	// clears it on them alone (see queueFencedSQL).
	retried []int64
}

// ExcludesInFlight implements [relay.InFlightExcluder]: Claim leaves out
// [relay.ClaimRequest.InFlight], so the relay claims its next batch while
// the store marks the last one.
func (s *Store) ExcludesInFlight() {}

const selectColumns = "id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, created_at, attempts"

// Claim implements [relay.Store]: it returns the claimable rows of the
// owner's shards, renewing its leases, and taking or giving back shards,
// when due. Renewals run in the background, beside the claims, while the
// owner's lease has more than half of LeaseTTL left; a claim renews in
// line, before it reads, only when the lease is shorter than that (or
// gone: the first claim), to give shards back, or when the owner holds no
// shard. The batch's Deadline is the end of the owner's lease.
func (s *Store) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	if req.Limit <= 0 {
		return relay.Batch{}, fmt.Errorf("sqlstore: claim: limit %d must be positive", req.Limit)
	}
	if req.Owner == "" {
		return relay.Batch{}, errors.New("sqlstore: claim: empty owner")
	}
	o := s.owner(req.Owner)
	o.claimMu.Lock()
	defer o.claimMu.Unlock()
	s.lookForFreeShards(ctx, req.Owner, o)
	if err := s.renewWhenDue(ctx, req.Owner, o, req.InFlight); err != nil {
		return relay.Batch{}, err
	}
	o.mu.Lock()
	if o.lock.suspended(o, time.Now()) {
		// No check of the session lock was answered lately: publish
		// nothing until one is (see lockAliveFor).
		o.mu.Unlock()
		return relay.Batch{ClaimAgainIn: lockCheckEvery / 4}, nil
	}
	shards, validUntil, sizeHint, lost := o.claimable, o.validUntil, o.lastClaimed, o.lost
	if len(shards) == 0 {
		again := s.claimAgainIn(o)
		o.mu.Unlock()
		return relay.Batch{ClaimAgainIn: again}, nil
	}
	o.mu.Unlock()
	msgs, retried, alive, err := s.selectClaimable(ctx, shards, req.InFlight, req.Limit, req.MaxBytes, sizeHint)
	if err != nil {
		return relay.Batch{}, err
	}
	o.mu.Lock()
	o.lastClaimed, o.last = len(msgs), msgs
	// An empty claim has no row to carry the count of relays alive.
	if m := s.cfg.MaxActiveRelays; len(msgs) > 0 && min(alive, m) != min(o.alive, m) {
		// A relay joined or left, and the active relays' share changed:
		// rebalance at the next claim rather than at the next scheduled
		// renewal, so a relay that starts beside a busy one gets its
		// share within a claim or two. One that joined makes the owner's
		// share smaller: the next claim renews in line, and gives shards
		// back. (A relay that joins or leaves as a standby changes no
		// share, and costs the busy relay no renewal.)
		o.nextRenew = time.Now()
		o.giveBack = o.giveBack || alive > o.alive
	}
	waiting := o.waiting && len(msgs) > 0
	if waiting {
		// Cleared before the register is, so that a renewal that
		// extends the request (under o.mu) either comes first or sees
		// that the owner no longer waits.
		o.waiting = false
	}
	o.mu.Unlock()
	if len(msgs) == 0 {
		return relay.Batch{}, nil
	}
	if waiting {
		// The relay found messages: it polls again before it waits. A
		// failure only leaves writers notifying until the next claim that
		// finds messages.
		if _, err := s.db.ExecContext(ctx, s.wake.cancel); err != nil {
			o.mu.Lock()
			o.waiting = true
			o.mu.Unlock()
		}
	}
	return relay.Batch{Messages: msgs, Deadline: validUntil, Lost: lost, Token: claimToken{owner: req.Owner, retried: retried}}, nil
}

// lookForFreeShards has a standby owner whose look is due count the shards
// nobody holds, or relays whose session lock it finds free (see
// lookAtLocks), and renew at once when there are some: a renewal is a
// durable transaction of half a dozen statements, too much to run four
// times a second on every standby, while this is one read. The caller
// holds o.claimMu.
func (s *Store) lookForFreeShards(ctx context.Context, owner string, o *ownerLease) {
	now := time.Now()
	o.mu.Lock()
	due := o.standby && !now.Before(o.nextLook)
	if due {
		o.nextLook = now.Add(standbyEvery)
	}
	o.mu.Unlock()
	if !due {
		return
	}
	free, err := s.lease.free(ctx, s.db, now)
	if err != nil {
		return // the renewal, on its schedule, looks too
	}
	dead, graceEnds, err := s.lookAtLocks(ctx, s.db, owner, now)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil && len(dead) > 0 {
		o.nextRenew = now // the renewal takes a dead relay's shards over
	} else if !graceEnds.IsZero() && graceEnds.Before(o.nextLook) {
		o.nextLook = graceEnds // look again once the grace has passed
	}
	if free == 0 {
		o.freeSince = time.Time{}
		return
	}
	if o.freeSince.IsZero() {
		o.freeSince = now
	}
	o.nextRenew = now
}

// claimAgainIn is the hint of an empty batch: while the owner takes its
// share over from other relays, which give shards back as soon as they see
// it alive, its next renewal may bring it messages.
func (s *Store) claimAgainIn(o *ownerLease) time.Duration {
	next := o.nextRenew
	switch {
	case o.standby:
		next = o.nextLook
		if o.nextRenew.Before(next) {
			next = o.nextRenew
		}
	case !o.short:
		return 0
	}
	return max(time.Until(next), time.Millisecond)
}

// selectClaimable reads the claimable rows of shards (see [Store]). The
// batch's slice is sized for about as many rows as the last claim found
// (sizeHint), not for limit: a relay that claims a few rows at a time, as
// it does at low rates, polling every few milliseconds, would otherwise
// allocate a limit-sized slice (about 250 KB at 1,000) per claim, and that
// garbage's collections, in the application's process, were the largest
// part of the commit-to-publish tail at 1,000 events/s.
//
// The byte cap is kept without adding payload sizes up row by row where
// the dialect can (a running sum cost PostgreSQL about a third of each
// 1,000-row claim): a "small" payload is one of at most maxBytes/limit
// bytes, and any limit small payloads together stay within maxBytes, so
// a claim that meets only small payloads is the batch. The database
// sends a large payload as NULL (so that no more than maxBytes of
// payload cross the wire); a claim that meets one is read again with the
// running sum, and claims keep the sum until one meets no large row.
func (s *Store) selectClaimable(ctx context.Context, shards []int16, inFlight []int64, limit int, maxBytes int64, sizeHint int) (msgs []runtime.OutboxMessage, retried []int64, alive int, err error) {
	if maxBytes <= 0 {
		maxBytes = 1 << 62
	}
	t, err := s.tablesNow(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	filter := ""
	if len(shards) < Shards {
		filter = " AND o.shard IN (" + shardList(shards) + ")"
	}
	var exclArgs []any
	if len(inFlight) > 0 {
		var excl string
		excl, exclArgs = s.dialect.excludeIDs(inFlight, claimArgs+1)
		filter += excl
	}
	small := maxBytes / int64(limit)
	sc, canCut := s.dialect.(smallClaimer)
	if canCut && !s.largeRows.Load() {
		// A relay holding every shard (one relay active, the default)
		// reads the window of the first claimable rows as a range while
		// it drains a backlog (its last claim was at least half full).
		// One sharing the outbox sees only its shards' entries, spread
		// among the others': a range of the table would read every
		// relay's rows (relaybench, 2 and 4 relays sharing: 0.91x and
		// 0.74x of one, against 1.10x and 1.14x walking). A relay that
		// claims a few rows at a time walks: the window's statement costs
		// more than a few lookups (relaybench's latency section, p99 at
		// 1,000 events/s: 9.8 ms with the window, 7.1 walking).
		window := len(shards) == Shards && 2*sizeHint >= limit
		q, args := sc.claimSmallQuery(t, filter, limit, small, window)
		msgs, retried, alive, large, err := s.readClaim(ctx, q, append(args, exclArgs...), limit, small, sizeHint)
		if err != nil {
			return nil, nil, 0, err
		}
		if large == 0 {
			return msgs, retried, alive, nil
		}
		s.largeRows.Store(true)
	}
	q, args := s.dialect.claimQuery(t, filter, limit, maxBytes)
	msgs, retried, alive, large, err := s.readClaim(ctx, q, append(args, exclArgs...), limit, small, sizeHint)
	if err == nil && canCut && large == 0 {
		s.largeRows.Store(false)
	}
	return msgs, retried, alive, err
}

// claimArgs is how many arguments the claim queries take before the
// filter's: PostgreSQL's take two; the other dialects splice their
// numbers and ids, and number nothing after their own.
const claimArgs = 2

// readClaim runs a claim query and decodes its rows; large counts the
// payloads larger than small. A NULL payload is a large one that
// claimSmallQuery left out (the column is NOT NULL): readClaim stops at
// the first, with large 1 and the rows before it.
func (s *Store) readClaim(ctx context.Context, q string, args []any, limit int, small int64, sizeHint int) (msgs []runtime.OutboxMessage, retried []int64, alive int, large int, err error) {
	err = s.onConn(ctx, func(c Executor) error {
		msgs, retried, alive, large, err = s.scanClaim(ctx, c, q, args, limit, small, sizeHint)
		return err
	})
	return msgs, retried, alive, large, err
}

// scanClaim is readClaim on c.
func (s *Store) scanClaim(ctx context.Context, c Executor, q string, args []any, limit int, small int64, sizeHint int) (msgs []runtime.OutboxMessage, retried []int64, alive int, large int, err error) {
	rows, err := c.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("sqlstore: claim: select pending: %w", err)
	}
	defer rows.Close()
	// Scan sets every field of these for each row, to values of the row's
	// own: declared once, since the pointers Scan takes would move a copy
	// per row to the heap (2,000 allocations, 220 KB, per 1,000 rows).
	var (
		r       RowValues
		payload sql.Null[[]byte]
		headers sql.NullString
	)
	for rows.Next() {
		if msgs == nil {
			msgs = make([]runtime.OutboxMessage, 0, min(limit, max(sizeHint, 16)))
		}
		if err := rows.Scan(&r.ID, &r.EventID, &r.EventType, &r.EventVersion, &r.AggregateType, &r.AggregateID,
			&r.Topic, &payload, &headers, &r.OccurredAt, &r.CreatedAt, &r.Attempts, &alive); err != nil {
			return nil, nil, 0, 0, fmt.Errorf("sqlstore: claim: scan: %w", err)
		}
		if r.Attempts < 0 {
			// A row with a retry schedule, its attempts encoded as
			// -1 - attempts (postgresClaimColumns).
			r.Attempts = -1 - r.Attempts
			retried = append(retried, r.ID)
		}
		if !payload.Valid {
			return msgs, retried, alive, 1, nil
		}
		r.Payload = payload.V
		if int64(len(r.Payload)) > small {
			large++
		}
		r.Headers = headers.String
		m, err := DecodeRow(r)
		if err != nil {
			return nil, nil, 0, 0, fmt.Errorf("sqlstore: claim: %w", err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, 0, 0, fmt.Errorf("sqlstore: claim: select pending: %w", err)
	}
	return msgs, retried, alive, large, nil
}
