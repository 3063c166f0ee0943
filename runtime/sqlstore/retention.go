package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Default values of the [RetentionConfig] fields.
const (
	// DefaultRetentionAge is the default PublishedAge and InboxAge.
	DefaultRetentionAge = 7 * 24 * time.Hour
	// DefaultRetentionInterval is the default Interval between passes.
	DefaultRetentionInterval = time.Minute
	// DefaultRetentionBatchSize is the default BatchSize.
	DefaultRetentionBatchSize = 1000
)

// RetentionConfig configures a [Retention]. The zero value, with a store,
// deletes published outbox rows older than 7 days every minute.
type RetentionConfig struct {
	// PublishedAge is how long published outbox rows are kept. Keep it
	// longer than any in-memory aggregate lives after its save (the outbox
	// row deduplicates a second save of the same pending event) and than
	// the window you may want to replay ([Store.Replay]).
	// Default: 7 days ([DefaultRetentionAge]).
	PublishedAge time.Duration

	// Inbox and InboxDB are the consumers' inbox to prune, and the
	// database it lives on (often not the outbox's). Default: nil, the
	// inbox is not pruned.
	Inbox   *Inbox
	InboxDB *sql.DB

	// InboxAge is how long inbox markers are kept: a redelivery of an
	// event whose marker is gone is applied again, so keep it longer than
	// the topic's retention and any replay. Default: 7 days
	// ([DefaultRetentionAge]).
	InboxAge time.Duration

	// InboxConsumers are the consumers whose markers are pruned.
	// Default: nil, every consumer that has markers ([Inbox.Consumers]).
	InboxConsumers []string

	// Interval is the time between the end of one pass and the start of
	// the next. Default: 1 minute ([DefaultRetentionInterval]).
	Interval time.Duration

	// BatchSize is the most rows one statement deletes; each batch is its
	// own short transaction. Default: 1000 ([DefaultRetentionBatchSize]).
	BatchSize int

	// BatchPause is a pause between two batches of one pass, to leave the
	// database to the application while a large backlog of old rows is
	// deleted. Default: 0, no pause.
	BatchPause time.Duration

	// Logger receives a Debug record per pass that deleted nothing, an
	// Info record per pass that deleted rows, and a Warn record per failed
	// pass. Default: nil, [slog.Default].
	Logger *slog.Logger

	// OnPass, when set, is called after every pass with its result (for
	// metrics). Default: nil.
	OnPass func(RetentionResult)
}

// RetentionResult is what one pass of a [Retention] did.
type RetentionResult struct {
	// Published is how many published outbox rows it deleted.
	Published int64
	// Inbox is how many inbox markers it deleted.
	Inbox int64
	// Batches is how many delete statements it ran.
	Batches int
	// Duration is how long the pass took.
	Duration time.Duration
	// Err is the pass's error, or nil.
	Err error
}

// Retention deletes published outbox rows and old inbox markers on a
// schedule, in small batches: each batch is one short transaction that
// waits for no row another transaction holds (see [Store.DeletePublished]
// for each database's locking), so writers and the relay never wait for
// it beyond one batch of SQLite's single write lock. Run it beside the relay
// (the operator command's "relay --retention") or on its own; several
// can run at once.
type Retention struct {
	store *Store
	cfg   RetentionConfig
	log   *slog.Logger
}

// NewRetention returns the retention of store's outbox (store may be nil
// when only cfg.Inbox is pruned), or an error for a configuration that would
// prune nothing or is invalid.
func NewRetention(store *Store, cfg RetentionConfig) (*Retention, error) {
	switch {
	case store == nil && cfg.Inbox == nil:
		return nil, errors.New("sqlstore: retention: neither a store nor an inbox to prune")
	case (cfg.Inbox == nil) != (cfg.InboxDB == nil):
		return nil, errors.New("sqlstore: retention: Inbox and InboxDB go together")
	case cfg.PublishedAge < 0 || cfg.InboxAge < 0 || cfg.Interval < 0 || cfg.BatchSize < 0 || cfg.BatchPause < 0:
		return nil, errors.New("sqlstore: retention: PublishedAge, InboxAge, Interval, BatchSize and BatchPause must not be negative")
	}
	if cfg.PublishedAge == 0 {
		cfg.PublishedAge = DefaultRetentionAge
	}
	if cfg.InboxAge == 0 {
		cfg.InboxAge = DefaultRetentionAge
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultRetentionInterval
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultRetentionBatchSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Retention{store: store, cfg: cfg, log: log.With(slog.String("component", "outbox.retention"))}, nil
}

// Run runs a pass at once, then one every Interval, until ctx is done; then
// it returns nil. A failed pass is logged and reported to OnPass, and the
// next runs as scheduled.
func (r *Retention) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		res := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		attrs := []any{slog.Int64("published", res.Published), slog.Int64("inbox", res.Inbox),
			slog.Int("batches", res.Batches), slog.Duration("duration", res.Duration)}
		switch {
		case res.Err != nil:
			r.log.Warn("retention pass failed", append(attrs, slog.String("error", res.Err.Error()))...)
		case res.Published+res.Inbox > 0:
			r.log.Info("retention pass", attrs...)
		default:
			r.log.Debug("retention pass", attrs...)
		}
		t.Reset(r.cfg.Interval)
	}
}

// RunOnce runs one pass: it deletes every published outbox row older than
// PublishedAge and every inbox marker older than InboxAge, batch by batch,
// and returns what it did (also to OnPass).
func (r *Retention) RunOnce(ctx context.Context) RetentionResult {
	start := time.Now()
	var res RetentionResult
	res.Err = r.pass(ctx, &res)
	res.Duration = time.Since(start)
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(res)
	}
	return res
}

func (r *Retention) pass(ctx context.Context, res *RetentionResult) error {
	batch := r.cfg.BatchSize
	if r.store != nil {
		for {
			n, err := r.store.deletePublishedBatch(ctx, r.cfg.PublishedAge, batch)
			res.Published += n
			res.Batches++
			if err != nil {
				return fmt.Errorf("sqlstore: retention: %w", err)
			}
			if n < int64(batch) {
				break
			}
			if err := r.pause(ctx); err != nil {
				return err
			}
		}
	}
	if r.cfg.Inbox == nil {
		return nil
	}
	consumers := r.cfg.InboxConsumers
	if consumers == nil {
		var err error
		if consumers, err = r.cfg.Inbox.Consumers(ctx, r.cfg.InboxDB); err != nil {
			return fmt.Errorf("sqlstore: retention: %w", err)
		}
	}
	cutoff := time.Now().Add(-r.cfg.InboxAge)
	for _, c := range consumers {
		for {
			// One batch per call, so that the pause goes between batches.
			n, err := r.cfg.Inbox.pruneBatch(ctx, r.cfg.InboxDB, c, cutoff, batch)
			res.Inbox += n
			res.Batches++
			if err != nil {
				return fmt.Errorf("sqlstore: retention: consumer %q: %w", c, err)
			}
			if n < int64(batch) {
				break
			}
			if err := r.pause(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// pause waits BatchPause, or until ctx is done.
func (r *Retention) pause(ctx context.Context) error {
	if r.cfg.BatchPause <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(r.cfg.BatchPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("sqlstore: retention: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}
