package pgcdc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestClassify: the server's refusals that need an operator map to their
// sentinel errors, keep the server's error, and name the fix.
func TestClassify(t *testing.T) {
	cfg := &Config{Slot: "outbox_messages_cdc"}
	for _, c := range []struct {
		err  *pgconn.PgError
		want error
		fix  string
	}{
		{&pgconn.PgError{Code: "55000", Message: "logical decoding requires wal_level >= logical"}, ErrWALLevel, "ALTER SYSTEM SET wal_level = logical"},
		{&pgconn.PgError{Code: "28000", Message: "must be superuser or replication role to start walsender"}, ErrReplicationRole, "ALTER ROLE"},
		{&pgconn.PgError{Code: "42501", Message: "permission denied to start WAL sender"}, ErrReplicationRole, "ALTER ROLE"},
		{&pgconn.PgError{Code: "55006", Message: `replication slot "outbox_messages_cdc" is active for PID 42`}, ErrSlotActive, "stands by"},
		{&pgconn.PgError{Code: "55000", Message: `can no longer get changes from replication slot "outbox_messages_cdc"`, Detail: "This slot has been invalidated because it exceeded the maximum reserved size."}, ErrSlotInvalidated, "outbox cdc setup"},
		{&pgconn.PgError{Code: "42704", Message: `replication slot "outbox_messages_cdc" does not exist`}, ErrNoSlot, "pgcdc.Setup"},
	} {
		err := classify(fmt.Errorf("pgcdc: stream: %w", c.err), cfg)
		var pgErr *pgconn.PgError
		if !errors.Is(err, c.want) || !errors.As(err, &pgErr) || !strings.Contains(err.Error(), c.fix) {
			t.Errorf("classify(%s %q) = %v, want %v wrapping the server's error and naming %q", c.err.Code, c.err.Message, err, c.want, c.fix)
		}
	}
	other := errors.New("connection reset")
	if got := classify(other, cfg); got != other {
		t.Errorf("classify(%v) = %v, want it unchanged", other, got)
	}
}
