package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// envPGBin names the directory of PostgreSQL's server programs (initdb,
// pg_ctl) for TestPostgresRestart; by default the newest of
// /usr/lib/postgresql/*/bin, or pg_config --bindir.
const envPGBin = "OUTBOX_TEST_PG_BINDIR"

// TestPostgresRestart restarts PostgreSQL under a CDC relay, fast and then
// immediate (a crash: the slot's position comes back from the last
// checkpoint), while writers commit events of several aggregates, each
// with a ledger row in the same transaction. Every committed event
// reaches the broker, nothing that did not commit does, and each
// aggregate's events are first published in commit order; the repeats are
// the slot's unconfirmed tail. It runs a PostgreSQL of its own (initdb in
// a temporary directory, as the postgres user when run as root), so that
// restarting it disturbs no other test.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	forEachMode(t, testPostgresRestart)
}

func testPostgresRestart(t *testing.T, mode pgcdc.Mode) {
	ctx := context.Background()
	pg := startCluster(t)
	pool, err := pgxpool.New(ctx, pg.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := sqlstore.Migrate(ctx, pgxv5.New(pool), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (event_id uuid PRIMARY KEY, aggregate_id text NOT NULL, seq int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	e := &env{dsn: pg.dsn, pool: pool, cfg: pgcdc.Config{
		ConnString: pg.dsn, Mode: mode, StatusInterval: 200 * time.Millisecond,
		RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond, Logger: testLogger(t),
	}}
	store := e.open(t)
	pub := &broker{}
	runRelay(t, store, pub)

	// Writers: one per aggregate, so that each aggregate's commit order is
	// its sequence. A commit whose outcome the client cannot know (the
	// server went away during it) is settled by the ledger.
	const aggregates = 4
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	attempted := 0
	for a := range aggregates {
		wg.Go(func() {
			agg := fmt.Sprint("r", a)
			for n := 0; wctx.Err() == nil; {
				ev := event(agg, n)
				if err := writeWithLedger(wctx, e, pool, ev, n); err == nil {
					n++
				} else if known, ok := committed(pool, ev); ok && known {
					n++ // the commit made it after all
				} else {
					time.Sleep(20 * time.Millisecond) // the server is away: try again shortly
				}
				mu.Lock()
				attempted++
				mu.Unlock()
			}
		})
	}
	progress := func(what string) {
		t.Helper()
		var n int
		until(t, what, func() bool {
			mu.Lock()
			before := attempted
			mu.Unlock()
			return pool.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&n) == nil && n > 0 && len(pub.ids()) > 0 && before > 0
		})
	}
	progress("events committed and published before the restarts")
	for _, how := range []string{"fast", "immediate"} {
		before := len(pub.ids())
		pg.ctl(t, "restart", "-m", how)
		until(t, "publishing again after a "+how+" restart", func() bool { return len(pub.ids()) > before+aggregates })
	}
	stopWriters()
	wg.Wait()

	// Every committed event published, none other, first publishes in
	// order per aggregate.
	type row struct {
		agg string
		seq int
	}
	want := map[string]row{}
	until(t, "the ledger read", func() bool {
		rows, err := pool.Query(ctx, `SELECT event_id::text, aggregate_id, seq FROM ledger`)
		if err != nil {
			return false
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var r row
			if rows.Scan(&id, &r.agg, &r.seq) != nil {
				return false
			}
			want[id] = r
		}
		return rows.Err() == nil
	})
	until(t, "every committed event published", func() bool {
		seen := map[string]bool{}
		for _, id := range pub.ids() {
			seen[id] = true
		}
		for id := range want {
			if !seen[id] {
				return false
			}
		}
		return true
	})
	last := map[string]int{}
	first := map[string]bool{}
	ids := pub.ids()
	for _, id := range ids {
		r, ok := want[id]
		if !ok {
			t.Fatalf("event %s published but never committed", id)
		}
		if first[id] {
			continue // a repeat of the unconfirmed tail
		}
		first[id] = true
		if prev, ok := last[r.agg]; ok && r.seq != prev+1 {
			t.Fatalf("aggregate %s: event %d first published after event %d", r.agg, r.seq, prev)
		}
		last[r.agg] = r.seq
	}
	if mode == pgcdc.Table {
		var pending int
		until(t, "every row marked published", func() bool {
			return pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages WHERE published_at IS NULL`).Scan(&pending) == nil && pending == 0
		})
	}
	t.Logf("%s mode: %d events committed, %d publishes (%d repeats) across a fast and an immediate restart", mode, len(want), len(ids), len(ids)-len(want))
}

// writeWithLedger writes ev (the n-th of its aggregate) and its ledger row
// in one transaction.
func writeWithLedger(ctx context.Context, e *env, pool *pgxpool.Pool, ev runtime.Envelope, n int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	cfg := sqlstore.WriterConfig{}
	if e.cfg.Mode == pgcdc.Messages {
		cfg.LogicalMessages = e.cfg.WithDefaults().MessagePrefix
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", cfg)
	if err != nil {
		return err
	}
	if _, err := w.Write(ctx, pgxv5.Executor(tx), []sqlstore.Row{{Envelope: ev, Topic: "orders"}}); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ledger (event_id, aggregate_id, seq) VALUES ($1, $2, $3)`, ev.EventID, ev.AggregateID, n); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// committed reports, once the server answers (up to 30s), whether ev's
// ledger row exists; ok is false when the server did not answer.
func committed(pool *pgxpool.Pool, ev runtime.Envelope) (known, ok bool) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE event_id = $1`, ev.EventID).Scan(&n)
		cancel()
		if err == nil {
			return n == 1, true
		}
		time.Sleep(50 * time.Millisecond) // polling until the server is back
	}
	return false, false
}

// cluster is a PostgreSQL server of a test's own.
type cluster struct {
	bin, dir, dsn string
	asPostgres    bool // run the server's programs as the postgres user (the test runs as root)
}

// startCluster initdbs and starts a PostgreSQL with wal_level = logical on
// a free port, stopped when the test ends. Without the server's programs
// the test is skipped, or fails when integration is required.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin, err := serverBin()
	if err != nil {
		runtimetest.Unavailable(t, "PostgreSQL's server programs (initdb, pg_ctl) to run a server of the test's own", "/usr/lib/postgresql/*/bin", envPGBin, err)
	}
	c := &cluster{bin: bin, dir: t.TempDir(), asPostgres: os.Geteuid() == 0}
	if c.asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the server must run as the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		// The temporary directory's parents must let postgres in.
		for d := c.dir; d != filepath.Clean(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(c.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	data := filepath.Join(c.dir, "data")
	c.run(t, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_wal_senders=8 -c max_replication_slots=8 -c fsync=off", port, c.dir)
	c.run(t, "pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(c.dir, "log"), "-w", "start")
	t.Cleanup(func() {
		cmd := c.cmd("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("stop the test's PostgreSQL: %v\n%s", err, out)
		}
	})
	c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return c
}

// ctl runs pg_ctl on the cluster's data directory.
func (c *cluster) ctl(t *testing.T, args ...string) {
	t.Helper()
	// With the log file again: a server started without one writes to
	// pg_ctl's output, which would then never close.
	c.run(t, "pg_ctl", append([]string{"-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "log"), "-w"}, args...)...)
}

func (c *cluster) cmd(prog string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, prog)
	if c.asPostgres {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (c *cluster) run(t *testing.T, prog string, args ...string) {
	t.Helper()
	out, err := c.cmd(prog, args...).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		t.Fatalf("%s %s: %v\n%s\nserver log:\n%s", prog, strings.Join(args, " "), err, out, log)
	}
}

// serverBin finds the directory of initdb and pg_ctl.
func serverBin() (string, error) {
	if d := os.Getenv(envPGBin); d != "" {
		return d, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no initdb in $" + envPGBin + ", pg_config --bindir or /usr/lib/postgresql/*/bin")
}
