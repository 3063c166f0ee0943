// Package pgcdc relays the outbox by tailing PostgreSQL's transaction log
// (change data capture) instead of polling the outbox table: a
// [relay.Store] that streams from a logical replication slot through the
// pgoutput plugin, with github.com/jackc/pglogrepl. Give it to relay.New in
// place of sqlstore.Store; the publishers, the adapters, the envelope, the
// headers and the consumers are the same, and a consumer cannot tell which
// relay published a message (TestPublishesInCommitOrder compares the two
// byte for byte).
//
//	store, err := pgcdc.Open(ctx, pgcdc.Config{ConnString: dsn}) // sets up the slot and the publication
//	if err != nil { ... }
//	defer store.Close()
//	r, err := relay.New(store, publisher, relay.Config{})
//	err = r.Run(ctx)
//
// The log is commit order by construction, so events are published in the
// order their transactions committed (each transaction's in the order
// written), reading it costs the database no queries, and no row is
// updated when it is published. The price: a slot keeps the server's WAL
// from the oldest event not yet confirmed, which a stopped relay lets grow
// (see Slot hygiene), and wal_level must be logical.
//
// # Two modes
//
// In [Table] mode (the default) the store streams the rows the writers
// insert into the outbox table: the GORM plugin and sqlstore.Writer need no
// change. The rows stay, to replay, to inspect, and for the polling relay
// to take over; the store sets published_at on the published ones in one
// UPDATE per 200ms, off the relay's path ([Config.SkipMarking]), so that
// retention, the dashboard and the operator command see them as the
// polling relay's.
//
// In [Messages] mode the writers emit each event as a transactional
// logical decoding message (pg_logical_emit_message(true, prefix, ...)) in
// the business transaction instead of a row (sqlstore.WriterConfig's or
// hooks.Config's LogicalMessages): the message commits or rolls back with
// the transaction, and the writers insert no outbox row: no index to
// maintain, no retention job (the table only parks what the broker refuses
// for good; see Parking). Nothing is left to replay, show on the dashboard
// or list in the operator command once the slot has moved past it, and
// event ids are not de-duplicated at write time. Choose it for volume,
// when the broker is the record; choose Table mode when the outbox table is
// one.
//
// What each costs, measured with relaybench on a 2-core machine shared by
// the PostgreSQL server, the relay and an in-process broker (draining a
// backlog of 200,000 events written after the slot existed; two runs):
// Messages mode published 1.6 to 1.9 times the polling relay's events/s
// and cost the server about a third of its CPU per event (4.7 ms per
// 1,000 events against 14 to 17). Table mode ran at 0.9 to 1.0 times the
// polling relay's events/s (1.4 times on a 20,000-event backlog) and cost
// the server more CPU per event (23 to 26 ms per 1,000), since the WAL
// sender decodes the marker's UPDATEs as well as the inserts;
// [Config.DeletePublished] brings it to 16. Writers committed about 1.3
// times as many transactions per second in Messages mode (no row, no
// index entries). Commit-to-broker latency was lower at the median in
// Table mode (0.7 ms against 2 ms at 1,000 events/s) but not at the 99th
// percentile on that saturated machine. So: Messages mode for volume and
// the database's CPU; Table mode for the rows (replay, dashboard,
// operator command) and a low median latency without polling.
//
// # Delivery
//
// The store holds the events of committed transactions in memory (at most
// [Config.MaxBuffered]) and hands the relay, per aggregate, a prefix of its
// unpublished ones. The slot's position (its confirmed_flush_lsn, sent in
// standby status updates: every [Config.StatusInterval], soon after a mark,
// and when the store closes) moves past a transaction only once the broker
// acknowledged all its events and every earlier transaction's. So a crash
// loses nothing, and the next store on the slot publishes again only the
// events not confirmed: at-least-once, as with the polling relay, with the
// consumers' inbox making it exactly-once in effect
// (TestRestartRepeatsNothingPublished).
//
// A message that fails is tried again after [Config.RetryDelay], doubled
// per attempt up to [Config.MaxRetryDelay], and its aggregate's later
// events wait with it; other aggregates go on.
//
// # Parking
//
// The slot cannot skip an event and come back to it, but a table can
// hold it. A message the broker refuses for good is parked in its row of
// the outbox table (parked_at and last_error, as the polling relay parks
// it), and its aggregate is diverted to the table: its later events are
// set aside as they stream (their rows held with next_attempt_at
// 'infinity' and a last_error that says why, written before the slot
// moves past them), so the slot goes on and nothing overtakes the parked
// event. The operator command and the dashboard show the parked row as
// they do the polling relay's ("outbox parked"). Once an operator retries
// or discards it (outbox parked retry|discard), the store publishes the
// aggregate's pending rows from the table, in id order (looking every
// second), then streams the aggregate again. The diverted aggregates are
// read from the table when the store opens, so a restart keeps them held
// (TestParkedEventHoldsItsAggregate, in both modes).
//
// In [Table] mode the rows are the writers'. In [Messages] mode an event
// has no row until it is parked or held: the store inserts one into
// [Config.Table] then, with the message's position in the log as its id,
// so the table must exist (sqlstore.Migrate or "outbox migrate" creates
// it; the writers never insert into it). Without it, such a message is
// logged at Error and retried every MaxRetryDelay, holding its aggregate
// and the slot's position back.
//
// # Fail-over
//
// A slot streams to one connection at a time. A second store on the same
// slot (another process) stands by ([Store.Standby]; Claim returns an
// empty batch) and tries to take the slot every second. When the active
// process dies, the server ends its WAL sender at once and the standby
// streams within about a second, from the confirmed position. When it is
// paused (SIGSTOP) or cut off, its connection stays open until the
// stream's wal_sender_timeout ends it ([Config.SenderTimeout]; the
// server's 60s by default); the standby takes over within that plus a
// second. A store whose own connection goes silent (half-open: the
// network drops every byte, no reset) takes it for dead once the server
// leaves two status intervals' worth of its status updates unanswered,
// and opens the stream again, from the same or another process, once the
// server ended the old one (TestHalfOpenStreamReopens). The store hands out events, and a batch may be published, only
// until [Config.Lease] (20s, below SenderTimeout) after the server was
// last heard from on the stream ([relay.Batch.Deadline]; each status
// update asks the server for a reply), and not after its stream ended
// ([relay.Batch.Lost]): a paused relay that wakes after a standby took
// over neither claims from its buffer nor goes on with its batch, so
// nothing it had lands behind later events. TestRelayProcessesKilledAndPaused runs three relay
// processes on one slot with SenderTimeout 3s while events are written:
// one killed, one paused past the timeout and resumed; every event reaches
// the broker, and each aggregate's events follow one another there (the
// successor's re-send of the unconfirmed tail aside). The correctness
// suite (adapters/harness/correctness -relay cdc) runs three CDC relays
// under every fault of its core tier, SenderTimeout 3s: in one run the
// events committed after a kill of the streaming relay were published
// 1.5s after it, after a SIGSTOP 3.8s, after its connections froze
// half-open 3.2s.
//
// # Slot hygiene
//
// [Setup] (run by [Open]) creates the publication (Table mode: on the
// outbox table, inserts only) and the slot (pgoutput), each unless it
// exists; [Drop] drops both. A slot streams what commits after it exists:
// create it before the writers start, or let the polling relay publish
// what the table held before. While the outbox is idle the store confirms
// the server's position from its keepalives, and every [Config.Heartbeat]
// writes an empty non-transactional message, so that a slot on an idle
// outbox in a busy database keeps no WAL (TestIdleSlotFollowsTheDatabase):
// at most what the database wrote in the last status interval (every
// status asks the server for its position; 10s by default). A stopped
// relay's slot does keep WAL, without bound unless the server's
// max_slot_wal_keep_size sets one; past it the server invalidates the
// slot. Watch it: [Store.SlotLag] (adapters/metrics' Config.SlotLag:
// outbox_cdc_slot_lag_bytes and outbox_cdc_slot_lag_seconds) and "outbox
// cdc status" report the WAL the slot keeps. The errors that need an operator name the fix: [ErrWALLevel],
// [ErrReplicationRole], [ErrSlotActive] (Drop of a slot in use; a standby
// only waits), [ErrSlotInvalidated] and [ErrNoSlot].
//
// # MySQL and MariaDB
//
// No maintained Go client of MySQL's binary log is available to this
// project, so the polling relay (sqlstore.Store) is the MySQL path. To tail
// the binary log instead, run Debezium's MySQL connector on the outbox
// table with its outbox event router, mapping the columns of
// sqlstore.OutboxDDL: the envelope travels in them unchanged.
//
// # Layout
//
// pgcdc is a module of its own, so that a program that polls does not
// require the replication protocol's library.
package pgcdc
