package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gooutbox/outbox/runtime/dashboard"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

func dashboardCommand() *command {
	c := &command{
		name: "dashboard", args: "[--addr 127.0.0.1:8080] [--allow-actions] [--cdc-slot S] [--dead-letters]",
		summary: "serve the web dashboard (backlog, lag, parked events, search)",
		help: `Serves the outbox's web dashboard (package runtime/dashboard) at --addr
until SIGINT or SIGTERM: pending, retrying and parked counts, backlog and lag
over time, counts per topic and event type, the parked events with their last
error, and any event by row id, event id or aggregate id.

It is read-only unless --allow-actions is given; then parked events can be
retried or discarded, each after a confirmation page (with CSRF protection).
With --cdc-slot, the overview also shows that CDC relay's replication slot
(outbox cdc status's figures): whether a relay streams from it, the WAL it
keeps, and its wal_status. With --dead-letters (or --dead-letter-table T), it
shows the consumers' dead letters of that database, per consumer (see outbox
help deadletters).

The dashboard has no login: it listens on the loopback interface by default;
put it behind an authenticating proxy before listening anywhere else.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
		allow := fs.Bool("allow-actions", false, "show retry and discard buttons on parked events")
		interval := fs.Duration("sample-interval", 10*time.Second, "how often to sample the backlog for the charts")
		cdcSlot := fs.String("cdc-slot", "", "also show this CDC relay's replication `slot` (PostgreSQL): whether a relay streams from it and the WAL it keeps")
		deadLetters := fs.Bool("dead-letters", false, "also show the consumers' dead letters of this database, per consumer")
		deadLetterTable := fs.String("dead-letter-table", "", "with --dead-letters: the dead-letter `table` (default: "+sqlstore.DeadLetterDefaultTable+")")
		verbose := fs.Bool("v", false, "debug logs")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("dashboard takes flags, no arguments (got %q)", pos)
		}
		if *interval <= 0 {
			return usagef("--sample-interval must be positive")
		}
		var slot func(context.Context) (dashboard.SlotFigures, error)
		if *cdcSlot != "" {
			if slot, err = slotFigures(fs, *cdcSlot); err != nil {
				return err
			}
		}
		log := logger(e, fs, *verbose)
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		var deadLetterCounts func(context.Context) ([]sqlstore.DeadLetterCount, error)
		if *deadLetters || *deadLetterTable != "" {
			dl, err := sqlstore.NewDeadLetters(databasesql.New(db.db), db.dialect, *deadLetterTable)
			if err != nil {
				return usageError{err.Error()}
			}
			deadLetterCounts = dl.Counts
		}
		dash, err := dashboard.New(db.store, dashboard.Config{AllowActions: *allow, SampleInterval: *interval, Slot: slot, DeadLetters: deadLetterCounts, Logger: log})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return fmt.Errorf("dashboard: %w", err)
		}
		srv := &http.Server{Handler: dash, ReadHeaderTimeout: 10 * time.Second}
		fmt.Fprintf(e.stdout, "dashboard: http://%s/\n", ln.Addr())
		sampleCtx, stopSampling := context.WithCancel(e.ctx)
		defer stopSampling()
		go func() { _ = dash.Run(sampleCtx) }()
		serveErr := make(chan error, 1)
		go func() { serveErr <- srv.Serve(ln) }()
		select {
		case err := <-serveErr:
			return fmt.Errorf("dashboard: %w", err)
		case <-e.ctx.Done():
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("dashboard: shutdown: %w", err)
		}
		return nil
	}
	return c
}

// slotFigures returns the dashboard's reader of the CDC slot named slot
// (pgcdc.Status, once per overview).
func slotFigures(fs *flagSet, slot string) (func(context.Context) (dashboard.SlotFigures, error), error) {
	_, dsn, d, err := parseDatabaseURL(fs.db)
	if err != nil {
		return nil, err
	}
	if d != sqlstore.Postgres {
		return nil, &flagError{Flag: "--db", Value: redactURL(fs.db), Want: "a postgres:// URL with --cdc-slot: CDC relays stream from PostgreSQL"}
	}
	cfg := pgcdc.Config{ConnString: dsn, Table: fs.table, Slot: slot}
	if err := cfg.Validate(); err != nil {
		return nil, usagef("--cdc-slot: %v", err)
	}
	return func(ctx context.Context) (dashboard.SlotFigures, error) {
		st, err := pgcdc.Status(ctx, cfg)
		if err != nil {
			return dashboard.SlotFigures{Name: slot}, err
		}
		return dashboard.SlotFigures{Name: slot, Exists: st.Exists, Streaming: st.Active, LagBytes: st.LagBytes,
			WALStatus: st.WALStatus, ConfirmedLSN: st.ConfirmedLSN}, nil
	}, nil
}
