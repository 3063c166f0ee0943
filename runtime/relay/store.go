package relay

import (
	"context"

	"github.com/gooutbox/outbox/runtime"
)

// PublishFunc publishes a claimed batch. msgs are in outbox ID order. It
// returns the IDs of the messages it published (a subset of msgs) and, when
// some were not published, an error saying why. The store marks exactly the
// returned IDs as published.
//
// PublishFunc is an alias, so stores in other packages (hooks.Store) satisfy
// [Store] without importing this package.
type PublishFunc = func(ctx context.Context, msgs []runtime.OutboxMessage) (published []int64, err error)

// Store is the outbox as the relay sees it. package hooks provides the GORM /
// SQL implementation (hooks.Store); it satisfies Store structurally.
//
// Implementations must be safe for concurrent use by several relays.
type Store interface {
	// Claim claims up to limit pending messages in ID order, exclusively
	// for the caller until Claim returns (PostgreSQL: FOR UPDATE SKIP
	// LOCKED inside a transaction), and calls publish with them unless
	// there are none. It then marks the IDs publish returned as published,
	// records a failed attempt (with publish's error text) on the other
	// claimed messages, and releases the claim.
	//
	// Claim returns the number of messages claimed. It returns publish's
	// error (wrapped) after marking what was published, and an error when
	// the claim or the marking fails; in that case nothing is marked and
	// the messages are claimed again later (at-least-once). If ctx is
	// cancelled, Claim releases the claim and returns ctx's error.
	Claim(ctx context.Context, limit int, publish PublishFunc) (claimed int, err error)
}

// Notifier is implemented by stores that can wake the relay when new messages
// are committed (PostgreSQL LISTEN/NOTIFY). Notifications are a hint: the
// relay also polls, so a lost notification delays a message by at most one
// poll interval.
type Notifier interface {
	// Listen blocks, calling notify whenever new messages may be pending,
	// until ctx is done (it then returns ctx.Err()) or the notification
	// channel fails (it returns the error; the relay calls Listen again
	// after a backoff). It calls notify once as soon as it is listening, so
	// messages committed while it was not listening are not missed.
	//
	// A store that implements Listen but cannot notify in its current
	// configuration (SQLite) returns an error wrapping
	// errors.ErrUnsupported at once; the relay then stops calling Listen
	// and polls as it does for a store that is not a Notifier.
	Listen(ctx context.Context, notify func()) error
}
