package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	_ "github.com/glebarez/go-sqlite" // the "sqlite" database/sql driver
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// database is an open database and the outbox store on it.
type database struct {
	db      *sql.DB
	dialect sqlstore.Dialect
	store   *sqlstore.Store
	table   string
}

// Close closes the store (releasing any relay leases) and the database.
func (d *database) Close() error {
	err := d.store.Close()
	if cerr := d.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// errUnreachable is wrapped by the error of a database or broker that did
// not answer: the relay command retries it at start, the others fail.
var errUnreachable = errors.New("unreachable")

// unreachable reports whether err, a failed connection to a database, is
// its server not answering, or not yet: a network error (a connection
// refused or reset, a timeout, a name that does not resolve), or a server
// starting, shutting down or full. An answer that will not change by
// itself (a database that does not exist, a password or user refused, a
// certificate, any other error) is not: trying again would fail again.
func unreachable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "57P01", "57P02", "57P03", "53300": // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
			return true
		}
		return false // 3D000 invalid_catalog_name, 28000, 28P01 (authentication), ...
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1040 || my.Number == 1053 // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN; not 1049, 1045, ...
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, mysql.ErrInvalidConn)
}

// openDatabase opens fs.db and a store on its outbox table, and checks
// that the database answers.
func openDatabase(ctx context.Context, fs *flagSet, cfg sqlstore.StoreConfig) (*database, error) {
	if fs.db == "" {
		return nil, usagef("no database: give --db URL or set OUTBOX_DATABASE_URL")
	}
	raw := fs.db
	if fs.mysqlDeadlines > 0 {
		raw = withMySQLDeadlines(raw, fs.mysqlDeadlines)
	}
	driver, dsn, dialect, err := parseDatabaseURL(raw)
	if err != nil {
		return nil, err
	}
	if dialect == sqlstore.SQLite && !fs.createDB {
		// SQLite creates a missing file on open: a typo in the path would
		// show an empty outbox (status) or relay nothing, and leave a
		// stray file behind. Only migrate creates one.
		path := sqlitePath(dsn)
		if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
			return nil, fmt.Errorf("sqlite database %s does not exist (check the path, or create it with outbox migrate): %w", path, err)
		}
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", dialect, err)
	}
	if dialect == sqlstore.SQLite {
		db.SetMaxOpenConns(4) // one writer at a time anyway
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		if unreachable(err) {
			err = fmt.Errorf("%w: %w", errUnreachable, err)
		}
		return nil, fmt.Errorf("connect to the %s database %s: %w", dialect, redactURL(fs.db), err)
	}
	cfg.Dialect, cfg.Table = dialect, fs.table
	store, err := sqlstore.NewStore(databasesql.New(db), cfg)
	if err != nil {
		db.Close()
		return nil, usageError{err.Error()}
	}
	table := fs.table
	if table == "" {
		table = sqlstore.DefaultTable
	}
	return &database{db: db, dialect: dialect, store: store, table: table}, nil
}

// parseDatabaseURL returns the driver, its data source name and the
// dialect of a database URL:
//
//	postgres://user:pass@host:5432/db?sslmode=disable  (postgresql:// too)
//	mysql://user:pass@host:3306/db?tls=true            (MySQL 8, MariaDB)
//	sqlite:path/to/file.db, sqlite:///abs/file.db, file:path.db
func parseDatabaseURL(raw string) (driver, dsn string, d sqlstore.Dialect, err error) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return "", "", "", usagef("database URL %q has no scheme (postgres://, mysql://, sqlite:)", redactURL(raw))
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return "pgx", raw, sqlstore.Postgres, nil
	case "mysql", "mariadb":
		dsn, err := mysqlDSN(raw)
		return "mysql", dsn, sqlstore.MySQL, err
	case "sqlite", "sqlite3", "file":
		path, query, _ := strings.Cut(strings.TrimPrefix(rest, "//"), "?")
		if path == "" {
			return "", "", "", usagef("sqlite URL %q names no file", raw)
		}
		// WAL and a busy timeout, as the application's own pool should
		// have: the command writes beside the application.
		dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"
		if query != "" {
			dsn += "&" + query
		}
		return "sqlite", dsn, sqlstore.SQLite, nil
	}
	return "", "", "", usagef("unsupported database URL scheme %q (postgres://, mysql://, sqlite:)", scheme)
}

// sqlitePath returns the file of a DSN parseDatabaseURL made for SQLite.
func sqlitePath(dsn string) string {
	path, _, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
	return path
}

// mysqlDSN turns mysql://user:pass@host:port/db?params into
// go-sql-driver/mysql's DSN, with parseTime=true (which the store needs)
// and the URL's parameters passed on.
func mysqlDSN(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", usagef("mysql URL: %v", err)
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "3306")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		return "", usagef("mysql URL %s names no database", u.Redacted())
	}
	q := u.Query()
	q.Set("parseTime", "true")
	cfg, err := mysql.ParseDSN("tcp(" + host + ")/" + db + "?" + q.Encode())
	if err != nil {
		return "", usagef("mysql URL %s: %v", u.Redacted(), err)
	}
	// Set apart, so that a password may hold any character.
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg.FormatDSN(), nil
}

// withMySQLDeadlines returns the database URL raw with readTimeout and
// writeTimeout set to d where it is a mysql:// or mariadb:// URL that sets
// neither, and raw unchanged otherwise. A relay needs them there:
// go-sql-driver/mysql's COMMIT and ROLLBACK take no context, so without a
// read deadline a relay whose connection turned half-open inside a
// transaction waits for TCP to give up (many minutes) instead of its
// StoreTimeout.
func withMySQLDeadlines(raw string, d time.Duration) string {
	if _, _, d, err := parseDatabaseURL(raw); err != nil || d != sqlstore.MySQL {
		return raw // not MySQL, or an error openDatabase reports
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	for _, k := range []string{"readTimeout", "writeTimeout"} {
		if !q.Has(k) {
			q.Set(k, d.String())
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// redactURL hides a URL's password, as [url.URL.Redacted] does, also in
// a URL that does not parse.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, path, slash := strings.Cut(rest, "/")
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(authority[:at], ":")
	if !hasPass {
		return raw
	}
	out := scheme + "://" + user + ":xxxxx" + authority[at:]
	if slash {
		out += "/" + path
	}
	return out
}
