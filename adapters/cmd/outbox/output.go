package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// age prints a duration for people: 0s, 850ms, 42s, 3m12s, 5h4m, 2d3h.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// stamp prints a time in RFC 3339, or "-" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// truncate shortens s to n runes.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// entryJSON is an outbox row in --json output.
type entryJSON struct {
	ID            int64             `json:"id"`
	State         sqlstore.State    `json:"state"`
	EventID       string            `json:"event_id"`
	EventType     string            `json:"event_type"`
	EventVersion  int               `json:"event_version"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	Topic         string            `json:"topic"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"last_error,omitempty"`
	OccurredAt    time.Time         `json:"occurred_at"`
	CreatedAt     time.Time         `json:"created_at"`
	NextAttemptAt *time.Time        `json:"next_attempt_at,omitempty"`
	PublishedAt   *time.Time        `json:"published_at,omitempty"`
	ParkedAt      *time.Time        `json:"parked_at,omitempty"`
	BlockedBy     int64             `json:"blocked_by,omitempty"` // the parked row holding it back
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// toJSON returns e for --json; withPayload adds the payload (as JSON, or
// as a JSON string when it is not valid JSON) and headers.
func toJSON(e sqlstore.Entry, withPayload bool) entryJSON {
	j := entryJSON{
		ID: e.ID, State: e.State, EventID: e.EventID.String(), EventType: e.EventType, EventVersion: e.EventVersion,
		AggregateType: e.AggregateType, AggregateID: e.AggregateID, Topic: e.Topic, Attempts: e.Attempts,
		LastError: e.LastError, OccurredAt: e.OccurredAt, CreatedAt: e.CreatedAt,
		NextAttemptAt: optTime(e.NextAttemptAt), PublishedAt: optTime(e.PublishedAt), ParkedAt: optTime(e.ParkedAt),
		BlockedBy: e.BlockedBy,
	}
	if withPayload {
		j.Headers = e.Headers
		if json.Valid(e.Payload) {
			j.Payload = e.Payload
		} else {
			j.Payload, _ = json.Marshal(string(e.Payload))
		}
	}
	return j
}
