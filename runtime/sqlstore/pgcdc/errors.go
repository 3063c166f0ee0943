package pgcdc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The errors of the server's refusals that need an operator, each wrapped
// with a message that names the fix. Test with errors.Is.
var (
	// ErrWALLevel: the server's wal_level is not logical, so it keeps no
	// logical decoding information in its WAL.
	ErrWALLevel = errors.New("pgcdc: wal_level is not logical")
	// ErrReplicationRole: the role has neither the REPLICATION attribute
	// nor superuser, so it may not open a replication connection.
	ErrReplicationRole = errors.New("pgcdc: the role may not start replication")
	// ErrSlotActive: another process streams from the slot. A standby
	// store meets it until the active one ends; it is not an error there.
	ErrSlotActive = errors.New("pgcdc: the replication slot is active in another process")
	// ErrSlotInvalidated: the server invalidated the slot because it held
	// more WAL than max_slot_wal_keep_size allows; the events after its
	// position are no longer in the WAL.
	ErrSlotInvalidated = errors.New("pgcdc: the replication slot was invalidated")
	// ErrNoSlot: the slot does not exist (Setup creates it).
	ErrNoSlot = errors.New("pgcdc: the replication slot does not exist")
)

// classify wraps a server error that needs an operator with its sentinel
// and the fix; other errors are returned as they are.
func classify(err error, cfg *Config) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	msg := strings.ToLower(pgErr.Message + " " + pgErr.Detail)
	switch {
	case pgErr.Code == "55000" && strings.Contains(msg, "wal_level"):
		return fmt.Errorf("%w (%w): set it with ALTER SYSTEM SET wal_level = logical and restart PostgreSQL", ErrWALLevel, err)
	case (pgErr.Code == "42501" || pgErr.Code == "28000") && (strings.Contains(msg, "replication") || strings.Contains(msg, "wal sender") || strings.Contains(msg, "walsender")):
		return fmt.Errorf("%w (%w): grant it with ALTER ROLE <role> REPLICATION (or use a superuser)", ErrReplicationRole, err)
	case pgErr.Code == "55006" || strings.Contains(msg, "is active for pid"):
		return fmt.Errorf("%w (%w): another relay holds slot %q; this one stands by until the slot is free", ErrSlotActive, err, cfg.Slot)
	case strings.Contains(msg, "invalidated") || strings.Contains(msg, "can no longer get changes"):
		return fmt.Errorf("%w (%w): the events after its position were removed from the WAL (max_slot_wal_keep_size); drop and set up the slot again (outbox cdc drop, outbox cdc setup), and publish what the outbox table still holds with the polling relay", ErrSlotInvalidated, err)
	case pgErr.Code == "42704" && strings.Contains(msg, "replication slot"):
		return fmt.Errorf("%w (%w): create slot %q with pgcdc.Setup or outbox cdc setup", ErrNoSlot, err, cfg.Slot)
	}
	return err
}

// needsOperator reports whether err is one that retrying cannot fix
// without an operator (it is still retried, slowly, in case one does).
func needsOperator(err error) bool {
	return errors.Is(err, ErrWALLevel) || errors.Is(err, ErrReplicationRole) ||
		errors.Is(err, ErrSlotInvalidated) || errors.Is(err, ErrNoSlot)
}
