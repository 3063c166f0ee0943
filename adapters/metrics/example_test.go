package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/adapters/metrics"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func ExampleNew() {
	// In production: sqlstore.Store and a broker adapter.
	store := &runtimetest.MemoryStore{}
	broker, _ := memory.New(memory.Config{})
	defer broker.Close()

	m, err := metrics.New(metrics.Config{Store: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry() // yours: nothing is registered globally
	reg.MustRegister(m)

	r, err := relay.New(store, broker, relay.Config{OnBatch: m.ObserveBatch, Logger: discard()})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []string{"A-1", "A-2"} {
		env, _ := runtime.NewEnvelope(context.Background(), uuid.Must(uuid.NewV7()), OrderPaid{1, time.Now(), id}, "order", id)
		store.Add(runtime.OutboxMessage{Topic: "orders", Envelope: env})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	received, _ := broker.Subscribe(ctx, "orders")
	for range 2 {
		(<-received).Ack()
	}
	cancel() // Run returns after the batch in flight, and its OnBatch
	<-done

	// What Prometheus scrapes from the handler you mount at /metrics.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "outbox_relay_published_total") || strings.HasPrefix(line, "outbox_pending_messages ") ||
			strings.HasPrefix(line, "outbox_relay_lag_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// outbox_pending_messages 0
	// outbox_relay_lag_seconds_count 2
	// outbox_relay_published_total{event_type="orders.order_paid",topic="orders"} 2
}
