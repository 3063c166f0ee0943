package main

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// ---- deadletters ----

func deadLettersCommand() *command {
	c := &command{
		name: "deadletters", args: "list | show <id> | redrive <id>... | discard <id>... | counts",
		summary: "list, show, re-drive or discard the messages consumers gave up on",
		help: `A consumer whose dead-letter publisher is a consumer.DeadLetterTable keeps
the messages it gives up on (a handler that kept failing, an event it cannot
decode) in a table of its own database (--db, the consumer's; create the
table with outbox migrate --dead-letters). Once the cause is fixed, an
operator re-drives them: each is published again, as it arrived, to the
topic it was consumed from (or --to), through --broker, and the consumer
applies it; its inbox makes a second re-drive a no-op.

  deadletters list [--consumer C] [--topic T] [--redriven] [--after ID] [--limit N]
  deadletters show <id>                   one row with its error, metadata and payload
  deadletters redrive <id>... --broker URL [--to TOPIC]
  deadletters redrive --all --broker URL  every waiting row (of --consumer / --topic, if given)
  deadletters discard <id>...             delete rows for good
  deadletters counts                      rows per consumer: waiting, re-driven, oldest

redrive and discard exit 1 when some id was not a row (the others are still
done). Dead letters published to a broker topic instead are read with that
broker's tools.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		var q sqlstore.DeadLetterQuery
		fs.StringVar(&q.Consumer, "consumer", "", "only this consumer's (its Config.Name)")
		fs.StringVar(&q.Topic, "topic", "", "only messages consumed from this `topic`")
		fs.BoolVar(&q.Redriven, "redriven", false, "list: also the rows re-driven already")
		fs.Int64Var(&q.AfterID, "after", 0, "list: rows after this `id` (the last id of the previous page)")
		fs.IntVar(&q.Limit, "limit", sqlstore.DefaultQueryLimit, "list: at most `N` rows (at most 1000)")
		table := fs.String("dead-letter-table", "", "dead-letter `table` (default: "+sqlstore.DeadLetterDefaultTable+")")
		brokerURL := fs.String("broker", e.getenv("OUTBOX_BROKER_URL"), "redrive: broker `URL` (default: $OUTBOX_BROKER_URL)")
		to := fs.String("to", "", "redrive: publish to this `topic` instead of the one each message was consumed from")
		all := fs.Bool("all", false, "redrive: every waiting row matching the filters")
		allowLocal := fs.Bool("allow-local-broker", false, "redrive: allow memory://, for a demo")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			return usagef("deadletters needs a subcommand: list, show, redrive, discard or counts")
		}
		sub, rest := pos[0], pos[1:]
		switch sub {
		case "list", "show", "redrive", "discard", "counts":
		default:
			return usagef("unknown deadletters subcommand %q (list, show, redrive, discard, counts)", sub)
		}
		switch {
		case (sub == "list" || sub == "counts") && len(rest) > 0:
			return usagef("deadletters %s takes no arguments", sub)
		case sub == "show" && len(rest) != 1:
			return usagef("deadletters show takes one id")
		case sub == "redrive" && *all && len(rest) > 0:
			return usagef("deadletters redrive takes ids or --all, not both")
		case (sub == "redrive" && !*all || sub == "discard") && len(rest) == 0:
			return usagef("deadletters %s needs row ids", sub)
		case sub != "redrive" && (*to != "" || *all):
			return usagef("--to and --all are redrive's")
		}
		if q.Limit < 1 || q.Limit > sqlstore.MaxQueryLimit {
			return &flagError{Flag: "--limit", Value: strconv.Itoa(q.Limit), Want: fmt.Sprintf("1 to %d rows", sqlstore.MaxQueryLimit)}
		}
		var ids []int64
		if len(rest) > 0 {
			if ids, err = parseIDs(rest); err != nil {
				return err
			}
		}
		if sub == "redrive" {
			switch {
			case *brokerURL == "":
				return usagef("deadletters redrive needs --broker URL (or $OUTBOX_BROKER_URL): the broker the consumer reads")
			case localBroker(*brokerURL) && !*allowLocal:
				return &flagError{Flag: "--broker", Value: *brokerURL, Want: "a shared broker, not one only this process can read (the consumer would never see the message); --allow-local-broker allows it for a demo"}
			}
			if err := checkBrokerURL(*brokerURL); err != nil {
				return err
			}
		}
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		dlq, err := consumer.NewDeadLetterTable(databasesql.New(db.db), *table)
		if err != nil {
			return usageError{err.Error()}
		}
		switch sub {
		case "list":
			return listDeadLetters(e, fs, dlq, q)
		case "show":
			return showDeadLetter(e, fs, dlq, ids[0])
		case "counts":
			return deadLetterCounts(e, fs, dlq)
		case "discard":
			n, err := dlq.Discard(e.ctx, ids...)
			if err != nil {
				return err
			}
			return reportDone(e, fs, "discarded", n, len(ids), "deadletters discard")
		}
		if *all {
			if ids, err = allDeadLetters(e, dlq, q); err != nil {
				return err
			}
		}
		log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		pub, closeBroker, err := e.openPublisher(e.ctx, *brokerURL, log)
		if err != nil {
			return brokerFlagError(*brokerURL, err)
		}
		defer closeBroker()
		var done int64
		var errs []error
		for _, id := range ids {
			dl, err := dlq.Redrive(e.ctx, pub, id, *to)
			if err != nil {
				if errors.Is(err, sqlstore.ErrNotFound) {
					err = fmt.Errorf("no dead letter %d", id)
				}
				errs = append(errs, err)
				continue
			}
			done++
			if !fs.json {
				fmt.Fprintf(e.stdout, "re-drove %d (message %s of %s) to %s\n", id, dl.MessageUUID, dl.Consumer, dl.Topic)
			}
		}
		if fs.json {
			if err := writeJSON(e.stdout, map[string]int64{"redriven": done, "requested": int64(len(ids))}); err != nil {
				return err
			}
		} else if *all || len(ids) > 1 {
			fmt.Fprintf(e.stdout, "re-drove %d of %d\n", done, len(ids))
		}
		return errors.Join(errs...)
	}
	return c
}

// reportDone prints how many of the requested rows an action changed, and
// fails when some were not rows.
func reportDone(e *env, fs *flagSet, verb string, n int64, requested int, what string) error {
	if fs.json {
		if err := writeJSON(e.stdout, map[string]int64{verb: n, "requested": int64(requested)}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "%s %d of %d\n", verb, n, requested)
	}
	if n < int64(requested) {
		return fmt.Errorf("%s: %d of the ids were not rows", what, int64(requested)-n)
	}
	return nil
}

// allDeadLetters returns the ids of every waiting row q's filters select.
func allDeadLetters(e *env, dlq *consumer.DeadLetterTable, q sqlstore.DeadLetterQuery) ([]int64, error) {
	q.Redriven, q.AfterID, q.Limit = false, 0, sqlstore.MaxQueryLimit
	var ids []int64
	for {
		page, err := dlq.List(e.ctx, q)
		if err != nil {
			return nil, err
		}
		for _, dl := range page {
			ids = append(ids, dl.ID)
		}
		if len(page) < q.Limit {
			return ids, nil
		}
		q.AfterID = page[len(page)-1].ID
	}
}

// deadLetterJSON is a row in --json output.
type deadLetterJSON struct {
	ID             int64             `json:"id"`
	Consumer       string            `json:"consumer"`
	MessageUUID    string            `json:"message_uuid"`
	Topic          string            `json:"topic"`
	Reason         string            `json:"reason"`
	Error          string            `json:"error"`
	Attempts       int               `json:"attempts"`
	DeadLetteredAt time.Time         `json:"dead_lettered_at"`
	RedrivenAt     *time.Time        `json:"redriven_at,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Payload        string            `json:"payload,omitempty"`
}

func deadLetterToJSON(dl sqlstore.DeadLetter, full bool) deadLetterJSON {
	j := deadLetterJSON{ID: dl.ID, Consumer: dl.Consumer, MessageUUID: dl.MessageUUID, Topic: dl.Topic, Reason: dl.Reason,
		Error: dl.Error, Attempts: dl.Attempts, DeadLetteredAt: dl.DeadLetteredAt}
	if !dl.RedrivenAt.IsZero() {
		r := dl.RedrivenAt
		j.RedrivenAt = &r
	}
	if full {
		j.Metadata, j.Payload = dl.Metadata, string(dl.Payload)
	}
	return j
}

func listDeadLetters(e *env, fs *flagSet, dlq *consumer.DeadLetterTable, q sqlstore.DeadLetterQuery) error {
	rows, err := dlq.List(e.ctx, q)
	if err != nil {
		return err
	}
	if fs.json {
		out := make([]deadLetterJSON, len(rows))
		for i, dl := range rows {
			out[i] = deadLetterToJSON(dl, false)
		}
		return writeJSON(e.stdout, out)
	}
	t := newTable(e.stdout, "ID", "CONSUMER", "TOPIC", "EVENT TYPE", "REASON", "ATTEMPTS", "DEAD-LETTERED", "REDRIVEN", "ERROR")
	for _, dl := range rows {
		redriven := ""
		if !dl.RedrivenAt.IsZero() {
			redriven = age(time.Since(dl.RedrivenAt)) + " ago"
		}
		t.row(itoa(dl.ID), dl.Consumer, dl.Topic, dl.Metadata[runtime.MetadataEventType], dl.Reason, strconv.Itoa(dl.Attempts),
			age(time.Since(dl.DeadLetteredAt))+" ago", redriven, truncate(dl.Error, 60))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(rows) > 0 && len(rows) == q.Limit {
		fmt.Fprintf(e.stderr, "more may follow: --after %d\n", rows[len(rows)-1].ID)
	}
	return nil
}

func showDeadLetter(e *env, fs *flagSet, dlq *consumer.DeadLetterTable, id int64) error {
	dl, err := dlq.Get(e.ctx, id)
	if errors.Is(err, sqlstore.ErrNotFound) {
		return fmt.Errorf("no dead letter %d", id)
	}
	if err != nil {
		return err
	}
	if fs.json {
		return writeJSON(e.stdout, deadLetterToJSON(dl, true))
	}
	t := newTable(e.stdout, "FIELD", "VALUE")
	for _, kv := range [][2]string{
		{"id", itoa(dl.ID)}, {"consumer", dl.Consumer}, {"message uuid", dl.MessageUUID}, {"topic", dl.Topic},
		{"reason", dl.Reason}, {"attempts", strconv.Itoa(dl.Attempts)}, {"error", dl.Error},
		{"dead-lettered at", stamp(dl.DeadLetteredAt)}, {"re-driven at", stamp(dl.RedrivenAt)},
	} {
		t.row(kv[0], kv[1])
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(dl.Metadata) > 0 {
		fmt.Fprintln(e.stdout, "metadata:")
		keys := make([]string, 0, len(dl.Metadata))
		for k := range dl.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(e.stdout, "  %s: %s\n", k, dl.Metadata[k])
		}
	}
	fmt.Fprintf(e.stdout, "payload:\n%s\n", dl.Payload)
	return nil
}

func deadLetterCounts(e *env, fs *flagSet, dlq *consumer.DeadLetterTable) error {
	counts, err := dlq.Counts(e.ctx)
	if err != nil {
		return err
	}
	if fs.json {
		type countJSON struct {
			Consumer string     `json:"consumer"`
			Waiting  int64      `json:"waiting"`
			Redriven int64      `json:"redriven"`
			Oldest   *time.Time `json:"oldest_waiting,omitempty"`
		}
		out := make([]countJSON, len(counts))
		for i, c := range counts {
			out[i] = countJSON{Consumer: c.Consumer, Waiting: c.Waiting, Redriven: c.Redriven}
			if !c.Oldest.IsZero() {
				o := c.Oldest
				out[i].Oldest = &o
			}
		}
		return writeJSON(e.stdout, out)
	}
	t := newTable(e.stdout, "CONSUMER", "WAITING", "REDRIVEN", "OLDEST WAITING")
	for _, c := range counts {
		oldest := ""
		if !c.Oldest.IsZero() {
			oldest = age(time.Since(c.Oldest)) + " ago"
		}
		t.row(c.Consumer, itoa(c.Waiting), itoa(c.Redriven), oldest)
	}
	return t.flush()
}
