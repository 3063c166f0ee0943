package main

// The CDC relay (-relay cdc): the relays stream the outbox table's inserts
// from one logical replication slot (pgcdc, Table mode) instead of polling
// it. One relay streams; the others stand by and take the slot when the
// server ends its WAL sender. The faults are the polling relay's; the
// holder of the slot stands for the holder of the shards, and the bounds
// are made of pgcdc's settings (cdcBound).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

// The CDC relays' settings that their liveness bounds are made of.
const (
	// cdcSenderTimeout is pgcdc.Config.SenderTimeout: the server ends a
	// stream it has not heard from for this long, and a standby may then
	// take the slot. The server looks at its clients' silence when it
	// wakes, at least every half of it.
	cdcSenderTimeout = 3 * time.Second
	// cdcStatus is the status interval (pgcdc's default, a third of
	// SenderTimeout); a stream left unanswered for two of them is taken
	// for dead and opened again.
	cdcStatus = cdcSenderTimeout / 3
	// cdcStandbyRetry is how often a standby tries to take the slot
	// (pgcdc's standbyRetry).
	cdcStandbyRetry = time.Second
	// cdcStandbyClaim is how soon a standby's relay claims again
	// (pgcdc's standbyClaim).
	cdcStandbyClaim = 100 * time.Millisecond
	// cdcMaxRetry is pgcdc.Config.MaxRetryDelay: the longest wait before
	// a failed message is tried again, or a failed stream opened again.
	cdcMaxRetry = time.Second
	// cdcMarkEvery is how often pgcdc sets published_at on the published
	// rows, which is what the probes wait for.
	cdcMarkEvery = 200 * time.Millisecond
)

// cdcSlot is the run's slot (and publication) name.
func cdcSlot(schema string) string { return schema + "_cdc" }

// setupCDC creates the run's publication and slot before the writers
// start (a slot streams what commits after it exists), and returns what
// drops them; the slot is dropped whatever the outcome, since a slot left
// behind keeps the server's WAL.
func setupCDC(ctx context.Context, dsn, slot string) (drop func() error, err error) {
	cfg := pgcdc.Config{ConnString: dsn, Slot: slot}
	if err := pgcdc.Setup(ctx, cfg); err != nil {
		return nil, fmt.Errorf("cdc setup: %w", err)
	}
	return func() error {
		// The server releases the slot when the last relay's WAL sender
		// exits, shortly after the relay processes ended.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		return pgcdc.DropWhenFree(ctx, cfg)
	}, nil
}

// slotHolder returns the application_name of the connection streaming
// from slot, "" when none does.
func slotHolder(ctx context.Context, db *gorm.DB, slot string) (string, error) {
	var app *string
	err := db.WithContext(ctx).Raw(`SELECT a.application_name FROM pg_replication_slots s
		JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = ?`, slot).Scan(&app).Error
	if err != nil {
		return "", fmt.Errorf("read the slot's holder: %w", err)
	}
	if app == nil {
		return "", nil
	}
	return *app, nil
}

// cdcBound is livenessBound for CDC relays (see the package comment's
// table for the polling relay's).
func cdcBound(fault string, relays int) (time.Duration, string) {
	// What every recovery ends with: a claim (the store wakes the relay;
	// a poll at worst) and the marker's pass that sets published_at.
	publish := relayPollInterval + cdcMarkEvery + boundSlack
	// The server ends a silent stream SenderTimeout after its last
	// reply, looking at least every SenderTimeout/2.
	serverEnds := cdcSenderTimeout + cdcSenderTimeout/2
	switch {
	case (fault == faultStop || fault == faultFreeze) && relays > 1:
		// The server ends the stopped relay's stream; a standby takes the
		// slot at its next try and streams from the confirmed position.
		return serverEnds + cdcStandbyRetry + publish, "fault"
	case fault == faultStop || fault == faultFreeze:
		// The resumed relay finds its stream ended, opens it again after
		// a retry delay and claims after its relay's backoff.
		return cdcMaxRetry + relayMaxBackoff + publish, "heal"
	case fault == faultCrash && relays > 1:
		// The kernel closes the dead relay's socket, the server's WAL
		// sender exits at once, and a standby takes the slot at its next
		// try; its relay claims within pgcdc's 100ms standby hint. The
		// new stream's first marker pass may meet the slow statement the
		// dead relay's marker left (a CI run under load: 4.8s against
		// 3.2s without this term), bounded by StatementTimeout.
		return cdcStandbyRetry + cdcStandbyClaim + relayStoreTimeout + publish, "fault"
	case fault == faultCrash:
		return relayStartup + publish, "fault"
	case fault == faultTerminate:
		// Every relay connection ends: the streaming relay opens its
		// stream again after a retry delay (a standby may be first), and
		// its relay claims after a backoff.
		return cdcStandbyRetry + relayMaxBackoff + publish, "fault"
	case fault == faultDBRefuse:
		return cdcMaxRetry + cdcStandbyRetry + relayMaxBackoff + publish, "heal"
	case fault == faultDBFreeze:
		// The streaming relay takes its silent stream for dead after two
		// status intervals (checked at each), while the server ends it;
		// the slot is taken at the next try after that, and the marker's
		// frozen statement fails after StatementTimeout.
		return max(3*cdcStatus, serverEnds) + cdcStandbyRetry + relayStoreTimeout + publish, "fault"
	case fault == faultBrokerDown, fault == faultBrokerCut, fault == faultNetsplit:
		// A CDC relay keeps its slot while its broker fails (pgcdc does
		// not hand over): after the heal, a failed message's retry delay
		// (at most MaxRetryDelay), the relay's backoff and one produce.
		return cdcMaxRetry + relayMaxBackoff + writeTimeout + publish, "heal"
	}
	return 0, ""
}

// checkRelay reports whether the relays' kind fits the rest of o.
func (o options) checkRelay() error {
	switch {
	case o.Relay == relayPoll:
		return nil
	case o.Relay != relayCDC:
		return fmt.Errorf("-relay %q: want %s or %s", o.Relay, relayPoll, relayCDC)
	case o.DB != "postgres":
		return errors.New("-relay cdc needs -db postgres: the CDC relay tails PostgreSQL's transaction log")
	case o.MaxAttempts != 0 || o.MaxActiveRelays != 0:
		return errors.New("-max-attempts and -max-active-relays configure the polling relay's store; the CDC relay parks only what the broker refuses for good, and one relay streams")
	}
	return nil
}

// cdcTailBound is what CDC relays may publish twice beyond the polling
// relay's bound: each time a stream ends (a relay killed, stopped,
// frozen, or its connections ended by a database fault) the next one
// repeats the slot's unconfirmed tail, which holds, besides the batches
// in flight that the polling relay's bound counts, the events published
// since the marker's last pass and the status after it (markEvery plus
// pgcdc's 50ms status delay). At the run's mean rate, with a 2x margin:
// ~0.5s of events per ended stream.
func cdcTailBound(events int, opt options, f faultCounts) int {
	ended := f.Kills + f.Stops + f.Crashes + f.Freezes + f.dbFaults()*opt.Relays + f.LongTx*opt.Relays
	perSecond := float64(events) / opt.Duration.Seconds()
	return ended * (int(perSecond/2) + 1)
}
