package hooks

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// Config configures a [Plugin]. The zero value is a valid configuration.
type Config struct {
	// Table is the outbox table, optionally schema-qualified. It must be a
	// plain SQL identifier (see [sqlstore.CheckTable]). Default:
	// [sqlstore.DefaultTable].
	Table string

	// Topic returns the destination topic of an event; it is stored with
	// the row when the row is written. Default: the aggregate type, so each
	// aggregate type gets its own topic.
	Topic func(env runtime.Envelope) string

	// ValidateTopic, when set, checks each event's topic when it is
	// saved: a topic it refuses fails the save with a
	// [*sqlstore.TopicError] naming the event (wrapped in a
	// [*WriteError]) and rolls it back, instead of leaving the relay a
	// message the broker refuses. Pass the broker's rules, such as
	// adapters/kafka's ValidateTopic. It is the writer's
	// (sqlstore.WriterConfig.ValidateTopic). Default: nil, no check.
	ValidateTopic func(topic string) error

	// Headers adds headers to the events written under ctx, after the
	// correlation id and trace context of [runtime.HeadersFromContext]. Use
	// it to inject an OpenTelemetry propagator's headers, as the Headers
	// method of adapters/tracing's Tracer does. Default: none.
	Headers func(ctx context.Context, headers map[string]string)

	// AfterCommit is called once after each transaction that inserted
	// outbox rows has committed: the one GORM opens for a single Create,
	// Save, Update or Delete, the application's (db.Transaction,
	// db.Begin()...Commit()), the one CreateInBatches opens, or one the
	// plugin began itself; rows written in a savepoint that was rolled back
	// do not count. It runs in the goroutine that committed, after the
	// events are cleared from their recorders. Wire the relay's Notify here
	// to publish at once without waiting for a poll (useful with SQLite,
	// which has no LISTEN/NOTIFY). It must not block. Default: nothing.
	AfterCommit func()

	// MaxEventBytes is the largest event payload (its JSON) a save may
	// write; a larger one fails the save with a
	// [*sqlstore.EventTooLargeError] (wrapped in a [*WriteError]) and
	// rolls it back, rather than be refused later by the broker. Keep it
	// below the broker's message limit (Kafka's default message.max.bytes
	// is about 1 MB; SQS allows 256 KiB). It is the writer's limit
	// (sqlstore.WriterConfig.MaxEventBytes): negative means no limit.
	// Default: 1,000,000 ([sqlstore.DefaultMaxEventBytes]).
	MaxEventBytes int

	// LogicalMessages, when not empty, writes each event as a
	// transactional logical decoding message with this prefix instead of
	// an outbox row, for the change-data-capture relay in messages mode
	// (package runtime/sqlstore/pgcdc; its default prefix is "gooutbox").
	// PostgreSQL only. It is the writer's
	// (sqlstore.WriterConfig.LogicalMessages), where the trade-offs are
	// described. Default: "" (rows).
	LogicalMessages string
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = sqlstore.DefaultTable
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = sqlstore.DefaultMaxEventBytes
	}
}

// Validate reports whether the configuration is usable.
func (c Config) Validate() error {
	if c.Table != "" {
		return sqlstore.CheckTable(c.Table, sqlstore.MaxOutboxTableName)
	}
	return nil
}

// Plugin is a GORM plugin that writes the events recorded on aggregates to
// the outbox table in the transaction that saves the aggregates. Register it
// with db.Use. See the package documentation for the guarantees.
//
// A Plugin is safe for concurrent use by every session of the database it is
// registered with; register a separate Plugin per *gorm.DB.
type Plugin struct {
	cfg     Config
	dialect sqlstore.Dialect

	writers sync.Map // sqlstore.Dialect → *sqlstore.Writer of cfg.Table

	schemas sync.Map // reflect.Type → *schema.Schema for models that are not the statement's schema

	typeNames sync.Map // reflect.Type → its default aggregate type (see typeName)

	newKeys sync.Map // *schema.Schema → bool: Creates of it can make new aggregates (see noteNewAggregates)

	controlStmts sync.Map // *sql.Stmt → struct{}: prepared transaction-control statements (see trackedTx.PrepareContext)

	noOrderLocks bool // tests only: skip the per-aggregate commit-order locks, to measure their cost
}

// New returns a plugin for cfg. It returns an error wrapping
// [sqlstore.ErrInvalidTable] for a table name that is not an identifier.
func New(cfg Config) (*Plugin, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Plugin{cfg: cfg}, nil
}

// Name returns "outbox", the plugin's name in GORM.
func (p *Plugin) Name() string { return "outbox" }

const (
	keyStartedTx     = "outbox:started_transaction"
	keyNewAggregates = "outbox:new_aggregates"
)

// Initialize registers the plugin's callbacks on db and wraps db's
// connection pool so that the commit and rollback of every transaction begun
// on it, and the savepoints taken in it, reach the plugin (db.DB() still
// returns the *sql.DB). GORM calls it from db.Use; call db.Use before
// deriving sessions from db (WithContext, Session, Begin), since a session
// derived earlier keeps the unwrapped pool and its application transactions
// are not seen. It returns an error wrapping [sqlstore.ErrUnsupportedDialect]
// for a dialect other than postgres, sqlite or mysql (MySQL 8, MariaDB
// 10.6+).
func (p *Plugin) Initialize(db *gorm.DB) error {
	d, err := sqlstore.ParseDialect(db.Dialector.Name())
	if err != nil {
		return err
	}
	p.dialect = d
	cb := db.Callback()
	var errs []error
	add := func(err error) { errs = append(errs, err) }

	add(cb.Create().After("gorm:begin_transaction").Before("gorm:before_create").Register("outbox:begin", p.begin))
	add(cb.Create().After("gorm:before_create").Before("gorm:create").Register("outbox:new_aggregates", p.noteNewAggregates))
	add(cb.Create().After("gorm:after_create").Before("gorm:commit_or_rollback_transaction").Register("outbox:write", p.writeCreate))
	add(cb.Create().After("gorm:commit_or_rollback_transaction").Register("outbox:commit", p.commit))

	add(cb.Update().After("gorm:begin_transaction").Before("gorm:before_update").Register("outbox:begin", p.begin))
	add(cb.Update().After("gorm:after_update").Before("gorm:commit_or_rollback_transaction").Register("outbox:write", p.writeChanged))
	add(cb.Update().After("gorm:commit_or_rollback_transaction").Register("outbox:commit", p.commit))

	add(cb.Delete().After("gorm:begin_transaction").Before("gorm:before_delete").Register("outbox:begin", p.begin))
	add(cb.Delete().After("gorm:after_delete").Before("gorm:commit_or_rollback_transaction").Register("outbox:write", p.writeChanged))
	add(cb.Delete().After("gorm:commit_or_rollback_transaction").Register("outbox:commit", p.commit))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hooks: register callbacks: %w", err)
	}
	p.wrapPool(db)
	return nil
}

// recorderOwner is implemented by aggregates that embed [runtime.Recorder].
type recorderOwner interface {
	OutboxRecorder() *runtime.RecorderState
}

var recorderOwnerType = reflect.TypeFor[recorderOwner]()

// AggregateTyper overrides the aggregate type of a model. By default the
// aggregate type is the GORM schema name in snake_case ("OrderLine" →
// "order_line").
type AggregateTyper interface {
	AggregateType() string
}

// AggregateIDer overrides the aggregate id of a model. By default it is the
// model's primary key after the save (composite keys joined with ":").
type AggregateIDer interface {
	AggregateID() string
}

// source is one aggregate of a statement with pending events.
type source struct {
	state *runtime.RecorderState
	value reflect.Value // addressable struct
}

// eachModel calls fn with each struct model of the statement: the model
// itself, or each element of a slice or array of models (through pointers
// and interfaces).
func eachModel(db *gorm.DB, fn func(v reflect.Value)) {
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice, reflect.Array:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		case reflect.Struct:
			fn(v)
		}
	}
	if db.Statement.ReflectValue.IsValid() {
		walk(db.Statement.ReflectValue)
	}
}

// sources returns the aggregates of the statement's models that have pending
// events.
func sources(db *gorm.DB) []source {
	var out []source
	eachModel(db, func(v reflect.Value) {
		if !v.CanAddr() {
			return
		}
		if ro, ok := v.Addr().Interface().(recorderOwner); ok {
			if st := ro.OutboxRecorder(); st != nil && st.Len() > 0 {
				out = append(out, source{state: st, value: v})
			}
		}
	})
	return out
}

// skipsHooks reports whether the statement runs with SkipHooks, which writes
// no events — except the Create that db.Save falls back to when its UPDATE
// matched no row (a new record with a preset primary key): GORM runs that
// one with SkipHooks and ON CONFLICT DO UPDATE ALL, and it is the save that
// the events describe.
func skipsHooks(db *gorm.DB) bool {
	if !db.Statement.SkipHooks {
		return false
	}
	if c, ok := db.Statement.Clauses["ON CONFLICT"]; ok {
		if oc, ok := c.Expression.(clause.OnConflict); ok && oc.UpdateAll {
			return false
		}
	}
	return true
}

// begin starts a transaction when the statement runs without one
// (SkipDefaultTransaction) but may write events: its models have pending
// events, or they embed a recorder and have model hooks, which may record
// events after this point (a BeforeSave that records). The business rows
// and the outbox rows then commit together; the transaction is tracked like
// any other, so its commit confirms the events.
func (p *Plugin) begin(db *gorm.DB) {
	if db.Error != nil || db.Statement.ConnPool == nil || skipsHooks(db) || db.DryRun {
		return
	}
	if _, inTx := db.Statement.ConnPool.(gorm.TxCommitter); inTx {
		return // GORM's transaction or the application's: the rows join it
	}
	defer recoverInto(db)
	if !mayRecordInHooks(db) && len(sources(db)) == 0 {
		return
	}
	var (
		tx  gorm.ConnPool
		err error
	)
	switch b := db.Statement.ConnPool.(type) {
	case gorm.TxBeginner:
		tx, err = b.BeginTx(db.Statement.Context, nil)
	case gorm.ConnPoolBeginner:
		tx, err = b.BeginTx(db.Statement.Context, nil)
	default:
		err = fmt.Errorf("hooks: connection %T cannot begin a transaction, so the outbox rows cannot be written atomically", db.Statement.ConnPool)
	}
	if err != nil {
		_ = db.AddError(fmt.Errorf("hooks: begin transaction for outbox rows: %w", err))
		return
	}
	tx = p.track(tx, db.Statement.ConnPool)
	db.InstanceSet(keyStartedTx, startedTx{tx: tx, prev: db.Statement.ConnPool})
	db.Statement.ConnPool = tx
}

// startedTx is a transaction the plugin began for a statement, and the
// connection pool the statement ran on before.
type startedTx struct {
	tx, prev gorm.ConnPool
}

// mayRecordInHooks reports whether the statement's model embeds a recorder
// and has model hooks, which GORM runs inside the statement and which may
// record events.
func mayRecordInHooks(db *gorm.DB) bool {
	sch := db.Statement.Schema
	if sch == nil || !reflect.PointerTo(sch.ModelType).Implements(recorderOwnerType) {
		return false
	}
	return sch.BeforeCreate || sch.BeforeSave || sch.BeforeUpdate || sch.BeforeDelete ||
		sch.AfterCreate || sch.AfterSave || sch.AfterUpdate || sch.AfterDelete
}

// commit finishes a transaction the plugin began: it commits it, or rolls
// it back when the statement failed. The tracked transaction confirms its
// events on commit.
func (p *Plugin) commit(db *gorm.DB) {
	v, ok := db.InstanceGet(keyStartedTx)
	if !ok {
		return
	}
	started := v.(startedTx)
	committer := started.tx.(gorm.TxCommitter)
	if db.Error != nil {
		_ = committer.Rollback()
	} else if err := committer.Commit(); err != nil {
		_ = db.AddError(fmt.Errorf("hooks: commit: %w", err))
	}
	db.Statement.ConnPool = started.prev
}

// noteNewAggregates runs just before a Create's INSERT, after the model
// hooks: it notes the models whose primary key is still zero, so that the
// database generates it (a sequence, an identity or a column default).
// After the INSERT such a model is a new aggregate that no other
// transaction can know of before this one ends, and its events need no
// commit-order lock ([sqlstore.Row.NewAggregate]). An upsert (an ON
// CONFLICT clause) may return an existing row's key instead, and a key
// that GORM fills in from a Go default is known before the INSERT; neither
// counts.
func (p *Plugin) noteNewAggregates(db *gorm.DB) {
	if db.Error != nil || skipsHooks(db) || !db.Statement.ReflectValue.IsValid() {
		return
	}
	sch := db.Statement.Schema
	if sch == nil || !p.makesNewAggregates(sch) {
		return
	}
	if _, upsert := db.Statement.Clauses["ON CONFLICT"]; upsert {
		return
	}
	defer recoverInto(db)
	fresh := make(map[uintptr]bool)
	ctx := db.Statement.Context
	note := func(v reflect.Value) {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return
			}
			v = v.Elem()
		}
		if v.Type() != sch.ModelType || !v.CanAddr() {
			return
		}
		for _, f := range sch.PrimaryFields {
			if _, zero := f.ValueOf(ctx, v); !zero {
				return
			}
		}
		fresh[v.Addr().Pointer()] = true
	}
	switch rv := reflect.Indirect(db.Statement.ReflectValue); rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := range rv.Len() {
			note(rv.Index(i))
		}
	default:
		note(rv)
	}
	if len(fresh) > 0 {
		db.InstanceSet(keyNewAggregates, fresh)
	}
}

// makesNewAggregates reports whether a Create of sch's models can make new
// aggregates: they record events and their primary key has no Go default.
func (p *Plugin) makesNewAggregates(sch *schema.Schema) bool {
	if ok, known := p.newKeys.Load(sch); known {
		return ok.(bool)
	}
	ok := len(sch.PrimaryFields) > 0 && reflect.PointerTo(sch.ModelType).Implements(recorderOwnerType)
	for _, f := range sch.PrimaryFields {
		if f.DefaultValueInterface != nil {
			ok = false
		}
	}
	p.newKeys.Store(sch, ok)
	return ok
}

// newAggregates returns the models noteNewAggregates found, by address.
func newAggregates(db *gorm.DB) map[uintptr]bool {
	if v, ok := db.InstanceGet(keyNewAggregates); ok {
		return v.(map[uintptr]bool)
	}
	return nil
}

func (p *Plugin) writeCreate(db *gorm.DB) { p.write(db, false) }

func (p *Plugin) writeChanged(db *gorm.DB) { p.write(db, true) }

// models returns how many models the statement carries: 1 for a struct,
// the number of structs in a slice or array.
func models(db *gorm.DB) int {
	n := 0
	eachModel(db, func(reflect.Value) { n++ })
	return n
}

// mysqlDoNothing reports whether a Create on MySQL has an ON CONFLICT DO
// NOTHING clause. GORM's MySQL dialector writes it as ON DUPLICATE KEY
// UPDATE pk=pk (rewriting the clause to assignments of each column to
// itself before the statement runs), which with clientFoundRows=true counts
// a row that existed as affected: the count cannot tell an insert from a
// skip.
func mysqlDoNothing(db *gorm.DB) bool {
	c, ok := db.Statement.Clauses["ON CONFLICT"]
	if !ok {
		return false
	}
	oc, ok := c.Expression.(clause.OnConflict)
	if !ok || oc.UpdateAll {
		return false
	}
	if oc.DoNothing {
		return true
	}
	for _, a := range oc.DoUpdates {
		if col, ok := a.Value.(clause.Column); !ok || col.Name != a.Column.Name || col.Table != a.Column.Table {
			return false
		}
	}
	return len(oc.DoUpdates) > 0
}

// rowsUnknown returns an error wrapping [ErrAmbiguousWrite] when the plugin
// cannot tell which of the statement's models its row count covers, and
// nil when it changed all of them. The caller has already handled a
// statement that changed no row.
func (p *Plugin) rowsUnknown(db *gorm.DB, create bool) error {
	if create && p.dialect == sqlstore.MySQL && mysqlDoNothing(db) {
		return fmt.Errorf("%w: on MySQL a Create with ON CONFLICT DO NOTHING counts rows that existed as written; use clause.Insert{Modifier: \"IGNORE\"} instead", ErrAmbiguousWrite)
	}
	if n, ra := models(db), db.Statement.RowsAffected; ra < int64(n) {
		verb := "changed"
		if create {
			verb = "inserted"
		}
		return fmt.Errorf("%w: the statement %s %d rows of its %d models, and the plugin cannot tell which; save them one at a time", ErrAmbiguousWrite, verb, ra, n)
	}
	return nil
}

// recoverInto turns a panic in event code (a typed-nil event, a Validate,
// MarshalJSON, AggregateType or AggregateID method that panics) into the
// statement's error: a [*WriteError] wrapping a [*PanicError]. The failed
// statement then rolls back like any failed save — GORM rolls back its own
// transaction, the plugin its own, the application's db.Transaction returns
// the error — instead of unwinding past GORM with the transaction still open
// and the aggregate's row locked. It must be called deferred.
func recoverInto(db *gorm.DB) {
	if r := recover(); r != nil {
		_ = db.AddError(&WriteError{Err: newPanicError(r)})
	}
}

// write inserts the pending events of the statement's aggregates.
func (p *Plugin) write(db *gorm.DB, needRows bool) {
	if db.Error != nil || skipsHooks(db) || db.DryRun {
		return
	}
	if db.Statement.RowsAffected == 0 {
		// An update or delete that matched nothing, or a create that
		// inserted nothing (ON CONFLICT DO NOTHING, INSERT IGNORE), changed
		// no state; its events stay pending rather than describe a change
		// that did not happen.
		return
	}
	// As recoverInto, naming the aggregate being encoded.
	var aggType, aggID string
	defer func() {
		if r := recover(); r != nil {
			_ = db.AddError(&WriteError{AggregateType: aggType, AggregateID: aggID, Err: newPanicError(r)})
		}
	}()
	srcs := sources(db)
	if len(srcs) == 0 {
		return
	}
	if err := p.rowsUnknown(db, !needRows); err != nil {
		_ = db.AddError(&WriteError{Err: err})
		return
	}
	ctx := db.Statement.Context
	headers, custom := p.headers(ctx)
	var (
		rows   []sqlstore.Row
		states []*runtime.RecorderState // the recorder of rows[i]
	)
	var fresh map[uintptr]bool
	if !needRows {
		fresh = newAggregates(db)
	}
	for _, s := range srcs {
		var (
			err    error
			fromPK bool
		)
		aggType, aggID = "", "" // not the previous aggregate's, if AggregateID panics
		aggType, aggID, fromPK, err = p.aggregate(db, s.value)
		if err != nil {
			_ = db.AddError(&WriteError{AggregateType: aggType, Err: err})
			return
		}
		// A model whose key the database generated in this statement, and
		// whose aggregate id is that key, is a new aggregate.
		newAgg := fromPK && fresh[s.value.Addr().Pointer()]
		for _, r := range s.state.Pending() {
			env, err := runtime.NewEnvelope(ctx, r.ID, r.Event, aggType, aggID)
			if err != nil {
				_ = db.AddError(&WriteError{AggregateType: aggType, AggregateID: aggID, Err: err})
				return
			}
			if custom {
				env.Headers = headers
			}
			rows = append(rows, sqlstore.Row{Envelope: env, Topic: p.topic(env), NewAggregate: newAgg})
			states = append(states, s.state)
		}
	}
	aggType, aggID = "", ""
	conn := db.Statement.ConnPool
	inserted, err := p.insert(ctx, p.dialect, conn, rows)
	if err != nil {
		_ = db.AddError(&WriteError{Err: err})
		return
	}
	p.afterInsert(conn, rows, states, inserted)
}

// afterInsert notes the events of an insert through conn for confirmation.
//
// In a tracked transaction, each event is noted on it and confirmed when it
// commits; an event that already had a row and was not written earlier in
// this transaction is confirmed at once, since that row can only be visible
// because the transaction that wrote it committed. Outside a transaction
// (autocommit) the rows are committed already. In a transaction the plugin
// does not track (a session derived before the plugin was registered), the
// events stay pending: a later save finds their rows.
func (p *Plugin) afterInsert(conn gorm.ConnPool, rows []sqlstore.Row, states []*runtime.RecorderState, inserted map[uuid.UUID]bool) {
	tt := trackedOf(conn)
	if tt == nil {
		if _, inTx := conn.(gorm.TxCommitter); inTx {
			return
		}
		byState := make([]txWrite, 0, len(rows))
		for i, r := range rows {
			byState = append(byState, txWrite{state: states[i], id: r.Envelope.EventID, row: inserted[r.Envelope.EventID]})
		}
		p.committed(byState, len(inserted) > 0)
		return
	}
	for i, r := range rows {
		id := r.Envelope.EventID
		switch {
		case inserted[id]:
			tt.noteWrite(states[i], id, true)
		case tt.wrote(id):
			tt.noteWrite(states[i], id, false)
		case states[i] != nil:
			states[i].Confirm(id)
		}
	}
}

// headers returns the headers of the events written under ctx when
// Config.Headers is set, computed once per statement, and false otherwise:
// then runtime.NewEnvelope's own headers (the context's) are the headers.
func (p *Plugin) headers(ctx context.Context) (map[string]string, bool) {
	if p.cfg.Headers == nil {
		return nil, false
	}
	h := runtime.HeadersFromContext(ctx)
	if h == nil {
		h = make(map[string]string)
	}
	p.cfg.Headers(ctx, h)
	if len(h) == 0 {
		h = nil
	}
	return h, true
}

func (p *Plugin) topic(env runtime.Envelope) string {
	if p.cfg.Topic != nil {
		if t := p.cfg.Topic(env); t != "" {
			return t
		}
	}
	return env.AggregateType
}

// aggregate derives the aggregate type and id of a model value, and
// reports whether the id is the model's primary key.
func (p *Plugin) aggregate(db *gorm.DB, v reflect.Value) (aggType, aggID string, fromPK bool, err error) {
	model := v.Addr().Interface()
	sch, err := p.schemaOf(db, v)
	if err != nil {
		return "", "", false, err
	}
	if t, ok := model.(AggregateTyper); ok {
		aggType = t.AggregateType()
	}
	if aggType == "" {
		aggType = p.typeName(sch, v.Type())
	}
	if i, ok := model.(AggregateIDer); ok {
		if id := i.AggregateID(); id != "" {
			return aggType, id, false, nil
		}
	}
	if sch == nil || len(sch.PrimaryFields) == 0 {
		return aggType, "", false, fmt.Errorf("%w: %s has no primary key; implement AggregateID", ErrNoAggregateID, v.Type())
	}
	parts := make([]string, 0, len(sch.PrimaryFields))
	for _, f := range sch.PrimaryFields {
		val, zero := f.ValueOf(db.Statement.Context, v)
		if zero {
			return aggType, "", false, fmt.Errorf("%w: %s.%s is zero", ErrNoAggregateID, v.Type(), f.Name)
		}
		parts = append(parts, keyString(val))
	}
	if len(parts) == 1 {
		return aggType, parts[0], true, nil
	}
	return aggType, strings.Join(parts, ":"), true, nil
}

// keyString formats a primary key value as fmt.Sprint does, without its
// reflection for the usual key types.
func keyString(v any) string {
	switch k := v.(type) {
	case int64:
		return strconv.FormatInt(k, 10)
	case int:
		return strconv.Itoa(k)
	case int32:
		return strconv.FormatInt(int64(k), 10)
	case uint64:
		return strconv.FormatUint(k, 10)
	case uint:
		return strconv.FormatUint(uint64(k), 10)
	case uint32:
		return strconv.FormatUint(uint64(k), 10)
	case string:
		return k
	}
	return fmt.Sprint(v)
}

// typeName is the default aggregate type of models of type t: the GORM
// schema name (or the type's) in snake_case, computed once per type.
func (p *Plugin) typeName(sch *schema.Schema, t reflect.Type) string {
	if n, ok := p.typeNames.Load(t); ok {
		return n.(string)
	}
	n := ""
	if sch != nil {
		n = schema.NamingStrategy{}.ColumnName("", sch.Name)
	}
	if n == "" {
		n = schema.NamingStrategy{}.ColumnName("", t.Name())
	}
	p.typeNames.Store(t, n)
	return n
}

func (p *Plugin) schemaOf(db *gorm.DB, v reflect.Value) (*schema.Schema, error) {
	if s := db.Statement.Schema; s != nil && s.ModelType == v.Type() {
		return s, nil
	}
	if s, ok := p.schemas.Load(v.Type()); ok {
		return s.(*schema.Schema), nil
	}
	s, err := schema.Parse(v.Addr().Interface(), &sync.Map{}, db.NamingStrategy)
	if err != nil {
		return nil, fmt.Errorf("hooks: parse model %s: %w", v.Type(), err)
	}
	p.schemas.Store(v.Type(), s)
	return s, nil
}

// Enqueue writes events that are not recorded on a saved model (for example a
// process-level event) to the outbox through tx, so they commit or roll back
// with tx's transaction. Pass the *gorm.DB of db.Transaction or db.Begin; a
// plain *gorm.DB writes them in one statement of their own. Each event gets
// a new event id, which Enqueue returns in order. The plugin need not be
// registered with tx's database for Enqueue to work.
func (p *Plugin) Enqueue(tx *gorm.DB, aggregateType, aggregateID string, events ...runtime.Event) (ids []uuid.UUID, err error) {
	defer func() {
		if r := recover(); r != nil {
			ids, err = nil, &WriteError{AggregateType: aggregateType, AggregateID: aggregateID, Err: newPanicError(r)}
		}
	}()
	ctx := tx.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	headers, custom := p.headers(ctx)
	rows := make([]sqlstore.Row, 0, len(events))
	ids = make([]uuid.UUID, 0, len(events))
	for _, e := range events {
		env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(), e, aggregateType, aggregateID)
		if err != nil {
			return nil, &WriteError{AggregateType: aggregateType, AggregateID: aggregateID, Err: err}
		}
		if custom {
			env.Headers = headers
		}
		rows = append(rows, sqlstore.Row{Envelope: env, Topic: p.topic(env)})
		ids = append(ids, env.EventID)
	}
	d, err := sqlstore.ParseDialect(tx.Dialector.Name())
	if err != nil {
		return nil, err
	}
	conn := tx.Statement.ConnPool
	if conn == nil {
		conn = tx.ConnPool
	}
	inserted, err := p.insert(ctx, d, conn, rows)
	if err != nil {
		return nil, &WriteError{AggregateType: aggregateType, AggregateID: aggregateID, Err: err}
	}
	p.afterInsert(conn, rows, make([]*runtime.RecorderState, len(rows)), inserted)
	return ids, nil
}

// insert writes rows through conn, skipping event ids that already have a
// row, and reports which ids it inserted; the [sqlstore.Writer] of dialect
// d keeps an aggregate's ids in commit order (see "Commit order" in the
// package documentation) and refuses, before writing any, an event larger
// than MaxEventBytes.
func (p *Plugin) insert(ctx context.Context, d sqlstore.Dialect, conn gorm.ConnPool, rows []sqlstore.Row) (map[uuid.UUID]bool, error) {
	w, err := p.writer(d)
	if err != nil {
		return nil, err
	}
	return w.Write(ctx, databasesql.Executor(conn), rows)
}

// writer returns the writer of the plugin's table in dialect d.
func (p *Plugin) writer(d sqlstore.Dialect) (*sqlstore.Writer, error) {
	if w, ok := p.writers.Load(d); ok {
		return w.(*sqlstore.Writer), nil
	}
	w, err := sqlstore.NewWriter(d, p.cfg.Table, sqlstore.WriterConfig{SkipOrderLocks: p.noOrderLocks, MaxEventBytes: p.cfg.MaxEventBytes, ValidateTopic: p.cfg.ValidateTopic, LogicalMessages: p.cfg.LogicalMessages})
	if err != nil {
		return nil, err
	}
	p.writers.Store(d, w)
	return w, nil
}
