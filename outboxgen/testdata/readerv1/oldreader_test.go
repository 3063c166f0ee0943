package readerv1

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/outboxgen/testdata/readerv2"
	"github.com/gooutbox/outbox/runtime"
)

var (
	parcelID = uuid.MustParse("0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f")
	clk      = runtime.ClockFunc(func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) })
)

// sentByV2 returns the envelope a v2 producer writes, as a consumer
// receives it: through the wire metadata.
func sentByV2(t *testing.T) runtime.Envelope {
	t.Helper()
	ev := readerv2.NewParcelSent(clk, parcelID, readerv2.CarrierUps, 1200)
	url := "https://track.example/1"
	note := "fragile"
	ev.TrackingURL, ev.Note, ev.Insured = &url, &note, true
	env, err := runtime.NewEnvelope(context.Background(), uuid.New(), ev, "Parcel", "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := env.Headers[runtime.MetadataMinReaderVersion]; got != "1" {
		t.Fatalf("v2 envelope header %s = %q, want 1 (v2 is full_transitive with v1)", runtime.MetadataMinReaderVersion, got)
	}
	received, err := runtime.EnvelopeFromMetadata(env.EventID.String(), env.Metadata(), env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return received
}

func registry(t *testing.T) *runtime.Registry {
	t.Helper()
	r := runtime.NewRegistry()
	if err := Register(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestOldReaderDecodesNewerVersion: a consumer generated from v1 of the
// schema decodes what v2 code writes, as its own latest version; the field
// it does not know (tracking_url, insured) is ignored.
func TestOldReaderDecodesNewerVersion(t *testing.T) {
	got, err := registry(t).DecodeEnvelope(sentByV2(t))
	if err != nil {
		t.Fatalf("DecodeEnvelope(v2 payload) with v1 code: %v", err)
	}
	note := "fragile"
	want := ParcelSent{
		EventVersion: 1,
		OccurredAt:   clk.Now(),
		ParcelID:     parcelID,
		Carrier:      CarrierUps,
		WeightGrams:  1200,
		Note:         &note,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeEnvelope(v2 payload) with v1 code (-want +got):\n%s", diff)
	}
}

// TestOldReaderRules: without the writer's declaration the newer version is
// unknown (Newer, to be retried or parked); a declaration the reader cannot
// meet is too; a value the reader does not know is an error, not a zero.
func TestOldReaderRules(t *testing.T) {
	r := registry(t)

	env := sentByV2(t)
	delete(env.Headers, runtime.MetadataMinReaderVersion)
	_, err := r.DecodeEnvelope(env)
	var uv *runtime.UnknownVersionError
	if !errors.As(err, &uv) || !uv.Newer() {
		t.Errorf("DecodeEnvelope(v2, no %s) = %v, want an UnknownVersionError with Newer", runtime.MetadataMinReaderVersion, err)
	}

	env = sentByV2(t)
	env.Headers[runtime.MetadataMinReaderVersion] = "2"
	if _, err := r.DecodeEnvelope(env); !errors.As(err, &uv) {
		t.Errorf("DecodeEnvelope(v2, %s 2) = %v, want an UnknownVersionError", runtime.MetadataMinReaderVersion, err)
	}

	env = sentByV2(t)
	env.Payload = []byte(strings.Replace(string(env.Payload), `"ups"`, `"fedex"`, 1))
	_, err = r.DecodeEnvelope(env)
	var de *runtime.DecodeError
	var fe *runtime.FieldError
	if !errors.As(err, &de) || !errors.As(err, &fe) || fe.Field != "carrier" {
		t.Errorf("DecodeEnvelope(v2 with carrier fedex) = %v, want a DecodeError for field carrier", err)
	}

	env = sentByV2(t)
	env.Payload = []byte(strings.Replace(string(env.Payload), `"event_version":2`, `"event_version":3`, 1))
	if _, err := r.DecodeEnvelope(env); !errors.As(err, &fe) || fe.Field != "event_version" {
		t.Errorf("DecodeEnvelope(v2 envelope, payload saying 3) = %v, want a FieldError for event_version", err)
	}
}

// TestCurrentReader: the v2 code itself decodes the envelope as v2, and a
// v1 envelope carries no min_reader_version header.
func TestCurrentReader(t *testing.T) {
	r := runtime.NewRegistry()
	if err := readerv2.Register(r); err != nil {
		t.Fatal(err)
	}
	got, err := r.DecodeEnvelope(sentByV2(t))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := got.(readerv2.ParcelSent); !ok || e.TrackingURL == nil || !e.Insured {
		t.Errorf("DecodeEnvelope with v2 code = %#v, want every v2 field", got)
	}
	env, err := runtime.NewEnvelope(context.Background(), uuid.New(), NewParcelSent(clk, parcelID, CarrierDhl, 1), "Parcel", "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := env.Headers[runtime.MetadataMinReaderVersion]; ok {
		t.Errorf("v1 envelope has %s %q, want none", runtime.MetadataMinReaderVersion, h)
	}
}
