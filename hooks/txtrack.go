package hooks

import (
	"context"
	"database/sql"
	"strings"
	"sync"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
)

// Commit visibility.
//
// GORM callbacks see the statements of a save, not the end of the
// transaction they run in: db.Transaction, db.Begin()...Commit() and nested
// savepoints commit or roll back outside every callback. So that the plugin
// confirms events exactly when they commit, Initialize wraps the database's
// connection pool in a [pool]: every transaction begun through it — GORM's
// implicit one, the application's, the plugin's own — is a [trackedTx],
// whose Commit and Rollback, and the SAVEPOINT / ROLLBACK TO / RELEASE
// statements executed through it, reach the plugin. The events a save
// writes are noted on its trackedTx; a commit confirms them on their
// recorders and calls Config.AfterCommit, a rollback forgets them (they stay
// pending), and a rollback to a savepoint forgets those written after it.

// pool wraps a database's connection pool so that the transactions begun
// through it are tracked. Statements outside a transaction pass through
// untouched.
type pool struct {
	gorm.ConnPool // the wrapped pool (*sql.DB, or what the dialector opened)
	p             *Plugin
}

var (
	_ gorm.ConnPoolBeginner = (*pool)(nil)
	_ gorm.GetDBConnector   = (*pool)(nil)
	_ gorm.Tx               = (*trackedTx)(nil)
	_ gorm.GetDBConnector   = (*trackedTx)(nil)
)

// wrapPool installs a [pool] around db's connection pool. With PrepareStmt,
// GORM's *gorm.PreparedStmtDB stays outermost (GORM type-asserts it to
// bypass statement preparation for savepoints) and the pool goes inside it,
// so that both GORM's prepared statements and its transactions go through
// the pool. A pool that cannot begin transactions is left alone: GORM cannot
// open one on it either.
func (p *Plugin) wrapPool(db *gorm.DB) {
	wrap := func(c gorm.ConnPool) (gorm.ConnPool, bool) {
		switch c.(type) {
		case *pool:
			return c, false
		case gorm.TxBeginner, gorm.ConnPoolBeginner:
			return &pool{ConnPool: c, p: p}, true
		}
		return c, false
	}
	if ps, ok := db.ConnPool.(*gorm.PreparedStmtDB); ok {
		ps.ConnPool, _ = wrap(ps.ConnPool)
		return
	}
	wrapped, ok := wrap(db.ConnPool)
	if !ok {
		return
	}
	if db.Statement != nil && db.Statement.ConnPool == db.ConnPool {
		db.Statement.ConnPool = wrapped
	}
	db.ConnPool = wrapped
}

// BeginTx begins a transaction on the wrapped pool and returns it tracked.
func (c *pool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	var tx gorm.ConnPool
	switch b := c.ConnPool.(type) {
	case gorm.TxBeginner:
		sqlTx, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		tx = sqlTx
	case gorm.ConnPoolBeginner:
		t, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		tx = t
	default:
		return nil, gorm.ErrInvalidTransaction
	}
	return c.p.track(tx, c), nil
}

// GetDBConn returns the *sql.DB under the pool, so that db.DB() keeps
// working.
func (c *pool) GetDBConn() (*sql.DB, error) { return sqlDBOf(c.ConnPool) }

// Ping pings the wrapped pool when it can.
func (c *pool) Ping() error {
	if p, ok := c.ConnPool.(interface{ Ping() error }); ok {
		return p.Ping()
	}
	return nil
}

func sqlDBOf(c gorm.ConnPool) (*sql.DB, error) {
	switch c := c.(type) {
	case *sql.DB:
		return c, nil
	case gorm.GetDBConnector:
		return c.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}

// track returns tx, begun on src, as a *trackedTx of p, or tx itself when it
// is already tracked or is not a transaction GORM can use.
func (p *Plugin) track(tx, src gorm.ConnPool) gorm.ConnPool {
	if trackedOf(tx) != nil {
		return tx
	}
	t, ok := tx.(gorm.Tx)
	if !ok {
		return tx
	}
	return &trackedTx{Tx: t, p: p, src: src}
}

// trackedOf returns the *trackedTx behind conn (directly, or inside GORM's
// prepared-statement transaction), or nil.
func trackedOf(conn gorm.ConnPool) *trackedTx {
	for {
		switch c := conn.(type) {
		case *trackedTx:
			return c
		case *gorm.PreparedStmtTX:
			conn = c.Tx
		default:
			return nil
		}
	}
}

// trackedTx is a transaction begun through a [pool]. It remembers the events
// written in it and the savepoints taken, and on Commit confirms the events
// still written.
type trackedTx struct {
	gorm.Tx
	p   *Plugin
	src gorm.ConnPool // the pool it was begun on

	mu     sync.Mutex
	writes []txWrite   // events written in the transaction, in order
	saves  []savepoint // open savepoints, innermost last
	// unsure is set when a statement may have undone writes without the
	// transaction seeing which: a savepoint statement run as a prepared
	// statement or a query. The commit then confirms nothing (the events
	// stay pending, and a later save finds their committed rows), since
	// confirming a rolled-back event would lose it.
	unsure bool
}

// txWrite is an event written in a transaction; state is nil for rows
// without a recorder (Enqueue).
type txWrite struct {
	state *runtime.RecorderState
	id    uuid.UUID
	row   bool // this write inserted the row
}

// savepoint is an open savepoint and how many writes preceded it.
type savepoint struct {
	name string
	mark int
}

// noteWrite records that the event id of state was written in t; inserted
// says whether this write inserted its row.
func (t *trackedTx) noteWrite(state *runtime.RecorderState, id uuid.UUID, inserted bool) {
	t.mu.Lock()
	t.writes = append(t.writes, txWrite{state: state, id: id, row: inserted})
	t.mu.Unlock()
}

// wrote reports whether event id has a write in t that no rollback undid.
func (t *trackedTx) wrote(id uuid.UUID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.writes {
		if w.id == id {
			return true
		}
	}
	return false
}

// cut forgets the writes from index mark on.
func (t *trackedTx) cut(mark int) {
	clear(t.writes[mark:])
	t.writes = t.writes[:mark]
}

// finish takes the transaction's writes to confirm, reports whether any
// write inserted a row, and resets the transaction's bookkeeping.
func (t *trackedTx) finish() ([]txWrite, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, unsure := t.writes, t.unsure
	t.writes, t.saves, t.unsure = nil, nil, false
	rows := false
	for _, x := range w {
		if x.row {
			rows = true
			break
		}
	}
	if unsure {
		return nil, rows
	}
	return w, rows
}

// Commit commits the transaction and, when it committed, confirms the events
// written in it and calls Config.AfterCommit if it inserted outbox rows.
func (t *trackedTx) Commit() error {
	err := t.Tx.Commit()
	writes, rows := t.finish()
	if err != nil {
		// Rolled back, or unknown (a lost connection): the events stay
		// pending, and a retry finds the committed rows if there are any.
		return err
	}
	t.p.committed(writes, rows)
	return nil
}

// Rollback rolls the transaction back; its events stay pending.
func (t *trackedTx) Rollback() error {
	err := t.Tx.Rollback()
	t.finish()
	return err
}

// ExecContext executes query in the transaction and follows the savepoint
// statements among them (GORM's SavePoint and RollbackTo run through it).
func (t *trackedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := t.Tx.ExecContext(ctx, query, args...)
	if err == nil && len(args) == 0 {
		t.observe(query)
	}
	return res, err
}

// QueryContext runs query in the transaction. A savepoint statement run as a
// query is not followed precisely: it makes the transaction unsure.
func (t *trackedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if txControl(query) != "" {
		t.setUnsure()
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs query in the transaction, like QueryContext.
func (t *trackedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if txControl(query) != "" {
		t.setUnsure()
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares query in the transaction. GORM's PrepareStmt mode
// prepares raw statements once and runs them through StmtContext, out of
// ExecContext's sight: a prepared savepoint statement is remembered so that
// running it makes the transaction unsure.
func (t *trackedTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	stmt, err := t.Tx.PrepareContext(ctx, query)
	if err == nil && txControl(query) != "" {
		t.p.controlStmts.Store(stmt, struct{}{})
	}
	return stmt, err
}

// StmtContext returns stmt bound to the transaction (see PrepareContext).
func (t *trackedTx) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	if _, ok := t.p.controlStmts.Load(stmt); ok {
		t.setUnsure()
	}
	return t.Tx.StmtContext(ctx, stmt)
}

func (t *trackedTx) setUnsure() {
	t.mu.Lock()
	t.unsure = true
	t.mu.Unlock()
}

// txControl returns the upper-cased first word of query when it is a
// transaction-control statement (SAVEPOINT, ROLLBACK, RELEASE, COMMIT, END,
// ABORT), and "" otherwise. It only looks at the first word.
func txControl(query string) string {
	q := strings.TrimLeft(query, " \t\r\n")
	if q == "" {
		return ""
	}
	switch q[0] {
	case 'S', 's', 'R', 'r', 'C', 'c', 'E', 'e', 'A', 'a':
	default:
		return ""
	}
	end := strings.IndexAny(q, " \t\r\n;")
	if end < 0 {
		end = len(q)
	}
	switch w := strings.ToUpper(q[:end]); w {
	case "SAVEPOINT", "ROLLBACK", "RELEASE", "COMMIT", "END", "ABORT":
		return w
	}
	return ""
}

// GetDBConn returns the *sql.DB the transaction belongs to, so that
// db.DB() keeps working inside transactions.
func (t *trackedTx) GetDBConn() (*sql.DB, error) {
	if g, ok := t.Tx.(gorm.GetDBConnector); ok {
		return g.GetDBConn()
	}
	if t.src != nil {
		return sqlDBOf(t.src)
	}
	return nil, gorm.ErrInvalidDB
}

// observe follows a successfully executed transaction-control statement:
// SAVEPOINT name, ROLLBACK TO [SAVEPOINT] name and RELEASE [SAVEPOINT] name
// precisely; a plain ROLLBACK (or ABORT) undoes every write; anything else
// it cannot follow (COMMIT or END run as SQL, a savepoint it never saw)
// makes the transaction unsure.
func (t *trackedTx) observe(query string) {
	word := txControl(query)
	if word == "" {
		return
	}
	f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(query), ";"))
	upper := func(i int) string {
		if i < len(f) {
			return strings.ToUpper(f[i])
		}
		return ""
	}
	var op, name string
	switch upper(0) {
	case "SAVEPOINT":
		if len(f) == 2 {
			op, name = "save", f[1]
		}
	case "ROLLBACK", "ABORT":
		switch {
		case upper(1) == "TO":
			op = "rollback"
			if upper(2) == "SAVEPOINT" && len(f) == 4 {
				name = f[3]
			} else if len(f) == 3 {
				name = f[2]
			}
		case word == "ABORT" || len(f) == 1 || upper(1) == "WORK" || upper(1) == "TRANSACTION":
			// The whole transaction rolled back.
			t.mu.Lock()
			t.cut(0)
			t.saves = nil
			t.mu.Unlock()
			return
		}
	case "RELEASE":
		op = "release"
		if upper(1) == "SAVEPOINT" && len(f) == 3 {
			name = f[2]
		} else if len(f) == 2 {
			name = f[1]
		}
	}
	if op == "" || name == "" {
		t.setUnsure()
		return
	}
	name = savepointName(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	if op == "save" {
		t.saves = append(t.saves, savepoint{name: name, mark: len(t.writes)})
		return
	}
	i := len(t.saves) - 1
	for ; i >= 0 && t.saves[i].name != name; i-- {
	}
	if i < 0 {
		t.unsure = true // a savepoint taken out of sight
		return
	}
	if op == "rollback" {
		// ROLLBACK TO undoes the writes after the savepoint, destroys the
		// savepoints taken after it and keeps it.
		t.cut(t.saves[i].mark)
		t.saves = t.saves[:i+1]
		return
	}
	// RELEASE keeps the writes and destroys the savepoint and those after.
	t.saves = t.saves[:i]
}

// savepointName normalises a savepoint identifier the way SQL compares
// them: a quoted name as written, an unquoted one case-insensitively.
func savepointName(s string) string {
	for _, q := range []string{`"`, "`"} {
		if len(s) >= 2 && strings.HasPrefix(s, q) && strings.HasSuffix(s, q) {
			return s[1 : len(s)-1]
		}
	}
	return strings.ToLower(s)
}

// committed confirms the events of a committed transaction on their
// recorders and calls AfterCommit when the transaction inserted outbox rows.
func (p *Plugin) committed(writes []txWrite, rows bool) {
	var (
		order []*runtime.RecorderState
		ids   map[*runtime.RecorderState][]uuid.UUID
	)
	for _, w := range writes {
		if w.state == nil {
			continue
		}
		if ids == nil {
			ids = make(map[*runtime.RecorderState][]uuid.UUID)
		}
		if _, ok := ids[w.state]; !ok {
			order = append(order, w.state)
		}
		ids[w.state] = append(ids[w.state], w.id)
	}
	for _, st := range order {
		st.Confirm(ids[st]...)
	}
	if rows && p.cfg.AfterCommit != nil {
		p.cfg.AfterCommit()
	}
}
