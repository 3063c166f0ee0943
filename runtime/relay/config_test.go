package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     relay.Config
		wantErr bool
	}{
		{"zero", relay.Config{}, false},
		{"all set", relay.Config{
			BatchSize: 10, MaxBatchBytes: 1 << 10, StoreTimeout: time.Second, PublishTimeout: time.Second, PublishConcurrency: 2,
			PollInterval: time.Second, MinBackoff: time.Millisecond, MaxBackoff: time.Second, ShutdownTimeout: time.Second,
		}, false},
		{"min equals max", relay.Config{MinBackoff: time.Second, MaxBackoff: time.Second}, false},
		{"negative BatchSize", relay.Config{BatchSize: -1}, true},
		{"negative PollInterval", relay.Config{PollInterval: -time.Second}, true},
		{"negative ActivePollInterval", relay.Config{ActivePollInterval: -time.Second}, true},
		{"negative ActivePeriod", relay.Config{ActivePeriod: -time.Second}, true},
		{"negative MinBackoff", relay.Config{MinBackoff: -time.Second}, true},
		{"negative MaxBackoff", relay.Config{MaxBackoff: -time.Second}, true},
		{"negative ShutdownTimeout", relay.Config{ShutdownTimeout: -time.Second}, true},
		{"negative MaxBatchBytes", relay.Config{MaxBatchBytes: -1}, true},
		{"negative StoreTimeout", relay.Config{StoreTimeout: -time.Second}, true},
		{"negative PublishTimeout", relay.Config{PublishTimeout: -time.Second}, true},
		{"negative HandOverAfter turns hand-overs off", relay.Config{HandOverAfter: -time.Second}, false},
		{"negative CoalesceRows turns coalescing off", relay.Config{CoalesceRows: -1}, false},
		{"negative CoalesceMax", relay.Config{CoalesceMax: -time.Millisecond}, true},
		{"negative PublishConcurrency", relay.Config{PublishConcurrency: -1}, true},
		{"MinBackoff above MaxBackoff", relay.Config{MinBackoff: 2 * time.Second, MaxBackoff: time.Second}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, relay.ErrInvalidConfig) {
				t.Errorf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			_, newErr := relay.New(&runtimetest.MemoryStore{}, &fakePublisher{}, tt.cfg)
			if !errors.Is(newErr, relay.ErrInvalidConfig) && tt.wantErr {
				t.Errorf("New() = %v, want an error wrapping ErrInvalidConfig", newErr)
			}
			if newErr != nil && !tt.wantErr {
				t.Errorf("New() = %v, want no error", newErr)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	// defaults returns c with the defaults that do not depend on other
	// fields or on the store.
	defaults := func(c relay.Config) relay.Config {
		c.BatchSize = 1000
		c.MaxBatchBytes = 8 << 20
		c.StoreTimeout = 10 * time.Second
		c.PublishTimeout = 30 * time.Second
		c.PublishConcurrency = 4
		c.ShutdownTimeout = 10 * time.Second
		c.ActivePeriod = 100 * time.Millisecond
		c.HandOverAfter = 15 * time.Second
		if c.ActivePollInterval == 0 {
			c.ActivePollInterval = 2 * time.Millisecond
		}
		c.CoalesceRows = 8
		if c.CoalesceMax == 0 {
			c.CoalesceMax = 10 * time.Millisecond
		}
		return c
	}
	allSet := relay.Config{
		BatchSize: 7, MaxBatchBytes: 1 << 10, StoreTimeout: time.Second, PublishTimeout: 2 * time.Second, PublishConcurrency: 3,
		PollInterval: time.Minute, MinBackoff: time.Second, MaxBackoff: time.Hour, ShutdownTimeout: time.Minute,
		ActivePollInterval: time.Millisecond, ActivePeriod: time.Second, HandOverAfter: -1,
		CoalesceRows: -1, CoalesceMax: time.Second,
	}
	tests := []struct {
		name     string
		notifier bool
		cfg      relay.Config
		want     relay.Config
	}{
		{
			name: "zero",
			want: defaults(relay.Config{PollInterval: 100 * time.Millisecond, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}),
		},
		{
			name:     "zero with a Notifier",
			notifier: true,
			want:     defaults(relay.Config{PollInterval: time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}),
		},
		{
			name:     "set fields are kept",
			notifier: true,
			cfg:      allSet,
			want:     allSet,
		},
		{
			name: "small MaxBackoff lowers MinBackoff",
			cfg:  relay.Config{MaxBackoff: 20 * time.Millisecond},
			want: defaults(relay.Config{PollInterval: 100 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}),
		},
		{
			name: "a short PollInterval caps ActivePollInterval",
			cfg:  relay.Config{PollInterval: 2 * time.Millisecond},
			want: defaults(relay.Config{PollInterval: 2 * time.Millisecond, ActivePollInterval: 2 * time.Millisecond, CoalesceMax: 2 * time.Millisecond, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}),
		},
		{
			name: "a short PollInterval caps CoalesceMax",
			cfg:  relay.Config{PollInterval: 5 * time.Millisecond},
			want: defaults(relay.Config{PollInterval: 5 * time.Millisecond, CoalesceMax: 5 * time.Millisecond, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}),
		},
		{
			name: "large MinBackoff raises MaxBackoff",
			cfg:  relay.Config{MinBackoff: time.Minute},
			want: defaults(relay.Config{PollInterval: 100 * time.Millisecond, MinBackoff: time.Minute, MaxBackoff: time.Minute}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var store relay.Store = &runtimetest.MemoryStore{}
			if tt.notifier {
				store = &notifyingStore{Store: store, listen: func(ctx context.Context, _ func()) error {
					<-ctx.Done()
					return ctx.Err()
				}}
			}
			r, err := relay.New(store, &fakePublisher{}, tt.cfg)
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			got := relay.ConfigOf(r)
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(relay.Config{}, "Logger", "OnBatch")); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewNilArguments(t *testing.T) {
	if _, err := relay.New(nil, &fakePublisher{}, relay.Config{}); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Errorf("New(nil store) = %v, want an error wrapping ErrInvalidConfig", err)
	}
	if _, err := relay.New(&runtimetest.MemoryStore{}, nil, relay.Config{}); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Errorf("New(nil publisher) = %v, want an error wrapping ErrInvalidConfig", err)
	}
}

func TestBackoff(t *testing.T) {
	r, err := relay.New(&runtimetest.MemoryStore{}, &fakePublisher{}, relay.Config{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ceilings := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, c := range ceilings {
		attempt, ceiling := i+1, c*time.Millisecond
		for range 50 {
			if got := relay.Backoff(r, attempt); got < ceiling/2 || got > ceiling {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", attempt, got, ceiling/2, ceiling)
			}
		}
	}
	if got := relay.Backoff(r, 1000); got > time.Second {
		t.Errorf("backoff(1000) = %v, want at most MaxBackoff", got)
	}
}
