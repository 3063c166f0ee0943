package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The loaded mode (-load loaded or both) runs the sections while a second
// process of this program (-burn) shares the machine and the database the
// way other work does on a busy host: -load-cpu goroutines spinning on the
// CPU and -load-db connections committing small transactions as fast as
// they can (an UPDATE of a random row of 100,000 and an INSERT, pgbench's
// "simple update" shape) in a schema of their own. It is a separate
// process so that the operating system, not the Go scheduler of the
// measured process, shares the CPU out, as with any other program.

// loadConfig says how much load the burner adds.
type loadConfig struct {
	cpu int // spinning goroutines
	db  int // database connections committing in a loop
}

func (l loadConfig) String() string {
	return fmt.Sprintf("%d spinning goroutine(s) and %d connection(s) committing pgbench-style transactions, in a second process", l.cpu, l.db)
}

// startLoad starts the burner on dsn and returns its stop function, which
// ends it and returns the transactions per second its database load
// committed.
func startLoad(ctx context.Context, dsn string, l loadConfig) (stop func() (float64, error), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, "-burn", "-database-url", dsn,
		"-load-cpu", strconv.Itoa(l.cpu), "-load-db", strconv.Itoa(l.db))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // closing it ends the burner, also when this process dies
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("load: start the burner: %w", err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		stdin.Close()
		return nil, errors.Join(fmt.Errorf("load: the burner did not start"), cmd.Wait())
	}
	return func() (float64, error) {
		stdin.Close()
		var rate float64
		if lines.Scan() {
			rate, _ = strconv.ParseFloat(strings.TrimSpace(lines.Text()), 64)
		}
		return rate, cmd.Wait()
	}, nil
}

// burn is the burner process: it loads the CPU and the database until its
// standard input closes, then prints the committed transactions per second.
func burn(ctx context.Context, dsn string, l loadConfig, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(l.db + 1)
	db.SetMaxIdleConns(l.db + 1)
	schema := fmt.Sprintf("relaybench_load_%d", os.Getpid())
	for _, q := range []string{
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + schema + `.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0, filler char(84) NOT NULL DEFAULT '')`,
		`INSERT INTO ` + schema + `.accounts (id) SELECT generate_series(1, 100000)`,
		`CREATE TABLE ` + schema + `.history (id bigserial PRIMARY KEY, account int NOT NULL, delta int NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
		`VACUUM ANALYZE ` + schema + `.accounts`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("burner: %s: %w", q, err)
		}
	}
	defer db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) //nolint:errcheck // best effort on the way out

	var wg sync.WaitGroup
	var stopSpin atomic.Bool
	for range l.cpu {
		wg.Go(func() {
			x := uint64(1)
			for !stopSpin.Load() {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			_ = x
		})
	}
	var commits atomic.Int64
	for range l.db {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := loadTx(ctx, db, schema); err == nil {
					commits.Add(1)
				}
			}
		})
	}
	fmt.Fprintln(out, "ready")
	start := time.Now()
	<-ctx.Done()
	elapsed := time.Since(start)
	stopSpin.Store(true)
	wg.Wait()
	fmt.Fprintf(out, "%.0f\n", float64(commits.Load())/elapsed.Seconds())
	return nil
}

// loadTx commits one pgbench-style transaction.
func loadTx(ctx context.Context, db *sql.DB, schema string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	acct, delta := 1+rand.IntN(100000), rand.IntN(10000)-5000
	if _, err := tx.ExecContext(ctx, `UPDATE `+schema+`.accounts SET balance = balance + $1 WHERE id = $2`, delta, acct); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+schema+`.history (account, delta) VALUES ($1, $2)`, acct, delta); err != nil {
		return err
	}
	return tx.Commit()
}

// defaultLoad is the load of -load loaded: one core's worth of spinning
// (half of this 2-core machine) and 4 committing connections.
func defaultLoad() loadConfig { return loadConfig{cpu: max(1, goruntime.NumCPU()/2), db: 4} }
