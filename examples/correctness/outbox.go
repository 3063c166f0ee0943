package main

// The writer's side of the outbox: the only file of the driving process
// that uses package hooks (New, Migrate, Plugin.Enqueue, NewStore and
// Store.Stats) and runtime/consumer (Migrate).

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// outbox is what the driving process needs of the library.
type outbox struct {
	plugin *hooks.Plugin
	store  *hooks.Store
}

// setupOutbox creates the outbox and inbox tables and registers the plugin
// on db.
func setupOutbox(ctx context.Context, db *gorm.DB) (*outbox, error) {
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return nil, fmt.Errorf("migrate outbox: %w", err)
	}
	if err := consumer.Migrate(ctx, db, ""); err != nil {
		return nil, fmt.Errorf("migrate inbox: %w", err)
	}
	plugin, err := hooks.New(hooks.Config{})
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	if err := db.Use(plugin); err != nil {
		return nil, fmt.Errorf("register plugin: %w", err)
	}
	store, err := hooks.NewStore(db, hooks.StoreConfig{})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return &outbox{plugin: plugin, store: store}, nil
}

// enqueue writes events of aggregateID through tx without touching any
// aggregate row (so without a row lock) and returns their ids in order.
func (o *outbox) enqueue(tx *gorm.DB, aggregateID string, events ...runtime.Event) ([]uuid.UUID, error) {
	ids, err := o.plugin.Enqueue(tx, aggregateType, aggregateID, events...)
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	return ids, nil
}

// outboxStats is the outbox's state as the drain check needs it.
type outboxStats struct {
	Pending, Parked int64
}

// stats reads the outbox's pending and parked counts.
func (o *outbox) stats(ctx context.Context) (outboxStats, error) {
	s, err := o.store.Stats(ctx)
	if err != nil {
		return outboxStats{}, fmt.Errorf("outbox stats: %w", err)
	}
	return outboxStats{Pending: s.Pending, Parked: s.Parked}, nil
}

// close releases the store's connection.
func (o *outbox) close() error { return o.store.Close() }
