package main

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// parseAge reads a duration with an optional leading day count: 90s, 15m,
// 36h, 7d, 10d12h.
func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	rest := s
	if days, after, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a number of days, with an optional duration after it (7d, 10d12h)", s)
		}
		d, rest = time.Duration(n*float64(24*time.Hour)), after
		if rest == "" {
			return d, nil
		}
	}
	more, err := time.ParseDuration(rest)
	if err != nil || more < 0 {
		return 0, fmt.Errorf("%q is not a duration (90s, 15m, 36h, 7d, 10d12h)", s)
	}
	return d + more, nil
}

// ageFlag is a flag.Value of a duration that also takes days (7d). Make
// one with [flagSet.ageVar].
type ageFlag struct {
	d    *time.Duration
	name string   // the flag's, for its errors
	def  string   // what leaving the flag out means, for its errors
	fs   *flagSet // where Set records its *flagError
	text string   // the value as given, once set
	// example is what the flag takes, for its errors; "" is an age's.
	example string
}

func (a *ageFlag) String() string {
	if a.d == nil || *a.d == 0 {
		return ""
	}
	return a.d.String()
}

// Set parses s. Zero and negative ages are refused (leave the flag out
// for its default), since each age flag's zero means its default or off.
// The error is a *flagError, also recorded in the flag set.
func (a *ageFlag) Set(s string) error {
	d, err := parseAge(s)
	var want string
	switch {
	case err == nil && d > 0:
		*a.d, a.text = d, s
		return nil
	case err == nil, strings.HasPrefix(strings.TrimSpace(s), "-"):
		want = "must be more than zero"
	default:
		want = "not a duration"
	}
	example := cmp.Or(a.example, "an age such as 90s, 15m, 36h, 7d or 10d12h")
	fe := &flagError{Flag: "--" + a.name, Value: s,
		Want: want + ": " + example + " (leave the flag out for " + a.def + ")"}
	if a.fs != nil {
		a.fs.valueErr = fe
	}
	return fe
}

// countFlag is a flag.Value of a whole number from min to max (no upper
// bound when max is 0). Left out, its variable keeps its zero value, which
// means the default. Make one with [flagSet.countVar].
type countFlag struct {
	n        *int
	name     string // the flag's, for its errors
	min, max int
	what     string   // what it counts, for its errors: "messages per claim"
	def      string   // what leaving the flag out means, for its errors
	fs       *flagSet // where Set records its *flagError
}

func (c *countFlag) String() string {
	if c.n == nil || *c.n == 0 {
		return ""
	}
	return strconv.Itoa(*c.n)
}

// Set parses s. The error is a *flagError, also recorded in the flag set.
func (c *countFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err == nil && n >= c.min && (c.max == 0 || n <= c.max) {
		*c.n = n
		return nil
	}
	want := fmt.Sprintf("a number of %s, %d or more", c.what, c.min)
	if c.max > 0 {
		want = fmt.Sprintf("a number of %s from %d to %d", c.what, c.min, c.max)
	}
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		want = "not a number: " + want
	}
	fe := &flagError{Flag: "--" + c.name, Value: s, Want: want + " (leave the flag out for " + c.def + ")"}
	if c.fs != nil {
		c.fs.valueErr = fe
	}
	return fe
}

// parseInstant reads an RFC 3339 time, or a duration (with days) meaning
// that long ago.
func parseInstant(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := parseAge(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-11-30T10:00:00Z) nor a duration ago (90m, 2d)", s)
}

// parseIDs reads row ids, in the order given; an id given again is
// dropped, so that each row is acted on and counted once.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	seen := make(map[int64]bool, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usagef("%q is not a row id", a)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// checkPage returns the *flagError of a --limit or --after that q's
// paging does not take, or nil.
func checkPage(q sqlstore.Query) error {
	if q.Limit < 1 || q.Limit > sqlstore.MaxQueryLimit {
		return &flagError{Flag: "--limit", Value: strconv.Itoa(q.Limit),
			Want: fmt.Sprintf("a number of rows from 1 to %d (leave the flag out for %d)", sqlstore.MaxQueryLimit, sqlstore.DefaultQueryLimit)}
	}
	if q.AfterID < 0 {
		return &flagError{Flag: "--after", Value: strconv.FormatInt(q.AfterID, 10),
			Want: "0 (the first page) or a row id: the last id of the previous page"}
	}
	return nil
}

// ---- status ----

type statusJSON struct {
	Pending              int64            `json:"pending"`
	Retrying             int64            `json:"retrying"`
	Parked               int64            `json:"parked"`
	OldestPendingSeconds float64          `json:"oldest_pending_seconds"`
	Groups               []groupJSON      `json:"groups"`
	Alerts               []string         `json:"alerts,omitempty"`
	Table                string           `json:"table"`
	Dialect              sqlstore.Dialect `json:"dialect"`
}

type groupJSON struct {
	Topic                string  `json:"topic"`
	EventType            string  `json:"event_type"`
	Pending              int64   `json:"pending"`
	Retrying             int64   `json:"retrying"`
	Parked               int64   `json:"parked"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

func statusCommand() *command {
	c := &command{
		name: "status", summary: "backlog: pending, retrying, parked and oldest age, per topic and event type",
		help: `Prints the outbox's backlog: the pending messages (retrying ones included),
those that failed and wait for a retry, the parked ones, and the age of the
oldest pending message, in total and per topic and event type. It reads only
unpublished rows.

With a --fail-if flag, it exits with status 3 when the condition holds (for
cron jobs and probes), after printing the status as usual.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		failParked := fs.Bool("fail-if-parked", false, "exit 3 if any message is parked")
		failPending := fs.Int64("fail-if-pending", -1, "exit 3 if more than `N` messages are pending")
		var failOlder time.Duration
		fs.ageVar(&failOlder, "fail-if-older", "no age check", "exit 3 if the oldest pending message is older than `age` (90s, 15m, 2d)")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("status takes no arguments (got %q)", pos)
		}
		if *failPending < -1 {
			return &flagError{Flag: "--fail-if-pending", Value: strconv.FormatInt(*failPending, 10), Want: "a count, 0 or more"}
		}
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		groups, err := db.store.StatsByType(e.ctx)
		if err != nil {
			return err
		}
		// The total is the rows' own, not a second query's: under
		// writes, that one saw other rows (a TOTAL of 4 under no row).
		var total relay.Stats
		for _, g := range groups {
			total.Pending += g.Pending
			total.Retrying += g.Retrying
			total.Parked += g.Parked
			total.OldestPending = max(total.OldestPending, g.OldestPending)
		}
		var alerts []string
		if *failParked && total.Parked > 0 {
			alerts = append(alerts, fmt.Sprintf("%d parked", total.Parked))
		}
		if *failPending >= 0 && total.Pending > *failPending {
			alerts = append(alerts, fmt.Sprintf("%d pending, more than %d", total.Pending, *failPending))
		}
		if failOlder > 0 && total.OldestPending > failOlder {
			alerts = append(alerts, fmt.Sprintf("oldest pending %s, older than %s", age(total.OldestPending), age(failOlder)))
		}
		if fs.json {
			out := statusJSON{
				Pending: total.Pending, Retrying: total.Retrying, Parked: total.Parked,
				OldestPendingSeconds: total.OldestPending.Seconds(), Groups: []groupJSON{}, Alerts: alerts,
				Table: db.table, Dialect: db.dialect,
			}
			for _, g := range groups {
				out.Groups = append(out.Groups, groupJSON{g.Topic, g.EventType, g.Pending, g.Retrying, g.Parked, g.OldestPending.Seconds()})
			}
			if err := writeJSON(e.stdout, out); err != nil {
				return err
			}
		} else {
			t := newTable(e.stdout, "TOPIC", "EVENT TYPE", "PENDING", "RETRYING", "PARKED", "OLDEST PENDING")
			for _, g := range groups {
				t.row(g.Topic, g.EventType, itoa(g.Pending), itoa(g.Retrying), itoa(g.Parked), age(g.OldestPending))
			}
			t.row("TOTAL", "", itoa(total.Pending), itoa(total.Retrying), itoa(total.Parked), age(total.OldestPending))
			if err := t.flush(); err != nil {
				return err
			}
		}
		if len(alerts) > 0 {
			return alertError{"status: " + strings.Join(alerts, "; ")}
		}
		return nil
	}
	return c
}

// ---- parked ----

func parkedCommand() *command {
	c := &command{
		name: "parked", args: "list | show <id> | retry <id>... | discard <id>...",
		summary: "list, show, retry or discard parked messages",
		help: `Parked messages failed permanently (too large for the broker, say) or too
many times; each holds its aggregate's later messages back until an operator
retries it (it is published again, before them) or discards it (it is
deleted and never published; the later messages go out).

  parked list [--topic T] [--event-type E] [--aggregate-id A] [--after ID] [--limit N]
  parked show <id>          one row with its last error, headers and payload (any row, parked or not)
  parked retry <id>...      unpark: publish again, attempts reset
  parked retry --all        unpark every parked message (of --topic / --event-type, if given)
  parked discard <id>...    delete parked messages for good

retry and discard act on parked rows only; they exit 1 when some id was not
a parked row (the others are still done).`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		var q sqlstore.Query
		q.State = sqlstore.StateParked
		fs.StringVar(&q.Topic, "topic", "", "only this `topic`")
		fs.StringVar(&q.EventType, "event-type", "", "only this event `type`")
		fs.StringVar(&q.AggregateType, "aggregate-type", "", "only this aggregate `type`")
		fs.StringVar(&q.AggregateID, "aggregate-id", "", "only this aggregate `id`")
		fs.Int64Var(&q.AfterID, "after", 0, "list: rows after this `id` (the last id of the previous page)")
		fs.IntVar(&q.Limit, "limit", sqlstore.DefaultQueryLimit, "list: at most `N` rows (at most 1000)")
		all := fs.Bool("all", false, "retry: every parked message matching the filters")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if err := checkPage(q); err != nil {
			return err
		}
		if len(pos) == 0 {
			return usagef("parked needs a subcommand: list, show, retry or discard")
		}
		sub, rest := pos[0], pos[1:]
		switch sub {
		case "list", "show", "retry", "discard":
		default:
			return usagef("unknown parked subcommand %q (list, show, retry, discard)", sub)
		}
		var ids []int64
		switch {
		case sub == "list" && len(rest) > 0:
			return usagef("parked list takes no arguments")
		case sub == "show" && len(rest) != 1:
			return usagef("parked show takes one id")
		case sub == "retry" && *all && len(rest) > 0:
			return usagef("parked retry takes ids or --all, not both")
		case (sub == "retry" && !*all || sub == "discard") && len(rest) == 0:
			return usagef("parked %s needs row ids", sub)
		}
		if sub != "list" {
			if ids, err = parseIDs(rest); err != nil {
				return err
			}
		}
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		switch sub {
		case "list":
			return listEntries(e, fs, db, q)
		case "show":
			return parkedShow(e, fs, db, ids[0])
		}
		if *all {
			if ids, err = allParked(e, db, q); err != nil {
				return err
			}
		}
		var n int64
		verb := "retried"
		if sub == "retry" {
			n, err = db.store.Unpark(e.ctx, ids...)
		} else {
			verb = "discarded"
			n, err = db.store.Discard(e.ctx, ids...)
		}
		if err != nil {
			return err
		}
		if fs.json {
			if err := writeJSON(e.stdout, map[string]int64{verb: n, "requested": int64(len(ids))}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(e.stdout, "%s %d of %d\n", verb, n, len(ids))
		}
		if n < int64(len(ids)) && !*all {
			return fmt.Errorf("parked %s: %d of the ids were not parked rows", sub, int64(len(ids))-n)
		}
		return nil
	}
	return c
}

// listTable prints rows of any state.
func listTable(e *env, entries []sqlstore.Entry) error {
	t := newTable(e.stdout, "ID", "STATE", "TOPIC", "EVENT TYPE", "AGGREGATE", "EVENT ID", "CREATED", "ATTEMPTS", "LAST ERROR")
	for _, en := range entries {
		lastErr := en.LastError
		if en.State == sqlstore.StatePublished {
			lastErr = "" // an earlier attempt's, not the row's state ("show" has it)
		}
		if en.BlockedBy != 0 {
			// Why a row with no attempt and no error does not move (in
			// the column's 40 characters; "show" says what to do).
			lastErr = fmt.Sprintf("waits for parked row %d", en.BlockedBy)
		}
		t.row(itoa(en.ID), string(en.State), en.Topic, en.EventType, en.AggregateType+"/"+en.AggregateID, en.EventID.String(),
			age(time.Since(en.CreatedAt))+" ago", strconv.Itoa(en.Attempts), truncate(lastErr, 40))
	}
	return t.flush()
}

func listCommand() *command {
	c := &command{
		name: "list", args: "[--state S] [--event-id ID] [--aggregate-id A] [--topic T] ...",
		summary: "find messages by state, event id, aggregate, topic or event type",
		help: `Lists outbox rows in id order, filtered: --state pending (retrying included),
retrying, parked or published; --event-id (uses the unique index: the fast
way to find one event); --aggregate-type and --aggregate-id; --topic;
--event-type. Page with --after <last id> and --limit (at most 1000).
"outbox parked show <id>" prints one row in full.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		var q sqlstore.Query
		state := fs.String("state", "", "pending, retrying, parked or published (default: every state)")
		eventID := fs.String("event-id", "", "only this event `id`")
		fs.StringVar(&q.Topic, "topic", "", "only this `topic`")
		fs.StringVar(&q.EventType, "event-type", "", "only this event `type`")
		fs.StringVar(&q.AggregateType, "aggregate-type", "", "only this aggregate `type`")
		fs.StringVar(&q.AggregateID, "aggregate-id", "", "only this aggregate `id`")
		fs.Int64Var(&q.AfterID, "after", 0, "rows after this `id` (the last id of the previous page)")
		fs.IntVar(&q.Limit, "limit", sqlstore.DefaultQueryLimit, "at most `N` rows (at most 1000)")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("list takes flags, no arguments (got %q)", pos)
		}
		if err := checkPage(q); err != nil {
			return err
		}
		if q.State, err = sqlstore.ParseState(*state); err != nil {
			return &flagError{Flag: "--state", Value: *state, Want: "pending, retrying, parked or published"}
		}
		if *eventID != "" {
			if q.EventID, err = uuid.Parse(*eventID); err != nil {
				return usagef("--event-id %q is not a UUID", *eventID)
			}
		}
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		return listEntries(e, fs, db, q)
	}
	return c
}

func listEntries(e *env, fs *flagSet, db *database, q sqlstore.Query) error {
	entries, err := db.store.Entries(e.ctx, q)
	if err != nil {
		return err
	}
	if fs.json {
		out := make([]entryJSON, len(entries))
		for i, en := range entries {
			out[i] = toJSON(en, false)
		}
		return writeJSON(e.stdout, out)
	}
	if q.State == sqlstore.StateParked {
		t := newTable(e.stdout, "ID", "TOPIC", "EVENT TYPE", "AGGREGATE", "ATTEMPTS", "PARKED", "LAST ERROR")
		for _, en := range entries {
			t.row(itoa(en.ID), en.Topic, en.EventType, en.AggregateType+"/"+en.AggregateID, strconv.Itoa(en.Attempts),
				age(time.Since(en.ParkedAt))+" ago", truncate(en.LastError, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
	} else if err := listTable(e, entries); err != nil {
		return err
	}
	limit := q.Limit
	if limit == 0 {
		limit = sqlstore.DefaultQueryLimit
	}
	if len(entries) > 0 && len(entries) == min(limit, sqlstore.MaxQueryLimit) {
		fmt.Fprintf(e.stderr, "more may follow: --after %d\n", entries[len(entries)-1].ID)
	}
	return nil
}

func parkedShow(e *env, fs *flagSet, db *database, id int64) error {
	en, err := db.store.Entry(e.ctx, id)
	if errors.Is(err, sqlstore.ErrNotFound) {
		return fmt.Errorf("no outbox row %d in %s", id, db.table)
	}
	if err != nil {
		return err
	}
	if fs.json {
		return writeJSON(e.stdout, toJSON(en, true))
	}
	t := newTable(e.stdout, "FIELD", "VALUE")
	errLabel := "last error"
	if en.State == sqlstore.StatePublished {
		errLabel = "last error before it was published"
	}
	for _, kv := range [][2]string{
		{"id", itoa(en.ID)}, {"state", string(en.State)}, {"event id", en.EventID.String()},
		{"event type", fmt.Sprintf("%s v%d", en.EventType, en.EventVersion)},
		{"aggregate", en.AggregateType + "/" + en.AggregateID}, {"topic", en.Topic},
		{"attempts", strconv.Itoa(en.Attempts)}, {errLabel, en.LastError},
		{"occurred at", stamp(en.OccurredAt)}, {"created at", stamp(en.CreatedAt)},
		{"next attempt at", stamp(en.NextAttemptAt)}, {"published at", stamp(en.PublishedAt)}, {"parked at", stamp(en.ParkedAt)},
	} {
		t.row(kv[0], kv[1])
	}
	if en.BlockedBy != 0 {
		t.row("waits for", fmt.Sprintf("parked row %d of the same aggregate: outbox parked retry %d (or discard it)", en.BlockedBy, en.BlockedBy))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(en.Headers) > 0 {
		fmt.Fprintln(e.stdout, "headers:")
		for k, v := range en.Headers {
			fmt.Fprintf(e.stdout, "  %s: %s\n", k, v)
		}
	}
	fmt.Fprintf(e.stdout, "payload:\n%s\n", en.Payload)
	return nil
}

// allParked returns the ids of every parked row q matches.
func allParked(e *env, db *database, q sqlstore.Query) ([]int64, error) {
	var ids []int64
	q.AfterID, q.Limit = 0, sqlstore.MaxQueryLimit
	for {
		page, err := db.store.Entries(e.ctx, q)
		if err != nil {
			return nil, err
		}
		for _, en := range page {
			ids = append(ids, en.ID)
		}
		if len(page) < q.Limit {
			return ids, nil
		}
		q.AfterID = page[len(page)-1].ID
	}
}

// ---- purge ----

func purgeCommand() *command {
	c := &command{
		name: "purge", args: "--published-before <time|age>",
		summary: "delete published messages older than a time or age",
		help: `Deletes published messages published before a time (RFC 3339) or an age
(90m, 36h, 7d), in batches of --batch rows, each its own short transaction.
Pending and parked messages are never deleted. To do this on a schedule, run
"outbox janitor" or "outbox relay --retention".

The age is measured on the database's clock (the process's on SQLite); a
time is turned into an age on this machine's clock.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		before := fs.String("published-before", "", "RFC 3339 `time` or age (7d, 36h): delete rows published before it (required)")
		batch := fs.Int("batch", sqlstore.DefaultRetentionBatchSize, "rows per delete `statement`")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 || *before == "" {
			return usagef("purge takes --published-before and no arguments")
		}
		if *batch <= 0 {
			return usagef("--batch must be positive")
		}
		cutoff, err := parseInstant(*before, time.Now())
		if err != nil {
			return usagef("--published-before: %v", err)
		}
		olderThan := time.Since(cutoff)
		if olderThan < 0 {
			return usagef("--published-before %s is in the future", *before)
		}
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		n, err := db.store.DeletePublished(e.ctx, olderThan, *batch)
		if err != nil {
			return err
		}
		if fs.json {
			return writeJSON(e.stdout, map[string]any{"deleted": n, "published_before": cutoff.UTC()})
		}
		fmt.Fprintf(e.stdout, "deleted %d published rows (published before %s)\n", n, cutoff.UTC().Format(time.RFC3339))
		return nil
	}
	return c
}

// ---- replay ----

func replayCommand() *command {
	c := &command{
		name: "replay", args: "--from <id|time|age> [--to <id|time|age>] [--topic T]",
		summary: "publish a range of published messages again (after a broker lost them)",
		help: `Puts published messages back in the queue, so that the relays publish them
again in their usual order (each aggregate's messages in id order, before its
newer pending ones). Consumers with an inbox apply each event once.

--from and --to take a row id (inclusive), an RFC 3339 time or an age (2h:
two hours ago), compared with the rows' created_at (--from inclusive, --to
exclusive). At least one is required. Pending and parked messages are left
alone. The range turns pending in one statement: split ranges of millions.

Brokers that deduplicate by event id drop a message they still hold within
their window, and the relay counts it published: NATS JetStream
(dedup_window, 10m by default), Redis (DedupWindow, 10m) and SQS FIFO (5m):
replay after the window, or into a stream or queue created since.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		from := fs.String("from", "", "first row `id`, or time or age (created_at)")
		to := fs.String("to", "", "last row `id` (inclusive), or time or age (exclusive)")
		var r sqlstore.ReplayRange
		fs.StringVar(&r.Topic, "topic", "", "only this `topic`")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("replay takes flags, no arguments (got %q)", pos)
		}
		now := time.Now()
		for _, b := range []struct {
			val  string
			name string
			id   *int64
			t    *time.Time
		}{{*from, "--from", &r.FromID, &r.Since}, {*to, "--to", &r.ToID, &r.Until}} {
			if b.val == "" {
				continue
			}
			if id, err := strconv.ParseInt(b.val, 10, 64); err == nil {
				if id <= 0 {
					return usagef("%s %d: row ids start at 1", b.name, id)
				}
				*b.id = id
				continue
			}
			if *b.t, err = parseInstant(b.val, now); err != nil {
				return usagef("%s: %v", b.name, err)
			}
		}
		if *from == "" && *to == "" {
			return usagef("replay needs --from or --to (a row id, a time or an age)")
		}
		if r.FromID > 0 && r.ToID > 0 && r.FromID > r.ToID ||
			!r.Since.IsZero() && !r.Until.IsZero() && !r.Since.Before(r.Until) {
			return usagef("replay --from %s is not before --to %s", *from, *to)
		}
		if err := r.Validate(); err != nil {
			return usageError{err.Error()}
		}
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		n, err := db.store.Replay(e.ctx, r)
		if err != nil {
			return err
		}
		if fs.json {
			return writeJSON(e.stdout, map[string]int64{"replayed": n})
		}
		fmt.Fprintf(e.stdout, "replayed %d published rows: the relays publish them again\n", n)
		return nil
	}
	return c
}

// ---- migrate ----

func migrateCommand() *command {
	c := &command{
		name: "migrate", summary: "create the outbox table (and the inbox and dead-letter tables) if they do not exist",
		help: `Creates the outbox table, its indexes and lease tables (and on PostgreSQL
its wake-up register) if they do not exist; with --inbox, the consumers' inbox
table too, and with --dead-letters their dead-letter table (see outbox help
deadletters). Safe to run on every deploy.

With --partition-interval (PostgreSQL), a new outbox table is partitioned by
event time, one partition per interval, so that retention drops whole
partitions (see "Partitioned outbox" in the runtime/sqlstore documentation);
an existing table that is not partitioned is left alone and the command
fails.

For a team that keeps its schema in its own migration tool, --print writes
the statements instead of running them (--format sql, or goose for one goose
file with its Up and Down parts), and --out DIR writes a migration into DIR
(--format goose: VERSION_gooutbox.sql; golang-migrate:
VERSION_gooutbox.up.sql and .down.sql; VERSION is --version, by default the
time now, UTC, as 20060102150405). They need only the dialect: --db, or
--dialect postgres|mysql|sqlite; nothing is opened.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		inbox := fs.Bool("inbox", false, "also create the inbox table")
		inboxTable := fs.String("inbox-table", "", "inbox `table` (default: outbox_inbox)")
		deadLetters := fs.Bool("dead-letters", false, "also create the consumers' dead-letter table")
		deadLetterTable := fs.String("dead-letter-table", "", "dead-letter `table` (default: "+sqlstore.DeadLetterDefaultTable+")")
		var interval time.Duration
		intervalFlag := fs.ageVar(&interval, "partition-interval", "a table that is not partitioned",
			"PostgreSQL: create the outbox table partitioned by event time, one partition per `interval` (e.g. 24h, 1d)")
		print := fs.Bool("print", false, "print the statements instead of running them")
		out := fs.String("out", "", "write a migration into `dir` instead of running it")
		format := fs.String("format", "", "with --print: sql (default) or goose; with --out: goose (default) or golang-migrate")
		dialect := fs.String("dialect", "", "with --print or --out and no --db: the `dialect`, postgres, mysql or sqlite")
		version := fs.String("version", "", "with --out: the migration's `version` (default: the time now, UTC, 20060102150405)")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("migrate takes no arguments")
		}
		if *print || *out != "" {
			return writeMigration(e, fs, migration{
				print: *print, out: *out, format: *format, dialect: *dialect, version: *version,
				inbox: *inbox || *inboxTable != "", inboxTable: *inboxTable, partitioned: interval > 0,
				deadLetters: *deadLetters || *deadLetterTable != "", deadLetterTable: *deadLetterTable,
			})
		}
		// Before the database is opened, which creates a SQLite file.
		if _, _, d, err := parseDatabaseURL(fs.db); err == nil && interval > 0 && d != sqlstore.Postgres {
			return &flagError{Flag: "--partition-interval", Value: intervalFlag.text,
				Want: fmt.Sprintf("partitioning is PostgreSQL only, and --db is %s (leave the flag out for a table that is not partitioned)", d)}
		}
		fs.createDB = true
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		switch {
		case interval > 0:
			err = sqlstore.Migrate(e.ctx, databasesql.New(db.db), sqlstore.Schema{Outbox: true, OutboxTable: fs.table, Partitioned: &sqlstore.PartitionConfig{Interval: interval}})
		default:
			err = sqlstore.Migrate(e.ctx, databasesql.New(db.db), sqlstore.Schema{Dialect: db.dialect, Outbox: true, OutboxTable: fs.table})
		}
		if err != nil {
			return err
		}
		created := []string{db.table}
		if *inbox || *inboxTable != "" {
			if err := sqlstore.Migrate(e.ctx, databasesql.New(db.db), sqlstore.Schema{Dialect: db.dialect, Inbox: true, InboxTable: *inboxTable}); err != nil {
				return err
			}
			created = append(created, cmp.Or(*inboxTable, sqlstore.InboxDefaultTable))
		}
		if *deadLetters || *deadLetterTable != "" {
			if err := sqlstore.Migrate(e.ctx, databasesql.New(db.db), sqlstore.Schema{Dialect: db.dialect, DeadLetters: true, DeadLetterTable: *deadLetterTable}); err != nil {
				return err
			}
			created = append(created, cmp.Or(*deadLetterTable, sqlstore.DeadLetterDefaultTable))
		}
		if fs.json {
			return writeJSON(e.stdout, map[string]any{"tables": created})
		}
		fmt.Fprintf(e.stdout, "migrated %s\n", strings.Join(created, ", "))
		return nil
	}
	return c
}
