package relay

import "time"

// ConfigOf returns the configuration r runs with, defaults applied.
func ConfigOf(r *Relay) Config { return r.cfg }

// Backoff exposes the backoff computation.
func Backoff(r *Relay, attempt int) time.Duration { return r.backoff(attempt) }

// PollIntervalOf returns the poll interval r currently uses.
func PollIntervalOf(r *Relay) time.Duration { return time.Duration(r.poll.Load()) }

// Unexported errors the tests look for with errors.Is.
var (
	ErrEarlierFailed   = errEarlierFailed
	ErrPublishDeadline = errPublishDeadline
	ErrLeaseEnded      = errLeaseEnded
	ErrShutdownTimeout = errShutdownTimeout
)

// SetSince replaces the clock with which r tells how late a publish ended
// after its lease (a paused relay).
func SetSince(r *Relay, since func(time.Time) time.Duration) { r.since = since }
