package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/internal/backoff"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/internal/logattr"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Consumer applies the events of a topic through typed handlers: it decodes
// each message with a [runtime.Registry] (any registered version, upcast to
// the latest), runs the event type's handler, and with the inbox does so
// exactly once per event id. Register handlers with [Handle] and
// [HandleWithoutInbox], then consume with [Consumer.HandlerFunc] in a
// Watermill router, or with [Consumer.Run] (partitions in parallel, batches
// in one transaction).
//
// A Consumer is safe for concurrent use: several subscriptions (partitions,
// router handlers) may share one. Register every handler before the first
// message arrives.
type Consumer struct {
	reg *runtime.Registry
	cfg Config
	sql *sqlstore.Inbox // nil without a database (cfg.DB)
	log *slog.Logger

	mu     sync.RWMutex
	routes map[string]*route // by event type

	nackMu sync.Mutex
	nacks  map[string]int // message UUID → times nacked in a row

	group grouper // deliveries waiting for a transaction (MaxTransactions)
}

// maxTrackedNacks bounds the nack counts a consumer remembers; past it the
// counts start over (a message whose partition moved elsewhere is never
// acked here).
const maxTrackedNacks = 10_000

// route is the handler of one event type.
type route struct {
	kind routeKind
	// call runs the handler; tx is the inbox transaction (nil for
	// withoutInbox), which the handler of [Handle] gets as its driver's
	// own transaction type.
	call func(ctx context.Context, tx sqlstore.Tx, evt runtime.Event, m Meta) error
}

// routeKind is how a handler gets its inbox transaction.
type routeKind int

const (
	withoutInbox routeKind = iota // HandleWithoutInbox: none
	withInbox                     // Handle: a transaction of Config.DB
)

// New returns a consumer that decodes with reg, configured by cfg. It
// returns an error wrapping [ErrInvalidConfig] (or [ErrInvalidTable],
// [ErrUnsupportedDialect]) for an invalid cfg. It does not touch the
// database; create the inbox table with [Migrate].
func New(reg *runtime.Registry, cfg Config) (*Consumer, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil registry", ErrInvalidConfig)
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dialect, err := cfg.dialect()
	if err != nil {
		return nil, err
	}
	var inbox *sqlstore.Inbox
	if dialect != "" {
		if inbox, err = sqlstore.NewInbox(sqlstore.Dialect(dialect), cfg.Table, cfg.TxTimeout); err != nil {
			return nil, inboxErr(err)
		}
	}
	c := &Consumer{
		reg:    reg,
		cfg:    cfg,
		sql:    inbox,
		log:    cfg.Logger.With(slog.String("consumer", cfg.Name)),
		routes: make(map[string]*route),
	}
	return c, nil
}

// Name returns the consumer's [Config.Name].
func (c *Consumer) Name() string { return c.cfg.Name }

// Handle registers fn as the handler of event type E, which must be the
// latest registered version of its event: the consumer decodes every
// version it knows and upcasts it to E before calling fn.
//
// d is the consumer's [Config.DB], as the driver whose transaction type
// fn takes: a database/sql handler (database/sql itself, or sqlc, whose
// generated New takes a DBTX a *sql.Tx satisfies) gets a *sql.Tx with
// databasesql.New(sqlDB), a pgx handler (sqlc's pgx/v5 target) a pgx.Tx
// with pgxv5.New(pool), a GORM handler a *gorm.DB with
// hooks.NewDriver(gormDB).
//
// fn runs inside a transaction the consumer begins on [Config.DB], whose
// first statement inserts (consumer name, event id) into the inbox (on
// MySQL and MariaDB, the first after setting the session's timeouts; see
// [Config.TxTimeout]); tx is that transaction as d's type
// (d.UnwrapTx). fn must make its database writes through tx, and neither
// commit nor roll it back. When fn returns nil the transaction commits,
// its writes and the inbox marker together, and the message is acked.
// When the marker already exists (a redelivery, or a concurrent duplicate
// that committed first) fn does not run, nothing commits, and the message
// is acked. When fn returns an error or panics, the transaction rolls back
// and fn is retried (see [Config.MaxRetries]). fn may run more than once
// for one event, but only one run commits.
//
// Each run has [Config.TxTimeout] (30s by default) for the whole
// transaction: ctx carries the deadline, and tx was begun with it (a GORM
// tx carries ctx too), so fn's statements through tx fail once it passes,
// and the run counts as an inbox failure (retried, then nacked; never
// dead-lettered). fn should pass ctx to whatever else it waits on: a
// handler blocked outside the database holds its delivery until it
// returns.
//
// Handle returns an error wrapping [ErrInvalidHandler] when c, d or fn is
// nil, the consumer has no DB, d is not its DB, E is not the latest
// registered version of its type, or the type already has a handler.
func Handle[TTx any, E runtime.Event](c *Consumer, d sqlstore.Driver[TTx], fn func(ctx context.Context, tx TTx, e E, m Meta) error) error {
	if err := checkHandler[E](c, fn == nil); err != nil {
		return err
	}
	switch {
	case c.cfg.DB == nil:
		return fmt.Errorf("%w: %s: the inbox needs Config.DB (use HandleWithoutInbox for handlers without a database)", ErrInvalidHandler, reflect.TypeFor[E]())
	case d == nil:
		return fmt.Errorf("%w: %s: nil driver", ErrInvalidHandler, reflect.TypeFor[E]())
	case sqlstore.DB(d) != c.cfg.DB:
		return fmt.Errorf("%w: %s: the driver %T is not the consumer's Config.DB (%T): the handler's transaction is begun on Config.DB", ErrInvalidHandler, reflect.TypeFor[E](), d, c.cfg.DB)
	}
	return register(c, withInbox, func(ctx context.Context, tx sqlstore.Tx, e E, m Meta) error {
		return fn(ctx, d.UnwrapTx(ctx, tx), e, m)
	})
}

// HandleWithoutInbox registers fn as the handler of event type E (the latest
// registered version of its event, as for [Handle]) without the inbox: fn
// runs for every delivery, duplicates included, with no transaction. Use it
// for effects outside the database that are idempotent on their own or can
// tolerate duplicates (a cache refresh, an idempotent API call keyed by
// [Meta].EventID). Errors are retried and dead-lettered as with Handle.
func HandleWithoutInbox[E runtime.Event](c *Consumer, fn func(ctx context.Context, e E, m Meta) error) error {
	if err := checkHandler[E](c, fn == nil); err != nil {
		return err
	}
	return register(c, withoutInbox, func(ctx context.Context, _ sqlstore.Tx, e E, m Meta) error { return fn(ctx, e, m) })
}

// checkHandler returns an error wrapping [ErrInvalidHandler] for a nil
// consumer or a nil handler function (a wiring mistake that would
// otherwise panic on every event, or dead-letter them all).
func checkHandler[E runtime.Event](c *Consumer, nilFn bool) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: %s: nil *Consumer", ErrInvalidHandler, reflect.TypeFor[E]())
	case nilFn:
		return fmt.Errorf("%w: %s: nil handler function", ErrInvalidHandler, reflect.TypeFor[E]())
	}
	return nil
}

func register[E runtime.Event](c *Consumer, kind routeKind, fn func(ctx context.Context, tx sqlstore.Tx, e E, m Meta) error) error {
	key, err := keyOf[E]()
	if err != nil {
		return err
	}
	latest, ok := c.reg.Latest(key.Type)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s (%s) is not registered in the registry", ErrInvalidHandler, key, reflect.TypeFor[E]())
	case latest != key.Version:
		return fmt.Errorf("%w: %s (%s) is not the latest version %d: handlers take the latest version, older ones are upcast to it",
			ErrInvalidHandler, key, reflect.TypeFor[E](), latest)
	}
	r := &route{
		kind: kind,
		call: func(ctx context.Context, tx sqlstore.Tx, evt runtime.Event, m Meta) error {
			e, err := convert[E](evt)
			if err != nil {
				return err
			}
			return fn(ctx, tx, e, m)
		},
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.routes[key.Type]; dup {
		return fmt.Errorf("%w: %s already has a handler", ErrInvalidHandler, key.Type)
	}
	c.routes[key.Type] = r
	return nil
}

// keyOf returns the key of event type E, using a zero value (a pointer to
// one when E is a pointer type).
func keyOf[E runtime.Event]() (k runtime.Key, err error) {
	var zero E
	t := reflect.TypeFor[E]()
	if t.Kind() == reflect.Pointer {
		zero = reflect.New(t.Elem()).Interface().(E)
	} else if t.Kind() == reflect.Interface {
		return k, fmt.Errorf("%w: %s is an interface type; handlers take a concrete event type", ErrInvalidHandler, t)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s.EventKey panicked on a zero value: %v", ErrInvalidHandler, t, p)
		}
	}()
	return zero.EventKey(), nil
}

// convert returns evt as an E, dereferencing or taking the address of a
// copy when the decoder returns T and E is *T or the other way round.
func convert[E runtime.Event](evt runtime.Event) (E, error) {
	if e, ok := evt.(E); ok {
		return e, nil
	}
	var zero E
	want := reflect.TypeFor[E]()
	v := reflect.ValueOf(evt)
	switch {
	case !v.IsValid():
	case v.Kind() == reflect.Pointer && v.Type().Elem() == want && !v.IsNil():
		return v.Elem().Interface().(E), nil
	case want.Kind() == reflect.Pointer && want.Elem() == v.Type():
		p := reflect.New(v.Type())
		p.Elem().Set(v)
		return p.Interface().(E), nil
	}
	return zero, fmt.Errorf("%w: the registry returned %T, the handler takes %s", ErrTypeMismatch, evt, want)
}

// HandlerFunc returns the consumer as a Watermill handler, for
// message.Router.AddConsumerHandler or any loop that acks a message when the
// function returns nil and nacks it otherwise:
//
//	router.AddConsumerHandler("billing", "orders", subscriber, c.HandlerFunc())
//
// The function blocks until the message is applied, or given up on:
// retries with backoff, dead-lettering and [Config.NackDelay] all happen
// inside it, so no Retry or PoisonQueue middleware is needed (adding them
// would retry and dead-letter on top of the consumer's own policy). It
// returns nil for the outcomes that ack ([Outcome.Acked]) and an error for
// the others: the [*runtime.UnknownVersionError] or
// [*runtime.UnknownEventTypeError] of a nacked message, or the error of a
// failed one ([*HandlerError], [*InboxError], ...), wrapped.
//
// Messages are applied in the order they are delivered; the consumer adds no
// parallelism. Subscribers that deliver a partition's next message only after
// the current one is acked (adapters/kafka, Watermill's Kafka, SQL and
// JetStream subscribers) therefore keep each aggregate's order. Concurrent
// deliveries (a router handles partitions concurrently) each get an inbox
// transaction of their own, unless [Config.MaxTransactions] bounds them:
// then those that wait are applied together. For partitions in parallel
// and batches of a partition's messages in one transaction, the fastest
// path, see [Consumer.Run].
func (c *Consumer) HandlerFunc() message.NoPublishHandlerFunc { return c.process }

// process handles one delivery from a Watermill router.
func (c *Consumer) process(msg *message.Message) error {
	return c.processFrom(msg, message.SubscribeTopicFromCtx(msg.Context()), c.cfg.MaxTransactions > 0)
}

// processFrom handles one delivery from topic; grouped, its first attempt
// may share a transaction with concurrent deliveries (see
// [Consumer.groupAttempt]).
func (c *Consumer) processFrom(msg *message.Message, topic string, grouped bool) error {
	start := time.Now()
	ctx := msg.Context()
	res := Result{MessageUUID: msg.UUID, Meta: Meta{Topic: topic}, Batch: 1}
	c.handle(ctx, msg, &res, grouped)
	res.Duration = time.Since(start)
	if c.cfg.OnOutcome != nil {
		c.cfg.OnOutcome(res)
	}
	if res.Outcome.Acked() {
		c.forgetNacks(msg.UUID)
		return nil
	}
	return fmt.Errorf("consumer: %s: %s: %s: %w", c.cfg.Name, describe(&res), res.Outcome, res.Err)
}

// describe names res's message for an error: its event id, type and
// version, or, for a message that did not decode that far, its UUID and
// what its metadata gave.
func describe(res *Result) string {
	m := res.Meta
	if m.EventID == uuid.Nil {
		s := "message " + res.MessageUUID
		if m.EventType != "" {
			s += " (" + m.EventType + ")"
		}
		return s
	}
	return fmt.Sprintf("event %s (%s v%d)", m.EventID, m.EventType, m.EventVersion)
}

// handle fills res with the outcome of one delivery (grouped: see
// processFrom).
func (c *Consumer) handle(ctx context.Context, msg *message.Message, res *Result, grouped bool) {
	env, err := runtime.EnvelopeFromMetadata(msg.UUID, msg.Metadata, msg.Payload)
	if err == nil && env.EventID == uuid.Nil {
		err = fmt.Errorf("%w: %s: %w", runtime.ErrInvalidEnvelope, runtime.MetadataEventID, ErrNilEventID)
	}
	if err != nil {
		// What the metadata says, where it says it, for the log line and
		// the outcome of a message that cannot be decoded.
		res.Meta.EventType = msg.Metadata.Get(runtime.MetadataEventType)
		if id, perr := uuid.Parse(msg.Metadata.Get(runtime.MetadataEventID)); perr == nil {
			res.Meta.EventID = id
		}
		c.giveUp(ctx, msg, res, ReasonMalformed, err)
		return
	}
	res.Meta.Envelope = env

	c.mu.RLock()
	r := c.routes[env.EventType]
	c.mu.RUnlock()
	if r == nil {
		if _, known := c.reg.Latest(env.EventType); known {
			res.Outcome = OutcomeIgnored
			c.log.Debug("consumer: no handler, message ignored", c.attrs(res)...)
			return
		}
		c.act(ctx, msg, res, c.cfg.UnknownType, ReasonUnknownType, &runtime.UnknownEventTypeError{Type: env.EventType})
		return
	}

	evt, err := c.reg.DecodeEnvelope(env)
	if err != nil {
		var uv *runtime.UnknownVersionError
		var ut *runtime.UnknownEventTypeError
		switch {
		case errors.As(err, &uv):
			c.act(ctx, msg, res, c.cfg.UnknownVersion, ReasonUnknownVersion, err)
		case errors.As(err, &ut): // a registry changed behind our back
			c.act(ctx, msg, res, c.cfg.UnknownType, ReasonUnknownType, err)
		default:
			c.giveUp(ctx, msg, res, ReasonDecode, err)
		}
		return
	}
	c.apply(ctx, msg, res, r, evt, grouped && r.kind == withInbox)
}

// act carries out a policy for a message that cannot be applied.
func (c *Consumer) act(ctx context.Context, msg *message.Message, res *Result, a Action, reason Reason, err error) {
	switch a {
	case ActionSkip:
		res.Outcome, res.Reason, res.Err = OutcomeSkipped, reason, err
		c.log.Warn("consumer: message skipped", c.attrs(res)...)
	case ActionDeadLetter:
		c.deadLetter(ctx, msg, res, reason, err)
	default:
		res.Outcome, res.Reason, res.Err = OutcomeNacked, reason, err
		c.nack(ctx, res)
	}
}

// giveUp dead-letters a message when a dead-letter publisher is configured
// and fails it (nack) otherwise.
func (c *Consumer) giveUp(ctx context.Context, msg *message.Message, res *Result, reason Reason, err error) {
	if c.cfg.DeadLetterPublisher != nil {
		c.deadLetter(ctx, msg, res, reason, err)
		return
	}
	c.fail(ctx, res, reason, err)
}

// fail records a failed delivery, logs it and holds the message for its
// nack delay.
func (c *Consumer) fail(ctx context.Context, res *Result, reason Reason, err error) {
	res.Outcome, res.Reason, res.Err = OutcomeFailed, reason, err
	c.nack(ctx, res)
}

// deadLetter publishes a copy of msg (same UUID, payload and metadata, plus
// the reason) to the dead-letter topic.
func (c *Consumer) deadLetter(ctx context.Context, msg *message.Message, res *Result, reason Reason, cause error) {
	dl := message.NewMessage(msg.UUID, msg.Payload)
	dl.Metadata = make(message.Metadata, len(msg.Metadata)+6)
	maps.Copy(dl.Metadata, msg.Metadata)
	dl.Metadata.Set(MetadataDeadLetterReason, string(reason))
	dl.Metadata.Set(MetadataDeadLetterError, cause.Error())
	dl.Metadata.Set(MetadataDeadLetterTopic, res.Meta.Topic)
	dl.Metadata.Set(MetadataDeadLetterConsumer, c.cfg.Name)
	dl.Metadata.Set(MetadataDeadLetterAttempts, strconv.Itoa(res.Meta.Attempt))
	dl.Metadata.Set(MetadataDeadLetterAt, c.cfg.Clock.Now().UTC().Format(time.RFC3339Nano))
	dl.SetContext(ctx)
	if err := c.cfg.DeadLetterPublisher.Publish(c.cfg.DeadLetterTopic, dl); err != nil {
		c.fail(ctx, res, reason, fmt.Errorf("publish to dead-letter topic %q: %w", c.cfg.DeadLetterTopic, errors.Join(err, cause)))
		return
	}
	res.Outcome, res.Reason, res.Err = OutcomeDeadLettered, reason, cause
	c.log.Warn("consumer: message dead-lettered", append(c.attrs(res), slog.String("dead_letter_topic", c.cfg.DeadLetterTopic))...)
}

// errDuplicate rolls back the inbox transaction of a redelivered event.
var errDuplicate = errors.New("consumer: duplicate")

// apply runs the handler, retrying, and records the outcome; grouped, its
// first attempt goes through the consumer's groups (see
// [Consumer.groupAttempt]).
func (c *Consumer) apply(ctx context.Context, msg *message.Message, res *Result, r *route, evt runtime.Event, grouped bool) {
	var err error
	for attempt := 1; ; attempt++ {
		res.Meta.Attempt = attempt
		if attempt == 1 && grouped {
			res.Batch, err = c.groupAttempt(ctx, r, evt, res)
			if errors.Is(err, errAlone) {
				err = c.attempt(ctx, r, evt, res.Meta)
			}
		} else {
			res.Batch = 1
			err = c.attempt(ctx, r, evt, res.Meta)
		}
		switch {
		case err == nil:
			res.Outcome = OutcomeApplied
			c.log.Debug("consumer: event applied", c.attrs(res)...)
			return
		case errors.Is(err, errDuplicate):
			res.Outcome = OutcomeDuplicate
			c.log.Debug("consumer: duplicate event", c.attrs(res)...)
			return
		case errors.Is(err, ErrTypeMismatch):
			c.fail(ctx, res, ReasonMismatch, err)
			return
		}
		if ctx.Err() != nil {
			c.fail(ctx, res, ReasonCanceled, errors.Join(err, context.Cause(ctx)))
			return
		}
		if attempt > c.cfg.MaxRetries || runtime.IsPermanent(err) {
			break
		}
		wait := c.backoff(attempt)
		c.log.Log(ctx, c.failureLevel(res.MessageUUID), "consumer: attempt failed, retrying", append(c.attrs(res),
			slog.Duration("backoff", wait), logattr.Error(err))...)
		if !backoff.Sleep(ctx, wait) {
			c.fail(ctx, res, ReasonCanceled, errors.Join(err, context.Cause(ctx)))
			return
		}
	}
	var ie *InboxError
	if errors.As(err, &ie) {
		c.fail(ctx, res, ReasonInbox, err)
		return
	}
	herr := &HandlerError{EventType: res.Meta.EventType, Attempts: res.Meta.Attempt, Err: err}
	// A handler error while the database is down is not the message's
	// fault: nack it rather than dead-letter it.
	if r.kind != withoutInbox && c.cfg.DeadLetterPublisher != nil {
		if perr := c.ping(ctx); perr != nil {
			c.fail(ctx, res, ReasonInbox, errors.Join(herr, &InboxError{Err: perr}))
			return
		}
	}
	c.giveUp(ctx, msg, res, ReasonHandler, herr)
}

// attempt runs the handler once. It returns nil when the handler's effects
// committed, errDuplicate for a redelivery, an *InboxError for a failure of
// the inbox transaction (its deadline, [Config.TxTimeout], included), and
// otherwise the handler's error.
func (c *Consumer) attempt(ctx context.Context, r *route, evt runtime.Event, m Meta) error {
	if r.kind == withoutInbox {
		return c.call(ctx, r, nil, evt, m)
	}
	// The deadline covers begin, the marker insert, the handler's
	// statements and commit: the driver fails each of them once it passes
	// (pgx closes the connection, so a half-open one leaves the pool), and
	// database/sql rolls the transaction back.
	tctx, cancel := context.WithTimeoutCause(ctx, c.cfg.TxTimeout, errTxDeadline)
	defer cancel()
	var handlerErr error
	// The marker first, then the handler; the session's timeouts (MySQL)
	// are restored after the transaction (see inboxTx).
	err := c.bounded(tctx, func() error {
		return c.inboxTx(tctx, func(tx sqlstore.Tx) error {
			inserted, err := c.sql.Record(tctx, tx, c.cfg.Name, m.EventID, m.EventType, c.cfg.Clock.Now())
			if err != nil {
				return &InboxError{Err: err}
			}
			if !inserted {
				return errDuplicate
			}
			if err := c.call(tctx, r, tx, evt, m); err != nil {
				handlerErr = err
				return err
			}
			return nil
		})
	})
	if errors.Is(err, errAbandoned) {
		return err // handlerErr is the abandoned transaction's
	}
	if err != nil && !errors.Is(err, errDuplicate) && ctx.Err() == nil && errors.Is(context.Cause(tctx), errTxDeadline) {
		// Whatever failed, the deadline is why: the database or the
		// connection is too slow, or the handler blocked. Not the
		// message's fault: retried and nacked, never dead-lettered.
		var ie *InboxError
		if errors.As(err, &ie) {
			err = ie.Err
		}
		return &InboxError{Err: fmt.Errorf("%w (TxTimeout %v): %w", ErrTxTimeout, c.cfg.TxTimeout, err)}
	}
	switch {
	case handlerErr != nil:
		// The transaction rolled back (a failed rollback only ends it
		// sooner: the server discards what it did not commit).
		return handlerErr
	case err == nil, errors.Is(err, errDuplicate):
		return err
	}
	var ie *InboxError
	if errors.As(err, &ie) {
		return err
	}
	// Begin or commit failed.
	return &InboxError{Err: err}
}

// inboxTx runs fn in an inbox transaction begun with ctx on [Config.DB]
// (see [sqlstore.Inbox.InTx], which on MySQL and MariaDB also bounds it on
// the server): it commits when fn returns nil, and rolls back when fn
// returns an error or panics (the panic goes on). fn calls the inbox's
// Record or RecordBatch first.
func (c *Consumer) inboxTx(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
	return c.sql.InTx(ctx, c.cfg.DB, fn)
}

// errTxDeadline is the cause of an inbox transaction's context when its
// deadline passes.
var errTxDeadline = errors.New("consumer: inbox transaction deadline")

// abandonAfter is how long after its deadline ([Config.TxTimeout]) an
// inbox transaction's attempt stops waiting for the driver to return.
const abandonAfter = time.Second

// errAbandoned marks the error of an attempt whose inbox transaction did
// not return within abandonAfter of its deadline.
var errAbandoned = errors.New("the database driver did not return")

// bounded runs fn, an inbox transaction whose every call was given tctx,
// and returns its error, or fn's panic. Drivers fail a call once its
// context ends, except calls that take none: go-sql-driver/mysql's COMMIT
// and ROLLBACK, which on a half-open connection wait until TCP gives up
// (never, behind a proxy that holds the connection open), holding the
// partition. So when fn has not returned abandonAfter after tctx ended,
// bounded returns an *InboxError wrapping ErrTxTimeout and errAbandoned,
// and leaves fn to the driver, with its connection: the message is tried
// again on another connection, and the inbox marker, unique per event,
// keeps its effects once whether the abandoned COMMIT took effect or not
// (the server ends an abandoned transaction after TxTimeout: see
// [Config.TxTimeout]).
func (c *Consumer) bounded(tctx context.Context, fn func() error) error {
	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{panicked: true, value: p}
			}
		}()
		done <- result{err: fn()}
	}()
	var res result
	select {
	case res = <-done:
	case <-tctx.Done():
		t := time.NewTimer(abandonAfter)
		defer t.Stop()
		select {
		case res = <-done:
		case <-t.C:
			return &InboxError{Err: fmt.Errorf("%w (TxTimeout %v): %w %v after the deadline (a call that takes no context on a half-open connection, such as go-sql-driver/mysql's COMMIT: set readTimeout and writeTimeout in a MySQL DSN); the attempt left the transaction and its connection to the driver",
				ErrTxTimeout, c.cfg.TxTimeout, errAbandoned, abandonAfter)}
		}
	}
	if res.panicked {
		panic(res.value)
	}
	return res.err
}

// call runs a handler, turning a panic into a *PanicError, between
// [Config.StartHandler] and its end.
func (c *Consumer) call(ctx context.Context, r *route, tx sqlstore.Tx, evt runtime.Event, m Meta) (err error) {
	if c.cfg.StartHandler != nil {
		var end func(error)
		ctx, end = c.cfg.StartHandler(ctx, m.Topic, m.Envelope)
		defer func() { end(err) }()
	}
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p}
		}
	}()
	return r.call(ctx, tx, evt, m)
}

// ping checks that the inbox database answers.
func (c *Consumer) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := c.cfg.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.PingContext(ctx)
}

// backoff returns the wait before the given retry (1-based): a random
// duration between half and all of min(MinBackoff*2^(retry-1), MaxBackoff).
func (c *Consumer) backoff(retry int) time.Duration {
	return backoff.Jitter(backoff.Exponential(c.cfg.MinBackoff, c.cfg.MaxBackoff, retry))
}

// nack logs a delivery that ends nacked (res holds its outcome, reason
// and error) as "consumer: message nacked" and holds the message for its
// nack delay. The line is at WARN on the message's 1st, 2nd, 4th, 8th, ...
// nack in a row and at DEBUG on the others (see [Config.Logger]), with the
// count ("nacks") and the delay ("backoff"). When ctx is done (shutdown),
// the message is not held and the line is at DEBUG, without either.
func (c *Consumer) nack(ctx context.Context, res *Result) {
	if ctx.Err() != nil {
		c.log.Debug("consumer: message nacked", c.attrs(res)...)
		return
	}
	delay, n := c.nextNackDelay(res.MessageUUID)
	level := slog.LevelDebug
	if loudNack(n) {
		level = slog.LevelWarn
	}
	c.log.Log(ctx, level, "consumer: message nacked", append(c.attrs(res),
		slog.Int("nacks", n), slog.Duration("backoff", delay))...)
	backoff.Sleep(ctx, delay)
}

// nextNackDelay returns NackDelay doubled for each time the message was
// nacked before in a row, capped at MaxNackDelay, and counts this nack:
// n is how many times in a row the message has now been nacked.
func (c *Consumer) nextNackDelay(uuid string) (delay time.Duration, n int) {
	c.nackMu.Lock()
	if c.nacks == nil || len(c.nacks) >= maxTrackedNacks {
		c.nacks = make(map[string]int)
	}
	n = c.nacks[uuid] + 1
	c.nacks[uuid] = n
	c.nackMu.Unlock()
	return backoff.Exponential(c.cfg.NackDelay, c.cfg.MaxNackDelay, n), n
}

// loudNack reports whether the n-th nack in a row of a message is logged
// at WARN: n is a power of two (1, 2, 4, 8, ...), so that a message that
// stalls its partition for good logs a WARN line after exponentially
// growing numbers of tries rather than one per try.
func loudNack(n int) bool { return n > 0 && n&(n-1) == 0 }

// failureLevel returns the level of the lines about a failure within the
// current delivery of the message with uuid (a retry): WARN when the nack
// that would end this delivery is logged at WARN (see [loudNack]), DEBUG
// otherwise, so that a delivery's lines share one level.
func (c *Consumer) failureLevel(uuid string) slog.Level {
	c.nackMu.Lock()
	n := c.nacks[uuid]
	c.nackMu.Unlock()
	if loudNack(n + 1) {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// forgetNacks drops a message's nack count once it is acked.
func (c *Consumer) forgetNacks(uuid string) {
	c.nackMu.Lock()
	delete(c.nacks, uuid)
	c.nackMu.Unlock()
}

// attrs returns the log attributes of a delivery. Those of the event that
// a malformed message does not give (no event type, version 0, no or a
// malformed event id) are left out rather than logged as zeros.
func (c *Consumer) attrs(res *Result) []any {
	a := []any{slog.String("message_uuid", res.MessageUUID)}
	if res.Meta.EventType != "" {
		a = append(a, slog.String("event_type", res.Meta.EventType))
	}
	if res.Meta.EventVersion != 0 {
		a = append(a, slog.Int("event_version", res.Meta.EventVersion))
	}
	if res.Meta.EventID != (uuid.UUID{}) {
		a = append(a, slog.String("event_id", res.Meta.EventID.String()))
	}
	a = append(a, slog.String("topic", res.Meta.Topic))
	if res.Meta.Attempt > 0 {
		a = append(a, slog.Int("attempt", res.Meta.Attempt))
	}
	if res.Reason != "" {
		a = append(a, slog.String("reason", string(res.Reason)))
	}
	if res.Err != nil {
		a = append(a, logattr.Error(res.Err))
	}
	return a
}
