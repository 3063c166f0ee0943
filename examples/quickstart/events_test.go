package main

import (
	"errors"
	"testing"

	"github.com/gooutbox/outbox/runtime"
)

// TestDecodeNullIsMissing: a required key sent as null is missing, not a
// zero value; a key with a default gets the default.
func TestDecodeNullIsMissing(t *testing.T) {
	_, err := DecodeOrderPaid(1, []byte(`{"event_version":1,"occurred_at":"2026-11-30T09:00:00Z","method":null}`))
	var mf *runtime.MissingFieldsError
	if !errors.As(err, &mf) || len(mf.Fields) != 1 || mf.Fields[0] != "method" {
		t.Errorf("DecodeOrderPaid(v1, method null) = %v, want a MissingFieldsError for method", err)
	}
	e, err := DecodeOrderPaid(2, []byte(`{"event_version":2,"occurred_at":"2026-11-30T09:00:00Z","method":"card","channel":null}`))
	if err != nil || e.Channel != "web" {
		t.Errorf("DecodeOrderPaid(v2, channel null) = %+v, %v; want the default channel web", e, err)
	}
}
