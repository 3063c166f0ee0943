package main

import (
	"fmt"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

// cdcCommand manages the logical replication slot and publication of the
// change-data-capture relay (package runtime/sqlstore/pgcdc).
func cdcCommand() *command {
	c := &command{
		name: "cdc", args: "setup|drop|status",
		summary: "set up, drop or show the CDC relay's replication slot (PostgreSQL)",
		help: `Manages the logical replication slot and the publication that the
change-data-capture relay (package runtime/sqlstore/pgcdc) streams the outbox
from, on PostgreSQL with wal_level = logical:

  setup   create the publication (on the outbox table, inserts only; with
          --mode messages, on no table) and the slot (pgoutput), each unless
          it exists. A slot streams what commits after it exists: set it up
          before the writers start.
  drop    drop both. The slot must not be in use. The server then keeps no
          WAL for it; events committed until a new slot exists are not
          streamed.
  status  show the slot: whether a relay streams from it (its server
          process), the position confirmed published, and the WAL written
          since (what the slot keeps). Exit status 3 when the slot was
          invalidated or does not exist.

--slot and --publication default to the outbox table's name followed by _cdc,
as pgcdc.Config's.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		slot := fs.String("slot", "", "replication `slot` (default: <table>_cdc)")
		publication := fs.String("publication", "", "`publication` (default: the slot's name)")
		mode := fs.String("mode", "table", "`mode`: table (rows of the outbox table) or messages (logical decoding messages)")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("cdc takes one of setup, drop or status")
		}
		_, dsn, d, err := parseDatabaseURL(fs.db)
		if err != nil {
			return err
		}
		if d != sqlstore.Postgres {
			return &flagError{Flag: "--db", Value: redactURL(fs.db), Want: "a postgres:// URL: the CDC relay streams from PostgreSQL's logical replication (on MySQL and MariaDB, the polling relay)"}
		}
		cfg := pgcdc.Config{ConnString: dsn, Table: fs.table, Slot: *slot, Publication: *publication, Mode: pgcdc.Mode(*mode)}
		if err := cfg.Validate(); err != nil {
			return usagef("%v", err)
		}
		names := cfg.WithDefaults()
		switch pos[0] {
		case "setup":
			if err := pgcdc.Setup(e.ctx, cfg); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "slot %s and publication %s are set up\n", names.Slot, names.Publication)
			return nil
		case "drop":
			if err := pgcdc.Drop(e.ctx, cfg); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "slot %s and publication %s are dropped\n", names.Slot, names.Publication)
			return nil
		case "status":
			st, err := pgcdc.Status(e.ctx, cfg)
			if err != nil {
				return err
			}
			if fs.json {
				if err := writeJSON(e.stdout, st); err != nil {
					return err
				}
			} else {
				t := newTable(e.stdout, "SLOT", "EXISTS", "ACTIVE PID", "CONFIRMED", "LAG BYTES", "WAL STATUS", "PUBLICATION")
				pid := "-"
				if st.Active {
					pid = itoa(int64(st.ActivePID))
				}
				t.row(names.Slot, fmt.Sprint(st.Exists), pid, st.ConfirmedLSN, itoa(st.LagBytes), st.WALStatus, fmt.Sprint(st.Publication))
				if err := t.flush(); err != nil {
					return err
				}
			}
			switch {
			case !st.Exists:
				return alertError{fmt.Sprintf("replication slot %s does not exist (outbox cdc setup creates it)", names.Slot)}
			case st.WALStatus == "lost":
				return alertError{fmt.Sprintf("replication slot %s was invalidated: drop it and set it up again, and publish what the outbox table holds with the polling relay", names.Slot)}
			}
			return nil
		}
		return usagef("cdc %s: want setup, drop or status", pos[0])
	}
	return c
}
