package relay

import (
	"context"
	"time"
)

// leaseLoser is implemented by stores that can tell why a relay lost
// shards it held without giving them back (sqlstore.Store.LeaseLost): its
// lease expired (the relay was paused, or cut off from the database), its
// database session ended, or others took it for dead. Run asks after each
// round and logs a loss at WARN ("relay: lease lost"); shards given back
// (a rebalance, a hand-over) are no loss, and show at INFO only ("relay:
// shards held").
type leaseLoser interface {
	// LeaseLost reports, once, the last loss of owner's shards: why, and
	// how long past its lease's end its renewal came (zero unless the
	// lease expired); ok is false when there was none since the last call.
	LeaseLost(owner string) (reason string, late time.Duration, ok bool)
}

// logLeaseLost logs, at WARN, a loss of owner's shards that the store
// reports.
func (r *Relay) logLeaseLost(owner string) {
	ll, ok := r.store.(leaseLoser)
	if !ok {
		return
	}
	if reason, late, lost := ll.LeaseLost(owner); lost {
		r.log.Warn("relay: lease lost", attrOwner, owner, attrReason, reason, attrLate, late)
	}
}

// untilLost returns ctx, cancelled with errLeaseLost when lost (a batch's
// [Batch.Lost], may be nil) is closed, and the function that releases it.
func untilLost(ctx context.Context, lost <-chan struct{}) (context.Context, context.CancelFunc) {
	if lost == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	select {
	case <-lost:
		cancel(errLeaseLost)
		return ctx, func() {}
	default:
	}
	go func() {
		select {
		case <-lost:
			cancel(errLeaseLost)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Log attribute keys of "relay: lease lost".
const (
	attrReason = "reason"
	attrLate   = "late"
)
