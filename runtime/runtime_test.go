package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

type floaty struct {
	OccurredAt time.Time `json:"occurred_at"`
	F          float64   `json:"f"`
}

func (floaty) EventKey() runtime.Key  { return runtime.Key{Type: "t.floaty", Version: 3} }
func (e floaty) EventTime() time.Time { return e.OccurredAt }
func (floaty) Validate() error        { return nil }

func TestEnvelopeRoundTrip(t *testing.T) {
	ctx := runtime.WithCorrelationID(context.Background(), "corr")
	ctx = runtime.WithTraceContext(ctx, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")
	id := runtime.NewEventID()
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("X", 3600))
	env, err := runtime.NewEnvelope(ctx, id, floaty{OccurredAt: at, F: 1.5}, "thing", "7")
	if err != nil {
		t.Fatal(err)
	}
	if !env.OccurredAt.Equal(at.Truncate(time.Microsecond)) || env.OccurredAt.Location() != time.UTC {
		t.Errorf("OccurredAt = %v, want UTC microseconds of %v", env.OccurredAt, at)
	}
	md := env.Metadata()
	back, err := runtime.EnvelopeFromMetadata("ignored", md, env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(env, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if md[runtime.MetadataTraceParent] == "" || md[runtime.MetadataCorrelationID] != "corr" || md[runtime.MetadataEventVersion] != "3" {
		t.Errorf("metadata = %v", md)
	}
}

func TestNewEnvelopeErrors(t *testing.T) {
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	var ee *runtime.EncodeError
	if _, err := runtime.NewEnvelope(ctx, id, floaty{F: math.NaN()}, "a", "1"); !errors.As(err, &ee) || ee.Key.Type != "t.floaty" {
		t.Errorf("NaN payload: %v, want *EncodeError naming t.floaty", err)
	}
	for name, tc := range map[string]struct {
		id       uuid.UUID
		evt      runtime.Event
		typ, agg string
	}{
		"nil event":      {id, nil, "a", "1"},
		"nil id":         {uuid.Nil, floaty{}, "a", "1"},
		"no aggregate":   {id, floaty{}, "", "1"},
		"no aggregateID": {id, floaty{}, "a", ""},
	} {
		if _, err := runtime.NewEnvelope(ctx, tc.id, tc.evt, tc.typ, tc.agg); !errors.Is(err, runtime.ErrInvalidEnvelope) {
			t.Errorf("%s: %v, want ErrInvalidEnvelope", name, err)
		}
	}
}

func TestEnvelopeFromMetadataErrors(t *testing.T) {
	good := map[string]string{runtime.MetadataEventID: runtime.NewEventID().String(), runtime.MetadataEventType: "x", runtime.MetadataEventVersion: "1"}
	for key, bad := range map[string]string{
		runtime.MetadataEventID:      "not-a-uuid",
		runtime.MetadataEventType:    "",
		runtime.MetadataEventVersion: "zero",
		runtime.MetadataOccurredAt:   "yesterday",
	} {
		md := map[string]string{}
		for k, v := range good {
			md[k] = v
		}
		md[key] = bad
		if _, err := runtime.EnvelopeFromMetadata("", md, nil); !errors.Is(err, runtime.ErrInvalidEnvelope) {
			t.Errorf("bad %s: %v, want ErrInvalidEnvelope", key, err)
		}
	}
}

func TestRecorderLifecycle(t *testing.T) {
	var r runtime.Recorder
	r.Record(floaty{}, nil, floaty{F: 2})
	p := r.Pending()
	if len(p) != 2 || p[0].ID == p[1].ID || p[0].ID.Version() != 7 {
		t.Fatalf("Pending = %+v, want 2 events with distinct UUIDv7 ids", p)
	}
	r.MarkWritten("tx1", p[0].ID)
	if got := r.Pending(); got[0].WrittenIn != "tx1" || got[1].WrittenIn != nil {
		t.Errorf("WrittenIn = %v, %v", got[0].WrittenIn, got[1].WrittenIn)
	}
	r.Confirm(p[0].ID, uuid.New())
	if got := r.Pending(); len(got) != 1 || got[0].ID != p[1].ID {
		t.Errorf("after Confirm: %+v", got)
	}
	r.ClearEvents()
	if len(r.Events()) != 0 {
		t.Error("ClearEvents left events")
	}
}

func TestRegistryErrors(t *testing.T) {
	reg := runtime.NewRegistry()
	dec := func([]byte) (runtime.Event, error) { return floaty{}, nil }
	k := runtime.Key{Type: "t.floaty", Version: 1}
	if err := reg.Register(k, 2, dec); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(k, 2, dec); !errors.Is(err, runtime.ErrDuplicateRegistration) {
		t.Errorf("duplicate: %v", err)
	}
	if err := reg.Register(runtime.Key{Type: "t.floaty", Version: 2}, 3, dec); err == nil {
		t.Error("disagreeing latest version accepted")
	}
	if _, err := reg.Decode("nope", 1, nil); !errors.Is(err, runtime.ErrUnknownEventType) {
		t.Errorf("unknown type: %v", err)
	}
	_, err := reg.Decode("t.floaty", 2, nil)
	var uv *runtime.UnknownVersionError
	if !errors.As(err, &uv) || uv.Newer() || !errors.Is(err, runtime.ErrUnknownVersion) {
		t.Errorf("unregistered older version: %v", err)
	}
	if diff := cmp.Diff([]runtime.Key{k}, reg.Keys()); diff != "" {
		t.Errorf("Keys (-want +got):\n%s", diff)
	}
}

func TestIsPermanent(t *testing.T) {
	base := errors.New("message too large")
	wrapped := fmt.Errorf("publish: %w", &runtime.PermanentError{Err: base})
	if !runtime.IsPermanent(wrapped) || !errors.Is(wrapped, base) {
		t.Errorf("IsPermanent(%v) = false or base lost", wrapped)
	}
	if runtime.IsPermanent(base) || runtime.IsPermanent(nil) {
		t.Error("a plain error is permanent")
	}
}
