package hooks_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

func ExampleNew() {
	dir, _ := os.MkdirTemp("", "hooks-example")
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "shop.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		fmt.Println(err)
		return
	}
	_ = db.AutoMigrate(&Order{})

	plugin, err := hooks.New(hooks.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := db.Use(plugin); err != nil {
		fmt.Println(err)
		return
	}

	order := &Order{}
	order.Place(12.5) // records OrderPlaced
	if err := db.Create(order).Error; err != nil {
		fmt.Println(err)
		return
	}

	// The relay reads the table through a Store; here we just look.
	sqlDB, err := db.DB()
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := sqlstore.NewStore(databasesql.New(sqlDB), sqlstore.StoreConfig{})
	batch, err := store.Claim(ctx, relay.ClaimRequest{Owner: "example", Limit: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range batch.Messages {
		fmt.Println(m.Topic, m.EventType, m.AggregateType, m.AggregateID, string(m.Payload) != "")
	}
	_ = store.Release(ctx, "example") // publish nothing: the rows stay pending
	fmt.Println("pending on the aggregate:", len(order.Events()))
	// Output:
	// order orders.order_placed order 1 true
	// pending on the aggregate: 0
}
