package main

// The CDC relay's paths (package runtime/sqlstore/pgcdc): in the relay
// section, a drain of the same pre-filled backlog streamed from a
// replication slot, in Table mode (the plugin's rows) and in Messages mode
// (the plugin's logical decoding messages, no rows); in the latency
// section, the CDC relay with its defaults behind the plugin's saves; in
// the save section, the plugin writing logical decoding messages instead
// of rows. Each run streams from a slot of its own, created before its
// events are written (a slot streams what commits after it exists) and
// dropped after. They need wal_level = logical; without it they are left
// out, with a note.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

const (
	cdcTableLabel    = "CDC relay (pgcdc), Table mode: streams the plugin's rows"
	cdcMessagesLabel = "CDC relay (pgcdc), Messages mode: logical decoding messages, no rows"
	cdcDeleteLabel   = "CDC relay (pgcdc), Table mode, DeletePublished (the mark is a DELETE)"
	cdcLatencyLabel  = "CDC relay (pgcdc, Table mode), defaults"
	saveMessages     = "hooks plugin, LogicalMessages (CDC Messages mode: no outbox row)"
)

// cdcAvailable reports whether the database's wal_level lets a slot be
// created, and if not, why.
func (b *bench) cdcAvailable(ctx context.Context) (bool, string) {
	var level string
	if err := b.plain.WithContext(ctx).Raw(`SHOW wal_level`).Scan(&level).Error; err != nil {
		return false, err.Error()
	}
	if level != "logical" {
		return false, fmt.Sprintf("wal_level is %s, not logical", level)
	}
	return true, ""
}

// cdcConfig returns the config of a new CDC run: a slot, publication and
// message prefix of its own (messages belong to the database, and every
// slot of it would read another run's).
func (b *bench) cdcConfig(mode pgcdc.Mode) pgcdc.Config {
	b.cdcRuns++
	name := fmt.Sprintf("relaybench_%d_%d", b.started.UnixNano()%1_000_000_000, b.cdcRuns)
	return pgcdc.Config{ConnString: b.dsn, Mode: mode, Slot: name, MessagePrefix: name, Logger: quietLogger()}
}

// withSlot creates cfg's slot and publication and returns what drops
// them, once the stream that used them has ended.
func withSlot(ctx context.Context, cfg pgcdc.Config) (drop func() error, err error) {
	if err := pgcdc.Setup(ctx, cfg); err != nil {
		return nil, err
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		return pgcdc.DropWhenFree(ctx, cfg)
	}, nil
}

// messagesDB returns a GORM database whose plugin writes the events as
// logical decoding messages with prefix.
func (b *bench) messagesDB(prefix string) (*gorm.DB, *hooks.Plugin, func(), error) {
	db, err := gorm.Open(postgres.Open(b.dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, nil, nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, nil, err
	}
	sqlDB.SetMaxIdleConns(max(16, b.o.producers+4))
	p, err := hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return topic }, LogicalMessages: prefix})
	if err == nil {
		err = db.Use(p)
	}
	if err != nil {
		sqlDB.Close()
		return nil, nil, nil, err
	}
	return db, p, func() { sqlDB.Close() }, nil
}

// drainCDC pre-fills the backlog in mode (rows, or messages) after its
// slot exists, and drains it with one CDC relay (deleting the rows of the
// published events, with deletePublished).
func (b *bench) drainCDC(ctx context.Context, mode pgcdc.Mode, deletePublished bool) (time.Duration, error) {
	cfg := b.cdcConfig(mode)
	cfg.DeletePublished = deletePublished
	drop, err := withSlot(ctx, cfg)
	if err != nil {
		return 0, err
	}
	db, plugin := b.db, b.plugin
	if mode == pgcdc.Messages {
		mdb, mp, closeDB, err := b.messagesDB(cfg.MessagePrefix)
		if err != nil {
			return 0, errors.Join(err, drop())
		}
		defer closeDB()
		db, plugin = mdb, mp
	}
	if err := prefill(ctx, db, plugin, b.ev, b.o.events, b.o.aggregates); err != nil {
		return 0, errors.Join(err, drop())
	}
	pub, err := b.publisher("cdc")
	if err != nil {
		return 0, errors.Join(err, drop())
	}
	store, err := pgcdc.Open(ctx, cfg)
	if err != nil {
		return 0, errors.Join(err, drop())
	}
	m := startCPU(localURL(b.o.dsn))
	d, err := drainRelays(ctx, []relay.Store{store}, []message.Publisher{pub}, b.o.batch, b.o.events)
	use := m.stop()
	b.lastCPU = &use
	return d, errors.Join(err, store.Close(), drop())
}

// cdcLatencyPath is the latency section's CDC relay, with its defaults,
// behind the plugin's saves (Table mode).
func (b *bench) cdcLatencyPath() latencyPath {
	ours := b.oursLatencyWrite
	return latencyPath{cdcLatencyLabel,
		func(ctx context.Context, rec *ackRecorder) (func() error, error) {
			cfg := b.cdcConfig(pgcdc.Table)
			drop, err := withSlot(ctx, cfg)
			if err != nil {
				return nil, err
			}
			s, err := pgcdc.Open(ctx, cfg)
			if err != nil {
				return nil, errors.Join(err, drop())
			}
			r, err := relay.New(s, rec, relay.Config{Logger: quietLogger()})
			if err != nil {
				return nil, errors.Join(err, s.Close(), drop())
			}
			return runUntilStopped(ctx, r.Run, r.Running(), func() error { return errors.Join(s.Close(), drop()) })
		},
		ours, nil}
}
