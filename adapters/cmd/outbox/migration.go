package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// migration is what `outbox migrate --print` or `--out` writes.
type migration struct {
	print            bool
	out, format      string
	dialect, version string
	inbox            bool
	inboxTable       string
	deadLetters      bool
	deadLetterTable  string
	partitioned      bool
}

// writeMigration prints the schema's statements, or writes them as the
// files of a migration tool, without opening the database.
func writeMigration(e *env, fs *flagSet, m migration) error {
	if m.print && m.out != "" {
		return usagef("--print and --out: choose one")
	}
	if m.partitioned {
		return &flagError{Flag: "--partition-interval", Value: "", Want: "left out with --print and --out: a partitioned outbox's partitions are made at run time, so run outbox migrate against the database instead"}
	}
	d, err := migrationDialect(fs.db, m.dialect)
	if err != nil {
		return err
	}
	s := sqlstore.Schema{Dialect: d, Outbox: true, OutboxTable: fs.table, Inbox: m.inbox, InboxTable: m.inboxTable,
		DeadLetters: m.deadLetters, DeadLetterTable: m.deadLetterTable}
	up, err := s.DDL()
	if err != nil {
		return err
	}
	down, err := s.DropDDL()
	if err != nil {
		return err
	}
	if m.print {
		switch m.format {
		case "", "sql":
			_, err := fmt.Fprint(e.stdout, sqlFile(up))
			return err
		case "goose":
			_, err := fmt.Fprint(e.stdout, gooseFile(up, down))
			return err
		}
		return &flagError{Flag: "--format", Value: m.format, Want: "sql or goose with --print"}
	}
	version := m.version
	if version == "" {
		version = time.Now().UTC().Format("20060102150405")
	}
	if strings.ContainsAny(version, `/\_ `) || version == "" {
		return &flagError{Flag: "--version", Value: version, Want: "a version without /, \\, _ or spaces, such as 20061202150405 or 000001"}
	}
	files := map[string]string{}
	switch m.format {
	case "", "goose":
		files[version+"_gooutbox.sql"] = gooseFile(up, down)
	case "golang-migrate":
		files[version+"_gooutbox.up.sql"] = sqlFile(up)
		files[version+"_gooutbox.down.sql"] = sqlFile(down)
	default:
		return &flagError{Flag: "--format", Value: m.format, Want: "goose or golang-migrate with --out"}
	}
	if err := os.MkdirAll(m.out, 0o755); err != nil {
		return err
	}
	var written []string
	for name, text := range files {
		path := filepath.Join(m.out, name)
		// O_EXCL: a migration once written is not rewritten in place.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("migration file: %w", err)
		}
		_, werr := f.WriteString(text)
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("migration file %s: %w", path, werr)
		}
		written = append(written, path)
	}
	if fs.json {
		return writeJSON(e.stdout, map[string]any{"files": written})
	}
	for _, p := range written {
		fmt.Fprintf(e.stdout, "wrote %s\n", p)
	}
	return nil
}

// migrationDialect is the dialect of the --db URL, or --dialect.
func migrationDialect(dbURL, name string) (sqlstore.Dialect, error) {
	switch {
	case name != "" && dbURL != "":
		return "", usagef("--db and --dialect: give one (--print and --out open nothing)")
	case name != "":
		d, err := sqlstore.ParseDialect(name)
		if err != nil {
			return "", &flagError{Flag: "--dialect", Value: name, Want: "postgres, mysql or sqlite"}
		}
		return d, nil
	case dbURL != "":
		_, _, d, err := parseDatabaseURL(dbURL)
		return d, err
	}
	return "", usagef("--print and --out need the dialect: --db URL or --dialect postgres|mysql|sqlite")
}

// sqlFile is stmts as a SQL script, each ended by a semicolon.
func sqlFile(stmts []string) string {
	var b strings.Builder
	b.WriteString("-- Written by outbox migrate (github.com/gooutbox/outbox).\n")
	for _, q := range stmts {
		b.WriteString("\n" + q + ";\n")
	}
	return b.String()
}

// gooseFile is a goose migration: up and down, each statement between
// StatementBegin and StatementEnd (PostgreSQL's DO blocks hold
// semicolons).
func gooseFile(up, down []string) string {
	var b strings.Builder
	b.WriteString("-- Written by outbox migrate (github.com/gooutbox/outbox).\n\n-- +goose Up\n")
	for _, q := range up {
		b.WriteString("-- +goose StatementBegin\n" + q + ";\n-- +goose StatementEnd\n")
	}
	b.WriteString("\n-- +goose Down\n")
	for _, q := range down {
		b.WriteString("-- +goose StatementBegin\n" + q + ";\n-- +goose StatementEnd\n")
	}
	return b.String()
}
