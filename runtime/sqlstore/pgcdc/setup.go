package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Setup creates cfg's publication and logical replication slot, each
// unless it exists, after checking that the server's wal_level is logical.
// In [Table] mode the publication is on the outbox table, inserts only; in
// [Messages] mode it holds no table (pgoutput needs one to be named; the
// messages do not depend on it). The slot uses the pgoutput plugin.
// [Open] runs Setup first, and so does the operator command's
// "outbox cdc setup".
//
// A slot streams what is committed after it was created: create it before
// the writers start, or publish what the outbox table held before with
// the polling relay. Setup returns an error wrapping [ErrWALLevel],
// [ErrSlotInvalidated] (a slot of that name exists but lost its WAL) or
// [ErrInvalidConfig], or the server's error.
func Setup(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.setDefaults()
	conn, err := connectOne(ctx, cfg.ConnString)
	if err != nil {
		return fmt.Errorf("pgcdc: setup: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := checkWALLevel(ctx, conn); err != nil {
		return err
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("pgcdc: setup: look up publication %q: %w", cfg.Publication, err)
	}
	if !exists {
		stmt := `CREATE PUBLICATION ` + cfg.Publication
		if cfg.Mode == Table {
			stmt += ` FOR TABLE ` + cfg.Table + ` WITH (publish = 'insert')`
		}
		if _, err := conn.Exec(ctx, stmt); err != nil && !isCode(err, "42710") {
			return fmt.Errorf("pgcdc: setup: create publication %q: %w", cfg.Publication, err)
		}
	}
	var plugin, walStatus *string
	err = conn.QueryRow(ctx, `SELECT plugin, wal_status FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&plugin, &walStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		_, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, cfg.Slot)
		if err != nil && !isCode(err, "42710") {
			return classify(fmt.Errorf("pgcdc: setup: create replication slot %q: %w", cfg.Slot, err), &cfg)
		}
		return nil
	case err != nil:
		return fmt.Errorf("pgcdc: setup: look up replication slot %q: %w", cfg.Slot, err)
	case plugin == nil || *plugin != "pgoutput":
		return fmt.Errorf("%w: replication slot %q exists but is not a logical slot of the pgoutput plugin (plugin %v): drop it or choose another Slot", ErrInvalidConfig, cfg.Slot, deref(plugin))
	case walStatus != nil && *walStatus == "lost":
		return fmt.Errorf("%w: replication slot %q has wal_status lost: the events after its position were removed from the WAL (max_slot_wal_keep_size); drop and set up the slot again (outbox cdc drop, outbox cdc setup), and publish what the outbox table still holds with the polling relay", ErrSlotInvalidated, cfg.Slot)
	}
	return nil
}

// Drop drops cfg's replication slot and publication, if they exist. The
// slot must not be in use: Drop returns an error wrapping [ErrSlotActive]
// while a relay streams from it. Once dropped, the server keeps no WAL for
// it; events committed until a new slot exists are not streamed.
func Drop(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.setDefaults()
	conn, err := connectOne(ctx, cfg.ConnString)
	if err != nil {
		return fmt.Errorf("pgcdc: drop: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot)
	if err != nil {
		return classify(fmt.Errorf("pgcdc: drop replication slot %q: %w", cfg.Slot, err), &cfg)
	}
	if _, err := conn.Exec(ctx, `DROP PUBLICATION IF EXISTS `+cfg.Publication); err != nil {
		return fmt.Errorf("pgcdc: drop publication %q: %w", cfg.Publication, err)
	}
	return nil
}

// DropWhenFree drops cfg's slot and publication as [Drop] does, waiting
// while the slot is in use until ctx is done: for a program that has just
// closed its stores (the server releases a slot when its WAL sender exits,
// shortly after the stream's connection closed), or a script that stops
// the relays, then drops. It tries again every 50ms; once ctx is done it
// returns the last error, wrapping [ErrSlotActive].
func DropWhenFree(ctx context.Context, cfg Config) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := Drop(ctx, cfg)
		if !errors.Is(err, ErrSlotActive) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}

// checkWALLevel returns an error wrapping [ErrWALLevel], naming the fix,
// unless the server's wal_level is logical.
func checkWALLevel(ctx context.Context, conn *pgx.Conn) error {
	var level string
	if err := conn.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		return fmt.Errorf("pgcdc: read wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w: it is %q: set it with ALTER SYSTEM SET wal_level = logical and restart PostgreSQL", ErrWALLevel, level)
	}
	return nil
}

func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// SlotStatus is what the server says of cfg's slot ([Status]).
type SlotStatus struct {
	// Exists reports whether the slot exists; the other fields are zero
	// when it does not.
	Exists bool
	// Publication reports whether the publication exists.
	Publication bool
	// Active reports whether a process streams from the slot, and
	// ActivePID is its server process.
	Active    bool
	ActivePID int
	// ConfirmedLSN is the position up to which the events were published
	// (confirmed_flush_lsn), in PostgreSQL's text form.
	ConfirmedLSN string
	// LagBytes is the WAL written since ConfirmedLSN: what a relay
	// starting now would read, at most, and about what the slot keeps.
	LagBytes int64
	// WALStatus is the server's wal_status of the slot: reserved,
	// extended, unreserved or lost (invalidated: see
	// [ErrSlotInvalidated]).
	WALStatus string
}

// Status reports cfg's slot and publication as the server sees them (the
// operator command's "outbox cdc status").
func Status(ctx context.Context, cfg Config) (SlotStatus, error) {
	if err := cfg.Validate(); err != nil {
		return SlotStatus{}, err
	}
	cfg.setDefaults()
	conn, err := connectOne(ctx, cfg.ConnString)
	if err != nil {
		return SlotStatus{}, fmt.Errorf("pgcdc: status: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var st SlotStatus
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&st.Publication); err != nil {
		return SlotStatus{}, fmt.Errorf("pgcdc: status: look up publication %q: %w", cfg.Publication, err)
	}
	var pid *int32
	var lsn, walStatus *string
	var lag *int64
	err = conn.QueryRow(ctx, `SELECT active, active_pid, confirmed_flush_lsn::text,
		(pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, wal_status
		FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&st.Active, &pid, &lsn, &lag, &walStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return st, nil
	case err != nil:
		return SlotStatus{}, fmt.Errorf("pgcdc: status: look up replication slot %q: %w", cfg.Slot, err)
	}
	st.Exists = true
	if pid != nil {
		st.ActivePID = int(*pid)
	}
	st.ConfirmedLSN, st.WALStatus = deref(lsn), deref(walStatus)
	if lag != nil {
		st.LagBytes = *lag
	}
	return st, nil
}

// connectOne opens one connection (no pool) with connString, without the
// pool's settings (pool_max_conns and the like) that the store's pool
// reads from it and the server would refuse.
func connectOne(ctx context.Context, connString string) (*pgx.Conn, error) {
	pc, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	dropPoolParams(pc.RuntimeParams)
	return pgx.ConnectConfig(ctx, pc)
}

// dropPoolParams deletes pgxpool's settings (pool_max_conns, ...) from a
// connection's runtime parameters: they are the pool's, not the server's.
func dropPoolParams(params map[string]string) {
	for k := range params {
		if strings.HasPrefix(k, "pool_") {
			delete(params, k)
		}
	}
}
