package runtime

import (
	"time"

	"github.com/google/uuid"
)

// Recorder collects the events an aggregate records until the transaction
// that saves the aggregate has committed. Aggregates embed it by value:
//
//	type Order struct {
//		ID     int64
//		Status string
//		runtime.Recorder
//	}
//
//	func (o *Order) Pay(clk runtime.Clock, amount string) {
//		o.Status = "paid"
//		o.Record(NewOrderPaid(clk, amount))
//	}
//
// The zero value is ready to use. Recorder has no exported fields, so GORM
// maps no column for it. Like the aggregate that embeds it, a Recorder is not
// safe for concurrent use.
//
// Each recorded event gets its event id (UUIDv7) at [Recorder.Record] time and
// keeps it until the event is confirmed, so writing the same pending event
// twice (a retried save, two saves in one transaction) writes one outbox row:
// the outbox deduplicates on the event id. The persistence layer (package
// hooks) calls [Recorder.MarkWritten] and [Recorder.Confirm]; application
// code only calls Record and, in tests, [Recorder.Events].
type Recorder struct {
	pending []Recorded
}

// Recorded is a pending event with the identity it was given when recorded.
type Recorded struct {
	// ID is the event id, assigned once by [Recorder.Record].
	ID uuid.UUID
	// Event is the recorded event.
	Event Event
	// RecordedAt is when Record was called (wall clock).
	RecordedAt time.Time
	// WrittenIn identifies the transaction that last wrote the event to the
	// outbox, as set by [Recorder.MarkWritten]; nil if never written.
	WrittenIn any
}

// Record appends events to the aggregate's pending events. Nil events are
// ignored.
func (r *Recorder) Record(events ...Event) {
	now := time.Now()
	for _, e := range events {
		if e == nil {
			continue
		}
		r.pending = append(r.pending, Recorded{ID: newEventID(), Event: e, RecordedAt: now})
	}
}

// Events returns the pending events in the order they were recorded: those
// whose saving transaction has not been confirmed as committed. The slice is
// a copy.
func (r *Recorder) Events() []Event {
	out := make([]Event, len(r.pending))
	for i, p := range r.pending {
		out[i] = p.Event
	}
	return out
}

// Pending returns a copy of the pending events with their ids. It is meant
// for persistence layers.
func (r *Recorder) Pending() []Recorded {
	if len(r.pending) == 0 {
		return nil
	}
	return append([]Recorded(nil), r.pending...)
}

// MarkWritten records that the events with the given ids were written in the
// transaction identified by tx (any comparable value). Persistence layers
// use it to tell a conflict in the same transaction (already written, not yet
// committed) from one in a later transaction (committed).
func (r *Recorder) MarkWritten(tx any, ids ...uuid.UUID) {
	for i := range r.pending {
		for _, id := range ids {
			if r.pending[i].ID == id {
				r.pending[i].WrittenIn = tx
				break
			}
		}
	}
}

// Confirm drops the events with the given ids: their transaction committed,
// so they are in the outbox for good. Unknown ids are ignored.
func (r *Recorder) Confirm(ids ...uuid.UUID) {
	if len(ids) == 0 || len(r.pending) == 0 {
		return
	}
	kept := r.pending[:0]
	for _, p := range r.pending {
		confirmed := false
		for _, id := range ids {
			if p.ID == id {
				confirmed = true
				break
			}
		}
		if !confirmed {
			kept = append(kept, p)
		}
	}
	clear(r.pending[len(kept):])
	r.pending = kept
}

// ClearEvents drops every pending event without writing it. Use it when an
// aggregate is discarded on purpose; dropping events of a committed state
// change loses them.
func (r *Recorder) ClearEvents() {
	clear(r.pending)
	r.pending = nil
}

// OutboxRecorder returns r. Persistence layers find the recorder of any
// aggregate that embeds Recorder through this method.
func (r *Recorder) OutboxRecorder() *Recorder { return r }

// newEventID returns a UUIDv7. uuid.NewV7 fails only if the system random
// source does; fall back to a random UUID, which is still unique.
func newEventID() uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}

// NewEventID returns a new event id (UUIDv7), for events written without a
// Recorder.
func NewEventID() uuid.UUID { return newEventID() }
