package consumer_test

// The inbox transaction's deadline (Config.TxTimeout): a handler that blocks
// past it makes the attempt an inbox failure, retried and then nacked,
// never dead-lettered as the handler's fault; nothing of it commits.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/consumer"
)

func TestHandlerBlockingPastTxTimeoutIsRetriedNotDeadLettered(t *testing.T) {
	t.Parallel()
	// Each attempt's transaction connects within TxTimeout (a timed-out
	// attempt's connection is discarded): 100ms was too short for that in
	// CI, beside other race-instrumented packages (one run failed with
	// "failed to connect ... context deadline exceeded" on attempt 2).
	const txTimeout = time.Second
	// blockUntilDone waits for the attempt's deadline. The fallback only
	// keeps a broken build from hanging: it returns a plain handler
	// error, which would be dead-lettered.
	blockUntilDone := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errBoom
		}
	}
	for _, tc := range []struct {
		name string
		// block is the handler's behaviour on attempt n, after the write.
		block       func(ctx context.Context, tx *gorm.DB, attempt int) error
		wantOutcome consumer.Outcome
		wantAttempt int
		wantEffects int
	}{
		{
			name: "honours its context every attempt",
			block: func(ctx context.Context, _ *gorm.DB, _ int) error {
				return blockUntilDone(ctx)
			},
			wantOutcome: consumer.OutcomeFailed, wantAttempt: 2,
		},
		{
			name: "ignores its context then writes",
			block: func(_ context.Context, tx *gorm.DB, _ int) error {
				<-time.After(3 * txTimeout) // a handler stuck outside the database, deaf to ctx
				return tx.Exec("UPDATE effects SET currency = 'XXX'").Error
			},
			wantOutcome: consumer.OutcomeFailed, wantAttempt: 2,
		},
		{
			name: "blocks once then succeeds",
			block: func(ctx context.Context, _ *gorm.DB, attempt int) error {
				if attempt == 1 {
					return blockUntilDone(ctx)
				}
				return nil
			},
			wantOutcome: consumer.OutcomeApplied, wantAttempt: 2, wantEffects: 1,
		},
	} {
		for name, open := range databases(t) {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				db := open(t)
				drv := driver(t, db)
				dlq := &recordingPublisher{}
				var o outcomes
				c := newConsumer(t, newRegistry(t, 2), consumer.Config{
					Name: "c", DB: drv, TxTimeout: txTimeout, MaxRetries: 1,
					MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, NackDelay: time.Millisecond,
					DeadLetterPublisher: dlq, OnOutcome: o.record,
				})
				write := writeEffect("c")
				must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
					if err := write(ctx, tx, e, m); err != nil {
						return err
					}
					return tc.block(ctx, tx, m.Attempt)
				}))
				err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1))
				r := o.last()
				if r.Outcome != tc.wantOutcome || r.Meta.Attempt != tc.wantAttempt {
					t.Errorf("result = %v after %d attempts (%v), want %v after %d", r.Outcome, r.Meta.Attempt, r.Err, tc.wantOutcome, tc.wantAttempt)
				}
				if tc.wantOutcome == consumer.OutcomeFailed {
					var ie *consumer.InboxError
					if !errors.As(err, &ie) || !errors.Is(err, consumer.ErrTxTimeout) || r.Reason != consumer.ReasonInbox {
						t.Errorf("handler = %v (reason %q), want an InboxError wrapping ErrTxTimeout (reason inbox)", err, r.Reason)
					} else if msg := ie.Error(); strings.Count(msg, "consumer: inbox") != 1 {
						// It read "consumer: inbox: consumer: inbox transaction
						// timed out" (a new user's trial).
						t.Errorf("InboxError %q says consumer: inbox more than once", msg)
					}
				} else if err != nil {
					t.Errorf("handler = %v", err)
				}
				if n := len(dlq.topic("c.dlq")); n != 0 {
					t.Errorf("dead-lettered %d messages; a timed-out attempt is not the handler's fault", n)
				}
				if n := len(effects(t, db)); n != tc.wantEffects {
					t.Errorf("effects = %d, want %d (a timed-out attempt commits nothing)", n, tc.wantEffects)
				}
				if n := count(t, db, consumer.DefaultTable); n != int64(tc.wantEffects) {
					t.Errorf("inbox entries = %d, want %d", n, tc.wantEffects)
				}
			})
		}
	}
}

// TestTxTimeoutBeyondPostgresRange: a TxTimeout longer than PostgreSQL's
// largest statement_timeout (2^31-1 ms, about 24.8 days), or MySQL's largest
// wait_timeout (a year), is capped for the server-side timeouts rather than
// failing every transaction.
func TestTxTimeoutBeyondPostgresRange(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := databases(t)[name](t)
			drv := driver(t, db)
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: drv, TxTimeout: 10000 * time.Hour})
			must(t, consumer.Handle(c, drv, writeEffect("c")))
			if err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)); err != nil {
				t.Fatalf("handler = %v", err)
			}
			if n := len(effects(t, db)); n != 1 {
				t.Errorf("effects = %d, want 1", n)
			}
		})
	}
}
