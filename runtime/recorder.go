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
// What embedding promotes onto the aggregate is [Recorder.Record],
// [Recorder.Events], [Recorder.ClearEvents] and [Recorder.OutboxRecorder],
// the one accessor persistence layers use; the bookkeeping (event ids,
// confirmation after commit) lives on the [RecorderState] it returns, so no
// method of it can collide with, or be shadowed by, a domain method.
//
// The zero value is ready to use. Recorder has no exported fields, so GORM
// maps no column for it. Like the aggregate that embeds it, a Recorder is not
// safe for concurrent use. Copying an aggregate copies its pending events:
// the copy and the original then record and confirm independently.
//
// Each recorded event gets its event id (UUIDv7) at Record time and keeps it
// until the event is confirmed, so writing the same pending event twice (a
// retried save, two saves in one transaction) writes one outbox row: the
// outbox deduplicates on the event id.
type Recorder struct {
	state RecorderState
}

// Record appends events to the aggregate's pending events. Nil events are
// ignored.
func (r *Recorder) Record(events ...Event) {
	now := time.Now()
	// Never append in place: a copy of the aggregate (a range variable, a
	// snapshot) shares the backing array, and must keep its own events.
	p := r.state.pending[:len(r.state.pending):len(r.state.pending)]
	for _, e := range events {
		if e == nil {
			continue
		}
		p = append(p, Recorded{ID: newEventID(), Event: e, RecordedAt: now})
	}
	r.state.pending = p
}

// Events returns the pending events in the order they were recorded: those
// whose saving transaction has not been seen to commit. The slice is a copy.
func (r *Recorder) Events() []Event {
	out := make([]Event, len(r.state.pending))
	for i, p := range r.state.pending {
		out[i] = p.Event
	}
	return out
}

// ClearEvents drops every pending event without writing it. Use it when an
// aggregate is discarded on purpose; dropping events of a committed state
// change loses them.
func (r *Recorder) ClearEvents() {
	r.state.pending = nil
}

// OutboxRecorder returns the recorder's persistence bookkeeping. Persistence
// layers (package hooks) find the recorder of any aggregate that embeds
// Recorder through this method; application code has no need for it.
func (r *Recorder) OutboxRecorder() *RecorderState { return &r.state }

// RecorderState is the persistence side of a [Recorder]: its pending events
// with their ids, and the confirmation that drops them once their
// transaction committed. Persistence layers reach it through
// [Recorder.OutboxRecorder]. The zero value is an empty state. Like the
// Recorder it belongs to, it is not safe for concurrent use.
type RecorderState struct {
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
}

// Pending returns a copy of the pending events with their ids, in the order
// they were recorded; nil when there are none.
func (s *RecorderState) Pending() []Recorded {
	if len(s.pending) == 0 {
		return nil
	}
	return append([]Recorded(nil), s.pending...)
}

// Len returns the number of pending events.
func (s *RecorderState) Len() int { return len(s.pending) }

// Confirm drops the events with the given ids: their transaction committed,
// so they are in the outbox for good. Unknown ids are ignored. Like Record,
// it never changes the pending events in place, so a copy of the aggregate
// keeps its own.
func (s *RecorderState) Confirm(ids ...uuid.UUID) {
	if len(ids) == 0 || len(s.pending) == 0 {
		return
	}
	var kept []Recorded
	for _, p := range s.pending {
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
	s.pending = kept
}

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
