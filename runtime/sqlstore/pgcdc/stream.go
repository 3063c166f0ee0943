package pgcdc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/gooutbox/outbox/internal/backoff"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// run streams until ctx is done, opening the stream again after it ends:
// at once as a standby, after a backoff after an error.
func (s *Store) run(ctx context.Context) {
	defer close(s.done)
	failures, ghostWaits := 0, 0
	for ctx.Err() == nil {
		gen := s.generation()
		err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		streamed := s.generation() != gen
		if streamed {
			failures = 0 // it streamed: a new failure starts a new streak
			ghostWaits = 0
		}
		if streamed || !errors.Is(err, ErrSlotActive) {
			// A stream that streamed ended (ctx is not done), or one
			// failed: the server may have ended this process's other
			// sessions too (a restart, an operator's
			// pg_terminate_backend, a network cut), or the failure was
			// one of the pool's connections, frozen or cut (reading the
			// parked aggregates while this store holds the slot). Each
			// dead idle connection would fail one marking pass, or the
			// next tries in turn, a StatementTimeout each, while standbys
			// wait for the slot. Open fresh ones; it costs a few connects.
			s.db.Reset()
		}
		wait := standbyRetry
		switch {
		case errors.Is(err, ErrSlotActive) && s.ownGhost(ctx):
			// The slot is still held by this store's last WAL sender,
			// which the server is ending: take the slot again as soon
			// as it exits, not a standby's retry later. Backs off to the
			// standby's pace when the sender lingers (a network cut,
			// which the server notices after wal_sender_timeout).
			wait = min(ghostRetry<<min(ghostWaits, 10), standbyRetry)
			ghostWaits++
			s.log.Debug("pgcdc: waiting for this process's last WAL sender to release the slot", slog.String("slot", s.cfg.Slot), slog.Duration("backoff", wait))
		case errors.Is(err, ErrSlotActive):
			s.mu.Lock()
			was := s.standby
			s.standby, s.fault = true, nil
			s.mu.Unlock()
			if !was {
				s.log.Info("pgcdc: standing by: another process streams from the slot; this one takes it over when it is free", slog.String("slot", s.cfg.Slot))
			}
			failures = 0
		default:
			failures++
			wait = min(s.cfg.MaxRetryDelay, s.cfg.RetryDelay<<min(failures-1, 10))
			s.mu.Lock()
			s.standby = false
			if needsOperator(err) {
				s.fault = err
			}
			s.mu.Unlock()
			s.log.Warn("pgcdc: stream ended; opening it again", slog.String("slot", s.cfg.Slot), slog.Any("error", err), slog.Int("attempt", failures), slog.Duration("backoff", wait))
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// ghostRetry is the first wait before a store takes the slot again while
// its own last WAL sender still holds it (see ownGhost).
const ghostRetry = 25 * time.Millisecond

// ownGhost reports whether the process holding the slot is this store's
// last stream's WAL sender, one the server is ending after the stream
// failed, or whether it exited since (the slot is free): either way the
// slot is this store's to take again at once. Unknown (the server cannot
// be asked) counts as another process's.
func (s *Store) ownGhost(ctx context.Context) bool {
	s.mu.Lock()
	pid := s.lastPID
	s.mu.Unlock()
	if pid == 0 {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, min(s.cfg.StatementTimeout, time.Second))
	defer cancel()
	var active *uint32
	if err := s.db.QueryRow(qctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&active); err != nil {
		return false
	}
	return active == nil || *active == pid
}

// connect opens the replication connection.
func (s *Store) connect(ctx context.Context) (*pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(s.cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: connection string: %w", err)
	}
	dropPoolParams(pc.RuntimeParams)
	pc.RuntimeParams["replication"] = "database"
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "gooutbox-cdc"
	}
	// The values of timestamptz columns as decodeInsert reads them.
	pc.RuntimeParams["DateStyle"] = "ISO"
	pc.RuntimeParams["TimeZone"] = "UTC"
	// Read the stream in large chunks: a busy stream is many small
	// messages, and a read per 8 KB costs a system call each.
	pc.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, 256<<10), w)
	}
	if pc.ConnectTimeout == 0 { // connect_timeout in ConnString
		// A server the network froze mid-handshake would hold the store
		// (and, for a standby, its takeover) for good.
		pc.ConnectTimeout = s.cfg.StatementTimeout
	}
	if s.cfg.SenderTimeout > 0 {
		pc.RuntimeParams["wal_sender_timeout"] = strconv.FormatInt(max(1, s.cfg.SenderTimeout.Milliseconds()), 10)
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, classify(fmt.Errorf("pgcdc: connect for replication: %w", err), &s.cfg)
	}
	return conn, nil
}

// stream opens a stream from the slot and reads it until it fails or ctx
// is done.
func (s *Store) stream(ctx context.Context) (err error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	args := []string{"proto_version '1'", "publication_names '" + s.cfg.Publication + "'"}
	if s.cfg.Mode == Messages {
		args = append(args, "messages 'true'")
	}
	// From what this store knows was published, or the slot's own
	// position (confirmed_flush_lsn) when that is later: the server
	// starts from the later of the two, so a mark that the last stream
	// could not send repeats nothing.
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	err = pglogrepl.StartReplication(sctx, conn, s.cfg.Slot, s.Confirmed(), pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
	cancel()
	if err != nil {
		return classify(fmt.Errorf("pgcdc: start replication from slot %q: %w", s.cfg.Slot, err), &s.cfg)
	}
	s.mu.Lock()
	s.lastPID = conn.PID() // its WAL sender holds the slot until it exits
	s.mu.Unlock()
	// Another process may have parked an aggregate while this one stood
	// by: read them before the first event is decoded.
	if s.parkTable {
		if err := s.reloadDiverted(ctx); err != nil {
			return err
		}
	}
	defer func() {
		if ctx.Err() != nil && !conn.IsClosed() {
			// Closing: tell the server how far the events were published
			// (once the marker's last pass marked their rows), so that
			// the next stream repeats nothing published. (A connection
			// that failed is being closed already.)
			<-s.markDone
			_ = pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: s.Confirmed()})
		}
	}()
	lost := s.restart()
	defer func() {
		s.mu.Lock()
		s.streaming = false
		s.interrupt = nil
		s.mu.Unlock()
		close(lost) // batches claimed from this stream stop publishing
	}()
	s.log.Info("pgcdc: streaming", slog.String("slot", s.cfg.Slot), slog.String("mode", string(s.cfg.Mode)), slog.String("from", s.Confirmed().String()))

	relations := map[uint32]*pglogrepl.RelationMessage{}
	var open *openTxn
	var clock serverClock
	var sent pglogrepl.LSN // the position last sent to the server
	var lastSent, readDeadline time.Time
	// asked is when the first status that asked for a reply went out with
	// nothing heard from the server since: a server that leaves them
	// unanswered for deadAfter is taken for gone (a half-open
	// connection, a frozen network), and the stream is opened again, which
	// the server's wal_sender_timeout lets take the slot once it ended
	// the old one.
	var asked time.Time
	deadAfter := 2 * s.cfg.StatusInterval
	netConn := conn.Conn()
	interrupt := func() { _ = netConn.SetReadDeadline(time.Now()) }
	s.mu.Lock()
	s.interrupt = interrupt
	s.mu.Unlock()
	// ctx's end interrupts the wait too.
	stopWatch := context.AfterFunc(ctx, interrupt)
	defer stopWatch()
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A status every StatusInterval (and at once when the server asks
		// for one), and soon after a mark moved the position.
		now := time.Now()
		confirmed, full, beat, end := s.loopState(now, open == nil)
		if end != nil {
			return end
		}
		if !now.Before(lastSent.Add(s.cfg.StatusInterval)) || (confirmed != sent && !now.Before(lastSent.Add(statusDelay))) {
			// A reply (a keepalive) proves the stream alive, which
			// Claim's lease counts from (see Store.heard).
			// Not under ctx: a Close that came during the write would
			// leave the connection closed, and the closing status unsent.
			sctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatementTimeout)
			err := pglogrepl.SendStandbyStatusUpdate(sctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: confirmed, ReplyRequested: true})
			cancel()
			if err != nil {
				return fmt.Errorf("pgcdc: send standby status: %w", err)
			}
			sent, lastSent = confirmed, now
			if asked.IsZero() {
				asked = now
			}
		}
		deadline := lastSent.Add(s.cfg.StatusInterval)
		if confirmed != sent {
			deadline = lastSent.Add(statusDelay)
		}
		if open == nil && full {
			// Read on once the relay has caught up; the status keeps the
			// connection alive meanwhile.
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-ctx.Done():
			case <-s.space:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if beat {
			s.beat(ctx)
		}
		// The wait ends at the deadline, or at once when a mark moves the
		// position (interrupt); a read that times out leaves the
		// connection usable. The deadline is the connection's, not a
		// context's, which would cost a goroutine per message.
		if !deadline.Equal(readDeadline) {
			if err := netConn.SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("pgcdc: set read deadline: %w", err)
			}
			readDeadline = deadline
		}
		raw, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if !asked.IsZero() && time.Since(asked) > deadAfter {
					return fmt.Errorf("pgcdc: the server left the stream's status updates unanswered for %v: taking the connection for dead", time.Since(asked).Round(time.Millisecond))
				}
				readDeadline = time.Time{} // an interrupt may have set another
				continue                   // a status is due, or a mark moved the position
			}
			return fmt.Errorf("pgcdc: receive: %w", err)
		}
		asked = time.Time{}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return classify(fmt.Errorf("pgcdc: stream: %w", pgconn.ErrorResponseToPgError(msg)), &s.cfg)
		case *pgproto3.CopyDone:
			return fmt.Errorf("pgcdc: the server ended the stream")
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("pgcdc: keepalive: %w", err)
				}
				clock.heard(s, pkm.ServerTime)
				if open == nil {
					// Everything before the server's position was decoded
					// and sent: with nothing of ours outstanding, the slot
					// may move on with the rest of the database's WAL.
					s.idle(pkm.ServerWALEnd)
				}
				if pkm.ReplyRequested {
					lastSent = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("pgcdc: xlog data: %w", err)
				}
				clock.heard(s, xld.ServerTime)
				if open, err = s.decode(xld, relations, open); err != nil {
					return err
				}
			}
		}
	}
}

// openTxn is the transaction being read from the stream.
type openTxn struct {
	msgs []sqlstore.RowValues
}

// decode applies one pgoutput message of the stream.
func (s *Store) decode(xld pglogrepl.XLogData, relations map[uint32]*pglogrepl.RelationMessage, open *openTxn) (*openTxn, error) {
	m, err := pglogrepl.Parse(xld.WALData)
	if err != nil {
		return open, fmt.Errorf("pgcdc: decode at %s: %w", xld.WALStart, err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		return &openTxn{}, nil
	case *pglogrepl.InsertMessage:
		rel := relations[m.RelationID]
		if rel == nil {
			return open, fmt.Errorf("pgcdc: insert into relation %d before its description", m.RelationID)
		}
		if s.cfg.Mode != Table || open == nil {
			return open, nil
		}
		row, err := decodeInsert(rel, m.Tuple)
		if err != nil {
			return open, err
		}
		open.msgs = append(open.msgs, row)
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix != s.cfg.MessagePrefix || s.cfg.Mode != Messages {
			return open, nil
		}
		if !m.Transactional || open == nil {
			// A heartbeat (or a message outside a transaction): nothing
			// to publish; with nothing outstanding, the slot moves on.
			if open == nil {
				s.idle(m.LSN)
			}
			return open, nil
		}
		row, err := sqlstore.DecodeLogicalMessage(m.Content)
		if err != nil {
			return open, fmt.Errorf("pgcdc: logical message at %s: %w", m.LSN, err)
		}
		row.ID = int64(m.LSN)
		open.msgs = append(open.msgs, row)
	case *pglogrepl.CommitMessage:
		if open != nil {
			if err := s.commit(open.msgs, m.TransactionEndLSN, m.CommitTime); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	return open, nil
}

// restart starts a stream's bookkeeping: the events of an earlier stream
// are streamed again from the slot's position, so they are dropped, except
// those the relay is publishing (claimed), which become orphans: their
// repeats wait for their marks. It returns the channel closed when this
// stream ends.
func (s *Store) restart() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.inflight {
		e.tx = nil
	}
	for _, e := range s.awaiting {
		e.tx = nil // its repeat in the new stream takes its place
	}
	s.pending, s.txns = nil, nil
	s.unpublished, s.doneN = 0, 0
	s.standby, s.streaming, s.fault, s.endErr = false, true, nil, nil
	s.gen++
	s.lost = make(chan struct{})
	s.lastBeat = time.Now()
	s.heard.Store(time.Now().UnixNano())
	return s.lost
}

// commit appends a committed transaction's events.
func (s *Store) commit(rows []sqlstore.RowValues, end pglogrepl.LSN, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(rows) == 0 {
		if len(s.txns) == 0 {
			s.confirmed = max(s.confirmed, end)
		}
		return nil
	}
	t := &txn{end: end, left: len(rows), commit: at}
	for _, r := range rows {
		m, err := sqlstore.DecodeRow(r)
		if err != nil {
			return fmt.Errorf("pgcdc: transaction ending at %s: %w", end, err)
		}
		e := &entry{msg: m, tx: t}
		if o := s.inflight[m.ID]; o != nil && o.tx == nil && !o.fromTable {
			e.waitFor = o
		}
		s.pending = append(s.pending, e)
		s.unpublished++
		if a := s.awaiting[m.ID]; a != nil && a.tx == nil {
			// Published by an earlier stream, its row not marked yet:
			// not published again; settled when the row is.
			s.awaiting[m.ID] = e
			s.finish(e)
			continue
		}
		if d := s.diverted[aggregateOf(m)]; d != nil {
			s.setAside(e, d) // behind a parked event: its row holds it
		}
	}
	s.txns = append(s.txns, t)
	select {
	case s.fresh <- struct{}{}:
	default:
	}
	return nil
}

// idle moves the confirmed position to lsn when no event is outstanding.
func (s *Store) idle(lsn pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.txns) == 0 && lsn > s.confirmed {
		s.confirmed = lsn
	}
}

// loopState reads, under one lock, what the stream's loop needs each
// turn: the confirmed position, whether the buffer holds MaxBuffered
// unpublished events, and, between transactions (idle), whether a
// heartbeat is due (see [Config.Heartbeat]; it then counts as sent).
func (s *Store) loopState(now time.Time, idle bool) (confirmed pglogrepl.LSN, full, beat bool, end error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	beat = idle && s.cfg.Heartbeat > 0 && len(s.txns) == 0 && now.Sub(s.lastBeat) >= s.cfg.Heartbeat
	if beat {
		s.lastBeat = now
	}
	end, s.endErr = s.endErr, nil
	return s.confirmed, s.unpublished >= s.cfg.MaxBuffered, beat, end
}

// beat writes a heartbeat message.
func (s *Store) beat(ctx context.Context) {
	bctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	defer cancel()
	if _, err := s.db.Exec(bctx, `SELECT pg_logical_emit_message(false, $1, '')`, s.cfg.MessagePrefix); err != nil {
		s.log.Warn("pgcdc: heartbeat failed", slog.String("slot", s.cfg.Slot), slog.Any("error", err))
	}
}

// generation counts the streams opened.
func (s *Store) generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// serverClock turns the server's send times into this process's clock.
type serverClock struct {
	offset time.Duration // local time minus the server's, at the first message
	set    bool
}

// heard records that the server sent a message at sent (its clock): the
// lease counts from when it was sent, not from when it was read, so a
// message that waited in the socket through a pause proves nothing about
// the stream after it. The first message of a stream, read right after
// it started, sets the offset between the clocks.
func (c *serverClock) heard(s *Store, sent time.Time) {
	now := time.Now()
	if !c.set {
		c.offset, c.set = now.Sub(sent), true
	}
	at := min(sent.Add(c.offset).UnixNano(), now.UnixNano())
	if at > s.heard.Load() {
		s.heard.Store(at)
	}
}
