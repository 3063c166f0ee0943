package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"strings"
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
	good := map[string]string{
		runtime.MetadataEventID: runtime.NewEventID().String(), runtime.MetadataEventType: "x", runtime.MetadataEventVersion: "1",
		runtime.MetadataAggregateType: "order", runtime.MetadataAggregateID: "o-1", runtime.MetadataOccurredAt: "2026-12-02T10:00:00Z",
	}
	if _, err := runtime.EnvelopeFromMetadata("", good, nil); err != nil {
		t.Fatalf("good metadata: %v", err)
	}
	for _, tc := range []struct{ key, bad, want string }{
		{runtime.MetadataEventID, "not-a-uuid", "event_id"},
		{runtime.MetadataEventType, "", "missing event_type"},
		{runtime.MetadataEventVersion, "", "missing event_version"},
		{runtime.MetadataEventVersion, "zero", `event_version "zero" is not a positive integer`},
		{runtime.MetadataAggregateType, "", "missing aggregate_type"},
		{runtime.MetadataAggregateID, "", "missing aggregate_id"},
		{runtime.MetadataOccurredAt, "", "missing occurred_at"},
		{runtime.MetadataOccurredAt, "yesterday", "occurred_at"},
	} {
		md := maps.Clone(good)
		md[tc.key] = tc.bad
		_, err := runtime.EnvelopeFromMetadata("", md, nil)
		if !errors.Is(err, runtime.ErrInvalidEnvelope) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want ErrInvalidEnvelope saying %q", tc.key, tc.bad, err, tc.want)
		}
	}
}

func TestRecorderLifecycle(t *testing.T) {
	var r runtime.Recorder
	r.Record(floaty{}, nil, floaty{F: 2})
	st := r.OutboxRecorder()
	p := st.Pending()
	if len(p) != 2 || st.Len() != 2 || p[0].ID == p[1].ID || p[0].ID.Version() != 7 {
		t.Fatalf("Pending = %+v, want 2 events with distinct UUIDv7 ids", p)
	}
	st.Confirm(p[0].ID, uuid.New())
	if got := st.Pending(); len(got) != 1 || got[0].ID != p[1].ID {
		t.Errorf("after Confirm: %+v", got)
	}
	if got := r.Events(); len(got) != 1 || got[0] != (floaty{F: 2}) {
		t.Errorf("Events after Confirm = %v", got)
	}
	r.ClearEvents()
	if len(r.Events()) != 0 || st.Pending() != nil {
		t.Error("ClearEvents left events")
	}
}

// TestRecorderCopiesAreIndependent: a copy of an aggregate (a range
// variable, a snapshot) shares the recorder's backing array; confirming,
// clearing or recording on one must not change the other's events.
func TestRecorderCopiesAreIndependent(t *testing.T) {
	var a aggregate
	a.Record(floaty{F: 1}, floaty{F: 2}, floaty{F: 3})
	b := a
	st := a.OutboxRecorder()
	st.Confirm(st.Pending()[0].ID)
	a.Record(floaty{F: 4})
	b.Record(floaty{F: 5})
	want := []runtime.Event{floaty{F: 1}, floaty{F: 2}, floaty{F: 3}, floaty{F: 5}}
	if diff := cmp.Diff(want, b.Events()); diff != "" {
		t.Errorf("copy's events after the original changed (-want +got):\n%s", diff)
	}
	want = []runtime.Event{floaty{F: 2}, floaty{F: 3}, floaty{F: 4}}
	if diff := cmp.Diff(want, a.Events()); diff != "" {
		t.Errorf("original's events (-want +got):\n%s", diff)
	}
	a.ClearEvents()
	if len(b.Events()) != 4 {
		t.Errorf("ClearEvents on the original changed the copy: %v", b.Events())
	}
}

// aggregate embeds a Recorder and has domain methods whose names the old
// Recorder promoted (Confirm, Pending): they must not collide with anything
// the persistence layer needs.
type aggregate struct {
	ID int64
	runtime.Recorder
}

func (a *aggregate) Confirm() string { return "order confirmed" }
func (a *aggregate) Pending() bool   { return true }

// TestRecorderPromotesOnlyDomainMethods: embedding a Recorder promotes
// Record, Events, ClearEvents and the one persistence accessor
// OutboxRecorder, nothing else; the bookkeeping lives on RecorderState.
func TestRecorderPromotesOnlyDomainMethods(t *testing.T) {
	type plain struct{ runtime.Recorder }
	typ := reflect.TypeOf(&plain{})
	var got []string
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	want := []string{"ClearEvents", "Events", "OutboxRecorder", "Record"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("methods promoted by runtime.Recorder (-want +got):\n%s", diff)
	}
	if n := reflect.TypeOf(runtime.Recorded{}).NumField(); n != 3 {
		t.Errorf("runtime.Recorded has %d fields, want 3 (ID, Event, RecordedAt)", n)
	}

	a := &aggregate{}
	a.Record(floaty{})
	if a.Confirm() != "order confirmed" || !a.Pending() {
		t.Fatal("domain methods shadowed")
	}
	st := a.OutboxRecorder()
	st.Confirm(st.Pending()[0].ID)
	if len(a.Events()) != 0 {
		t.Errorf("events after the state confirmed them = %d, want 0", len(a.Events()))
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

func TestIsTransient(t *testing.T) {
	base := errors.New("NOT_LEADER_FOR_PARTITION")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"wrapped", fmt.Errorf("publish: %w", runtime.Transient(base)), true},
		{"plain", base, false},
		{"nil", nil, false},
		{"permanent wins", runtime.Permanent(runtime.Transient(base)), false},
		{"permanent wins inside", runtime.Transient(runtime.Permanent(base)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runtime.IsTransient(tt.err); got != tt.want {
				t.Errorf("IsTransient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if runtime.Transient(nil) != nil {
		t.Error("Transient(nil) != nil")
	}
	if err := runtime.Transient(base); !errors.Is(err, base) {
		t.Errorf("errors.Is(%v, base) = false", err)
	}
}

func TestFieldErrors(t *testing.T) {
	var err error = &runtime.DecodeError{Key: runtime.Key{Type: "t", Version: 1}, Err: &runtime.FieldError{Field: "amount.currency", Problem: "must match ^[A-Z]{3}$"}}
	if got, want := err.Error(), "outbox: decode event t v1: field amount.currency: must match ^[A-Z]{3}$"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var fe *runtime.FieldError
	if !errors.As(err, &fe) || fe.Field != "amount.currency" {
		t.Errorf("errors.As(%v, *FieldError) = %v, want field amount.currency", err, fe)
	}
	err = &runtime.MissingFieldsError{Fields: []string{"a", "b"}}
	if got, want := err.Error(), "missing required field(s) a, b"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// compatible is a v3 event whose writer declared it readable by v2 readers.
type compatible struct{ floaty }

func (compatible) EventMinReader() int { return 2 }

func TestNewEnvelopeMinReader(t *testing.T) {
	env, err := runtime.NewEnvelope(context.Background(), runtime.NewEventID(), compatible{floaty{OccurredAt: time.Now()}}, "thing", "7")
	if err != nil {
		t.Fatal(err)
	}
	if got := env.Metadata()[runtime.MetadataMinReaderVersion]; got != "2" {
		t.Errorf("metadata %s = %q, want 2", runtime.MetadataMinReaderVersion, got)
	}
	env, err = runtime.NewEnvelope(context.Background(), runtime.NewEventID(), floaty{OccurredAt: time.Now()}, "thing", "7")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := env.Headers[runtime.MetadataMinReaderVersion]; ok {
		t.Errorf("event without EventMinReader: header %s = %q, want none", runtime.MetadataMinReaderVersion, got)
	}
}

func TestRegistryNewer(t *testing.T) {
	reg := runtime.NewRegistry()
	if err := reg.RegisterNewer("t.floaty", func(int, []byte) (runtime.Event, error) { return floaty{}, nil }); err == nil {
		t.Error("RegisterNewer of an unregistered type accepted")
	}
	if err := reg.Register(runtime.Key{Type: "t.floaty", Version: 1}, 2, func([]byte) (runtime.Event, error) { return floaty{}, nil }); err != nil {
		t.Fatal(err)
	}
	var gotVersion int
	newer := func(v int, _ []byte) (runtime.Event, error) { gotVersion = v; return floaty{F: 2}, nil }
	if err := reg.RegisterNewer("t.floaty", newer); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterNewer("t.floaty", newer); !errors.Is(err, runtime.ErrDuplicateRegistration) {
		t.Errorf("second RegisterNewer: %v, want ErrDuplicateRegistration", err)
	}
	if err := reg.RegisterNewer("t.floaty", nil); err == nil {
		t.Error("nil newer decoder accepted")
	}
	env := runtime.Envelope{EventType: "t.floaty", EventVersion: 4}
	for _, h := range []string{"", "3", "0", "x"} {
		env.Headers = map[string]string{runtime.MetadataMinReaderVersion: h}
		var uv *runtime.UnknownVersionError
		if _, err := reg.DecodeEnvelope(env); !errors.As(err, &uv) || !uv.Newer() {
			t.Errorf("DecodeEnvelope(v4, %s %q) = %v, want an UnknownVersionError", runtime.MetadataMinReaderVersion, h, err)
		}
	}
	env.Headers = map[string]string{runtime.MetadataMinReaderVersion: "2"}
	got, err := reg.DecodeEnvelope(env)
	if err != nil || got.(floaty).F != 2 || gotVersion != 4 {
		t.Errorf("DecodeEnvelope(v4, %s 2) = %v, %v (version %d), want the newer decoder's event for version 4", runtime.MetadataMinReaderVersion, got, err, gotVersion)
	}
	if _, err := reg.Decode("t.floaty", 4, nil); !errors.Is(err, runtime.ErrUnknownVersion) {
		t.Errorf("Decode(v4) = %v, want ErrUnknownVersion (Decode has no header)", err)
	}
}
