package health_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gooutbox/outbox/runtime/health"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func ExampleNew() {
	// In production: sqlstore.Store and its *sql.DB.
	store := &runtimetest.MemoryStore{}
	r, err := relay.New(store, nopPublisher{}, relay.Config{Logger: discard()})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()

	checker, err := health.New(health.Config{
		Relay: r,
		OldestPending: func(ctx context.Context) (time.Duration, error) {
			st, err := store.Stats(ctx)
			return st.OldestPending, err
		},
		MaxOldestPending: time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /livez", checker.Liveness())
	mux.Handle("GET /readyz", checker.Readiness())

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var rep health.Report
	if err := json.NewDecoder(rec.Body).Decode(&rep); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rec.Code, rep.Status)
	for _, c := range rep.Checks {
		fmt.Println(c.Name, c.Status, c.LimitSeconds)
	}
	// Output:
	// 200 ok
	// relay ok 60
	// backlog ok 60
}
