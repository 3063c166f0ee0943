package metrics_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gooutbox/outbox/runtime"
)

const waitTimeout = 10 * time.Second

// OrderPaid and OrderShipped stand for generated events.
type OrderPaid struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	OrderID      string    `json:"order_id"`
}

func (OrderPaid) EventKey() runtime.Key  { return runtime.Key{Type: "orders.order_paid", Version: 1} }
func (e OrderPaid) EventTime() time.Time { return e.OccurredAt }
func (OrderPaid) Validate() error        { return nil }

type OrderShipped struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	OrderID      string    `json:"order_id"`
}

func (OrderShipped) EventKey() runtime.Key {
	return runtime.Key{Type: "orders.order_shipped", Version: 1}
}
func (e OrderShipped) EventTime() time.Time { return e.OccurredAt }
func (OrderShipped) Validate() error        { return nil }

// registry knows both events, as generated Register functions do.
func registry(t testing.TB) *runtime.Registry {
	t.Helper()
	reg := runtime.NewRegistry()
	for _, k := range []runtime.Key{OrderPaid{}.EventKey(), OrderShipped{}.EventKey()} {
		err := reg.Register(k, 1, func(p []byte) (runtime.Event, error) {
			var e runtime.Event
			var err error
			if k.Type == "orders.order_paid" {
				var v OrderPaid
				err = json.Unmarshal(p, &v)
				e = v
			} else {
				var v OrderShipped
				err = json.Unmarshal(p, &v)
				e = v
			}
			if err != nil {
				return nil, &runtime.DecodeError{Key: k, Err: err}
			}
			return e, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// outboxMessage returns the outbox row of evt for topic.
func outboxMessage(t testing.TB, topic string, evt runtime.Event, orderID string) runtime.OutboxMessage {
	t.Helper()
	env, err := runtime.NewEnvelope(context.Background(), uuid.Must(uuid.NewV7()), evt, "order", orderID)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.OutboxMessage{Topic: topic, Envelope: env}
}

// sample finds the metric name{labels} in mfs ("k=v,k=v" labels, in any
// order, all of the metric's labels).
func sample(t *testing.T, mfs []*dto.MetricFamily, name, labels string) *dto.Metric {
	t.Helper()
	want := map[string]string{}
	if labels != "" {
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
					continue metrics
				}
			}
			return m
		}
	}
	t.Fatalf("no sample %s{%s}", name, labels)
	return nil
}

// gather gathers reg.
func gather(t *testing.T, reg prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// has reports whether mfs has a family named name.
func has(mfs []*dto.MetricFamily, name string) bool {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return true
		}
	}
	return false
}

func gaugeValue(t *testing.T, mfs []*dto.MetricFamily, name, labels string) float64 {
	t.Helper()
	return sample(t, mfs, name, labels).GetGauge().GetValue()
}

// until polls cond until it holds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
