package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// TestPublishesInCommitOrder: the relay on a CDC store publishes the
// committed events in the order their transactions committed (not the
// order their rows were inserted), each transaction's in order, and never
// a rolled-back one; and each message is the one the polling relay
// publishes for the same row, to the byte: id, metadata and payload.
func TestPublishesInCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, pgcdc.Table)
	e.cfg.SkipMarking = true // the rows stay pending for the polling relay
	store := e.open(t)
	pub := &broker{}
	runRelay(t, store, pub)

	a1, b1, c1, a2, a3 := event("a", 1), event("b", 1), event("c", 1), event("a", 2), event("a", 3)
	txA, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.writeTx(t, txA, a1) // inserted first, committed second
	e.write(t, false, b1)
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.write(t, true, c1) // rolled back
	e.write(t, false, a2, a3)

	want := []string{b1.EventID.String(), a1.EventID.String(), a2.EventID.String(), a3.EventID.String()}
	until(t, "four events published", func() bool { return len(pub.ids()) >= len(want) })
	if diff := cmp.Diff(want, pub.ids()); diff != "" {
		t.Fatalf("published event ids, in order (-commit order +got):\n%s", diff)
	}

	// The polling relay, on the same rows (the CDC relay marks none of
	// them), publishes the same messages.
	poll, err := sqlstore.NewStore(pgxv5.New(e.pool), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer poll.Close()
	polled := &broker{}
	stop := runRelay(t, poll, polled)
	until(t, "the polling relay's four", func() bool { return len(polled.ids()) >= len(want) })
	stop()
	byID := map[string]*message.Message{}
	for _, m := range polled.messages() {
		byID[m.UUID] = m
	}
	for _, m := range pub.messages() {
		p := byID[m.UUID]
		if p == nil {
			t.Fatalf("event %s: the polling relay did not publish it", m.UUID)
		}
		if diff := cmp.Diff(map[string]string(p.Metadata), map[string]string(m.Metadata)); diff != "" {
			t.Errorf("event %s: metadata (-polling +cdc):\n%s", m.UUID, diff)
		}
		if string(p.Payload) != string(m.Payload) {
			t.Errorf("event %s: payload %s, the polling relay's %s", m.UUID, m.Payload, p.Payload)
		}
	}
}

// TestRestartRepeatsNothingPublished: the slot's position moves only past
// events the broker acknowledged. A store closed while the broker refuses
// the later events leaves them to the next store on the slot, which
// publishes exactly those, in order, and none of the acknowledged ones
// again. The rows of the published events, and only those, get their
// published_at.
func TestRestartRepeatsNothingPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgcdc.Table)
	store := e.open(t)
	pub := &broker{}
	stop := runRelay(t, store, pub)

	var evs []runtime.Envelope
	for n := range 6 {
		evs = append(evs, event("x", n))
	}
	for _, ev := range evs[:3] {
		e.write(t, false, ev)
	}
	until(t, "the first three published", func() bool { return len(pub.ids()) == 3 })
	until(t, "the first three rows marked published", func() bool { return e.publishedRows(t) == 3 })
	refused := make(chan struct{}, 1)
	pub.mu.Lock()
	pub.fn = func([]*message.Message) error {
		select {
		case refused <- struct{}{}:
		default:
		}
		return errBroker
	}
	pub.mu.Unlock()
	for _, ev := range evs[3:] {
		e.write(t, false, ev)
	}
	<-refused // the relay tried the fourth, and the broker refused it
	stop()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	next := &broker{}
	runRelay(t, e.open(t), next)
	until(t, "the last three published", func() bool { return len(next.ids()) >= 3 })
	want := []string{evs[3].EventID.String(), evs[4].EventID.String(), evs[5].EventID.String()}
	if diff := cmp.Diff(want, next.ids()); diff != "" {
		t.Fatalf("published after the restart (-the unacknowledged, in order +got):\n%s", diff)
	}
	until(t, "all six rows marked published", func() bool { return e.publishedRows(t) == 6 })
}

// TestStandbyTakesTheSlotOver: a second store on the slot stands by while
// the first streams, takes the slot over once the first is closed, and
// publishes from where the first confirmed: the next event, not the first
// store's again.
func TestStandbyTakesTheSlotOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgcdc.Table)
	active := e.open(t)
	pub := &broker{}
	stop := runRelay(t, active, pub)
	until(t, "the first store streaming", func() bool { return active.Confirmed() != 0 })
	standby := e.open(t)
	until(t, "the second store standing by", standby.Standby)
	next := &broker{}
	runRelay(t, standby, next)

	e1 := event("s", 1)
	e.write(t, false, e1)
	until(t, "the first event published", func() bool { return len(pub.ids()) == 1 })
	stop()
	if err := active.Close(); err != nil {
		t.Fatal(err)
	}
	until(t, "the standby streaming", func() bool { return !standby.Standby() })
	e2 := event("s", 2)
	e.write(t, false, e2)
	until(t, "the second event published", func() bool { return len(next.ids()) >= 1 })
	if diff := cmp.Diff([]string{e2.EventID.String()}, next.ids()); diff != "" {
		t.Fatalf("published by the store that took over (-want +got):\n%s", diff)
	}
}

// TestStandbyWithFrozenConnectionsTakesTheSlot: a standby whose plain
// connections the network froze while it stood by still takes the slot
// when it is free. The statement it runs once its stream opens (reading
// the parked aggregates) used to wait on a frozen connection for good:
// the server soon ended the silent stream, and the standby, stuck, never
// streamed again (the correctness suite's crash takeover then waited for
// the killed relay's restart).
func TestStandbyWithFrozenConnectionsTakesTheSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgcdc.Table)
	active := e.open(t)
	pub := &broker{}
	stop := runRelay(t, active, pub)
	until(t, "the first store streaming", func() bool { return active.Confirmed() != 0 })

	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatalf("the test database's DSN is not a URL: %v", err)
	}
	proxy := runtimetest.StartProxy(t, u.Host)
	u.Host = proxy.Addr()
	// Several idle connections in the standby's pool, as a store that has
	// streamed before has: each would fail one statement once frozen.
	q := u.Query()
	q.Set("pool_min_conns", "3") // the store's pool has 3 at most
	u.RawQuery = q.Encode()
	cfg := e.cfg
	cfg.ConnString = u.String()
	cfg.StatementTimeout = time.Second
	var logs runtimetest.LogBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	standby, err := pgcdc.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Close() })
	t.Cleanup(proxy.Close) // before the store's close, which would wait on the frozen connections
	until(t, "the second store standing by", standby.Standby)
	until(t, "the standby's pool holding 3 connections through the proxy", func() bool { return len(proxy.ServerAddrs()) >= 3 })
	next := &broker{}
	runRelay(t, standby, next)
	// Its pool keeps its idle connections; the replication connections of
	// its tries come and go.
	if n := proxy.Blackhole(); n == 0 {
		t.Fatal("the standby has no connection through the proxy to freeze")
	}
	stop()
	if err := active.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := event("f", 1)
	e.write(t, false, e2)
	until(t, "the event published by the standby", func() bool { return slices.Contains(next.ids(), e2.EventID.String()) })
	// Holding the slot, it read the parked aggregates on a frozen
	// connection once, then on fresh ones: a store that failed a stream
	// opens new connections, and does not try each frozen one in turn
	// while standbys wait for the slot.
	if n := strings.Count(logs.String(), "read parked aggregates"); n > 1 {
		t.Errorf("the standby failed %d streams reading the parked aggregates on frozen connections, want at most 1:\n%s", n, logs.String())
	}
}

// TestMessagesMode: with the writer's LogicalMessages, the events travel
// as logical decoding messages: the relay publishes them in commit order,
// the rolled-back one never, and the outbox table stays empty.
func TestMessagesMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgcdc.Messages)
	pub := &broker{}
	runRelay(t, e.open(t), pub)
	m1, m2, m3, gone := event("m", 1), event("m", 2), event("n", 1), event("m", 9)
	e.write(t, false, m1)
	e.write(t, true, gone)
	e.write(t, false, m2, m3)
	want := []string{m1.EventID.String(), m2.EventID.String(), m3.EventID.String()}
	until(t, "three events published", func() bool { return len(pub.ids()) >= len(want) })
	if diff := cmp.Diff(want, pub.ids()); diff != "" {
		t.Fatalf("published (-commit order +got):\n%s", diff)
	}
	got := pub.messages()[0]
	env, err := runtime.EnvelopeFromMetadata(got.UUID, got.Metadata, got.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if env.AggregateID != "m" || env.Headers[runtime.MetadataCorrelationID] != "m-1" || string(env.Payload) != string(m1.Payload) {
		t.Errorf("first message's envelope %+v, want m1's", env)
	}
	var rows int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_messages`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d outbox rows in messages mode, want none", rows)
	}
}

// TestIdleSlotFollowsTheDatabase: with nothing written to the outbox
// while other tables are busy, the slot's confirmed position follows the
// server's WAL, so an idle outbox keeps no WAL from being recycled.
func TestIdleSlotFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, pgcdc.Table)
	e.cfg.Heartbeat = 200 * time.Millisecond
	e.open(t)
	if _, err := e.pool.Exec(ctx, `CREATE TABLE busy (id BIGSERIAL PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := e.pool.Exec(ctx, `INSERT INTO busy (v) SELECT repeat('x', 200) FROM generate_series(1, 500)`); err != nil {
			t.Fatal(err)
		}
	}
	var after string
	if err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	until(t, "the slot's position past the busy table's writes", func() bool {
		var past bool
		err := e.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot, after).Scan(&past)
		return err == nil && past
	})
	var kept, written int64
	if err := e.pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, (pg_current_wal_lsn() - $2::pg_lsn)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot, after).Scan(&kept, &written); err != nil {
		t.Fatal(err)
	}
	t.Logf("the slot followed the busy table's writes %v after they ended; it keeps %d bytes of WAL (%d written since)", time.Since(start).Round(time.Millisecond), kept, written)
}

// TestErrorsNameTheFix: a role without REPLICATION gets ErrReplicationRole
// from Claim, naming the grant; Drop of a slot in use gets ErrSlotActive.
func TestErrorsNameTheFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, pgcdc.Table)
	if err := pgcdc.Setup(ctx, e.cfg); err != nil {
		t.Fatal(err)
	}

	role := "pgcdc_norepl_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := e.pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = e.pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	// It may read and mark the outbox: only replication is refused.
	var schema string
	if err := e.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `GRANT USAGE ON SCHEMA `+schema+` TO `+role+`; GRANT SELECT, UPDATE ON outbox_messages TO `+role); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	cfg := e.cfg
	cfg.ConnString = u.String()
	s, err := pgcdc.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	until(t, "the stream's error", func() bool { return s.Err() != nil })
	_, err = s.Claim(ctx, relay.ClaimRequest{Owner: "o", Limit: 10})
	if !errors.Is(err, pgcdc.ErrReplicationRole) || !strings.Contains(err.Error(), "ALTER ROLE") {
		t.Errorf("Claim as a role without REPLICATION = %v, want ErrReplicationRole naming ALTER ROLE", err)
	}

	active := e.open(t)
	until(t, "the store streaming", func() bool { return active.Confirmed() != 0 })
	if err := pgcdc.Drop(ctx, e.cfg); !errors.Is(err, pgcdc.ErrSlotActive) {
		t.Errorf("Drop of a slot in use = %v, want ErrSlotActive", err)
	}
}

// TestConfigValidate: bad configurations fail with ErrInvalidConfig naming
// the field.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  pgcdc.Config
		want string
	}{
		{pgcdc.Config{}, "ConnString"},
		{pgcdc.Config{ConnString: "x", Mode: "rows"}, "Mode"},
		{pgcdc.Config{ConnString: "x", Slot: "Bad-Slot"}, "Slot"},
		{pgcdc.Config{ConnString: "x", Publication: "a b"}, "Publication"},
		{pgcdc.Config{ConnString: "x", Table: "a;b"}, "Table"},
		{pgcdc.Config{ConnString: "x", Lease: -1}, "Lease"},
		{pgcdc.Config{ConnString: "x", DeletePublished: true, SkipMarking: true}, "DeletePublished and SkipMarking"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, pgcdc.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig naming %s", c.cfg, err, c.want)
		}
	}
	if err := (pgcdc.Config{ConnString: "x"}).Validate(); err != nil {
		t.Errorf("Validate of the defaults: %v", err)
	}
}

// TestWALSenderTerminated: pg_terminate_backend of the slot's WAL sender,
// again and again while events are written and published, costs a
// reconnect each time: every committed event is published, each
// aggregate's in commit order (a repeat of the unconfirmed tail is
// allowed, never an event before an earlier one of its aggregate after
// that one was published), in both modes.
func TestWALSenderTerminated(t *testing.T) {
	t.Parallel()
	forEachMode(t, testWALSenderTerminated)
}

func testWALSenderTerminated(t *testing.T, mode pgcdc.Mode) {
	ctx := context.Background()
	e := newEnv(t, mode)
	e.cfg.RetryDelay = 10 * time.Millisecond
	store := e.open(t)
	pub := &broker{}
	runRelay(t, store, pub)

	const aggregates, perAggregate = 5, 40
	var want []runtime.Envelope
	seq := map[string]int{} // event id → its place in its aggregate
	kills := 0
	for n := range perAggregate {
		for a := range aggregates {
			ev := event(fmt.Sprint("k", a), n)
			want = append(want, ev)
			seq[ev.EventID.String()] = n
			e.write(t, false, ev)
		}
		if n%8 == 4 {
			var killed bool
			err := e.pool.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(active_pid)), false) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.cfg.Slot).Scan(&killed)
			if err != nil {
				t.Fatal(err)
			}
			if killed {
				kills++
			}
		}
	}
	if kills == 0 {
		t.Fatal("no WAL sender was terminated: the test tested nothing")
	}
	seen := func() map[string]bool {
		m := map[string]bool{}
		for _, id := range pub.ids() {
			m[id] = true
		}
		return m
	}
	until(t, "every event published", func() bool {
		s := seen()
		for _, ev := range want {
			if !s[ev.EventID.String()] {
				return false
			}
		}
		return true
	})
	// Per aggregate, the first publish of each event is in commit order.
	byID := map[string]runtime.Envelope{}
	for _, ev := range want {
		byID[ev.EventID.String()] = ev
	}
	last := map[string]int{}
	first := map[string]bool{}
	for _, id := range pub.ids() {
		if first[id] {
			continue // a repeat of the unconfirmed tail
		}
		first[id] = true
		ev, n := byID[id], seq[id]
		if prev, ok := last[ev.AggregateID]; ok && n != prev+1 {
			t.Fatalf("aggregate %s: event %d published after event %d", ev.AggregateID, n, prev)
		}
		last[ev.AggregateID] = n
	}
	t.Logf("%d WAL senders terminated; %d publishes of %d events", kills, len(pub.ids()), len(want))
}

// TestSlotLag: while the broker refuses, the slot keeps the WAL of the
// unpublished event (bytes) and the event ages (seconds); once it is
// published, the age is 0.
func TestSlotLag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, pgcdc.Table)
	store := e.open(t)
	var refuse atomic.Bool
	refuse.Store(true)
	pub := &broker{fn: func([]*message.Message) error {
		if refuse.Load() {
			return errBroker
		}
		return nil
	}}
	runRelay(t, store, pub)
	e.write(t, false, event("l", 1))
	until(t, "a lag while the broker refuses", func() bool {
		b, age, err := store.SlotLag(ctx)
		return err == nil && b > 0 && age > 0
	})
	refuse.Store(false)
	until(t, "no lag in seconds once published", func() bool {
		_, age, err := store.SlotLag(ctx)
		return err == nil && age == 0 && len(pub.ids()) == 1
	})
}

// TestHalfOpenStreamReopens: when the replication connection turns
// half-open (the network drops every byte both ways, no reset), the store
// takes it for dead once the server leaves its status updates unanswered,
// opens the stream again, takes the slot once the server's
// wal_sender_timeout ended the old WAL sender, and publishes what was
// committed meanwhile, after what came before it. A store that waited on
// the silent connection would never publish again.
func TestHalfOpenStreamReopens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgcdc.Table)
	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatalf("the test database's DSN is not a URL: %v", err)
	}
	proxy := runtimetest.StartProxy(t, u.Host)
	u.Host = proxy.Addr()
	cfg := e.cfg // e.cfg, without the proxy, drops the slot at the end
	cfg.ConnString = u.String()
	cfg.SenderTimeout = 2 * time.Second
	cfg.StatementTimeout = time.Second
	cfg.RetryDelay = 10 * time.Millisecond
	cfg.StatusInterval = 0 // its default, a third of SenderTimeout
	store, err := pgcdc.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// The proxy closes the frozen connections first, so that the pool's
	// close need not wait out pgx's 15s for their goodbyes.
	t.Cleanup(proxy.Close)
	pub := &broker{}
	runRelay(t, store, pub)

	before := event("h", 0)
	e.write(t, false, before)
	until(t, "the first event published", func() bool { return len(pub.ids()) > 0 })
	if n := proxy.Blackhole(); n == 0 {
		t.Fatal("the store has no connection through the proxy to freeze")
	}
	// Until the server ends it, the frozen stream's WAL sender holds the
	// slot: the store, which knows it for its own, takes the slot again
	// as soon as it is free, without standing by as if another process
	// held it.
	stoodBy := make(chan bool, 1)
	published := make(chan struct{})
	go func() {
		for {
			select {
			case <-published:
				stoodBy <- false
				return
			default:
			}
			if store.Standby() {
				stoodBy <- true
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	after := event("h", 1)
	e.write(t, false, after)
	until(t, "the event committed after the freeze published", func() bool {
		return slices.Contains(pub.ids(), after.EventID.String())
	})
	close(published)
	if <-stoodBy {
		t.Error("the store stood by while its own frozen stream's WAL sender held the slot")
	}
	ids := pub.ids()
	if ids[0] != before.EventID.String() {
		t.Fatalf("published %v: want %s first", ids, before.EventID)
	}
	until(t, "both rows marked published", func() bool { return e.publishedRows(t) == 2 })
}

// TestDeletePublished: with DeletePublished the rows of published events
// are deleted (the pending ones stay), and a restart of the store
// repeats nothing: the slot moved past them once they were gone.
func TestDeletePublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, pgcdc.Table)
	e.cfg.DeletePublished = true
	store := e.open(t)
	var refuse atomic.Bool
	var refused atomic.Int32
	pub := &broker{fn: func(msgs []*message.Message) error {
		if refuse.Load() {
			refused.Add(1)
			return errors.New("broker down")
		}
		return nil
	}}
	stop := runRelay(t, store, pub)
	published := []runtime.Envelope{event("d", 1), event("d", 2), event("e", 1)}
	e.write(t, false, published...)
	until(t, "three published", func() bool { return len(pub.ids()) == 3 })
	count := func() int {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	until(t, "the published rows deleted", func() bool { return count() == 0 })
	refuse.Store(true)
	pending := event("d", 3)
	e.write(t, false, pending)
	until(t, "the refused event tried", func() bool { return refused.Load() > 0 })
	stop()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows left, want the refused event's alone", n)
	}
	refuse.Store(false)
	runRelay(t, e.open(t), pub)
	until(t, "the refused event published", func() bool { return len(pub.ids()) == 4 })
	if diff := cmp.Diff(pending.EventID.String(), pub.ids()[3]); diff != "" {
		t.Fatalf("after the restart (-want +got):\n%s", diff)
	}
	until(t, "its row deleted", func() bool { return count() == 0 })
}

// TestUnmarkedEventNotRepublished: an event published whose row the
// marker has not marked yet keeps the slot's position behind it, so a new
// stream (its WAL sender terminated) delivers it again; the store knows it
// was published and does not publish it twice, and marks it once the
// marker can. The marker is held off by a lock on the row.
func TestUnmarkedEventNotRepublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, pgcdc.Table)
	e.cfg.RetryDelay = 10 * time.Millisecond
	store := e.open(t)
	pub := &broker{}
	runRelay(t, store, pub)

	// The event's row is locked right after its commit, before the
	// marker's next pass (every 200ms) marks it: the marker's UPDATE then
	// waits on the lock, and the slot stays behind the event. A row the
	// marker got to first proves nothing: the next event is tried.
	var first runtime.Envelope
	var lock pgx.Tx
	for n := 1; lock == nil; n++ {
		if n > 5 {
			t.Fatal("the marker marked each of 5 events before the test could lock its row")
		}
		first = event("u", n)
		e.write(t, false, first)
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var unmarked bool
		if err := tx.QueryRow(ctx, `SELECT published_at IS NULL FROM outbox_messages WHERE event_id = $1 FOR UPDATE`, first.EventID).Scan(&unmarked); err != nil {
			t.Fatal(err)
		}
		if !unmarked {
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		lock = tx
	}
	defer lock.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	until(t, "the locked event published", func() bool { return slices.Contains(pub.ids(), first.EventID.String()) })
	// ... so that the marker's UPDATE waits on it, and the slot stays
	// behind the event while the WAL sender is terminated.
	var killed bool
	until(t, "the WAL sender terminated", func() bool {
		err := e.pool.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(active_pid)), false) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.cfg.Slot).Scan(&killed)
		return err == nil && killed
	})
	before := pub.ids()
	second := event("u", 100)
	e.write(t, false, second)
	until(t, "the next event published", func() bool { return slices.Contains(pub.ids(), second.EventID.String()) })
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	until(t, "every row marked published", func() bool { return e.publishedRows(t) == len(before)+1 })
	if diff := cmp.Diff(append(before, second.EventID.String()), pub.ids()); diff != "" {
		t.Fatalf("published after the WAL sender was terminated (-want +got):\n%s", diff)
	}
}
