// Package health provides HTTP liveness and readiness checks for an outbox
// relay: the relay is running and making progress, its database and its
// broker answer, and the oldest pending message has not waited too long.
//
// A [Checker] serves a JSON report with status 200 when every check passes
// and 503 otherwise:
//
//	checker, err := health.New(health.Config{
//		Relay: r,  // *relay.Relay: its LastProgress
//		DB:    db, // *sql.DB: PingContext
//		OldestPending: func(ctx context.Context) (time.Duration, error) {
//			st, err := store.Stats(ctx) // sqlstore.Store
//			return st.OldestPending, err
//		},
//	})
//	mux.Handle("/livez", checker.Liveness())
//	mux.Handle("/readyz", checker.Readiness())
//
// Liveness checks the relay only: a relay that makes no progress for
// [Config.MaxStall] (it stopped, or its store does not answer, or every
// message it claims fails to publish) is worth restarting. Readiness checks
// everything; a database that is down or a backlog that is too old is worth
// an alert, not a restart. A broker the relay cannot reach fails readiness
// at once through the "broker" check when [Config.Broker] is set (the
// publisher's Ping: adapters/kafka, amqp, nats and redis have one); without
// it, a broker outage shows only in the backlog check: the store holds
// failed messages back until their retry time, and the relay's claims in
// between, which find nothing else to do, count as progress. Each check runs under [Config.Timeout], concurrently, so
// a slow database cannot hang a probe.
//
// The report, for a relay that stalled:
//
//	{"status":"fail","checks":[
//	  {"name":"relay","status":"fail","seconds":75.2,"limit_seconds":60,"error":"no progress for 1m15.2s (limit 1m0s)"},
//	  {"name":"database","status":"ok","seconds":0.0008},
//	  {"name":"backlog","status":"ok","seconds":3.5,"limit_seconds":300}]}
//
// A failing readiness report, for a database that does not answer:
//
//	{"status":"fail","checks":[
//	  {"name":"relay","status":"ok","seconds":0.4,"limit_seconds":60},
//	  {"name":"database","status":"fail","seconds":2,"error":"ping: no answer: context deadline exceeded"},
//	  {"name":"backlog","status":"fail","seconds":0,"limit_seconds":300,"error":"oldest pending: ..."}]}
//
// The program examples/readme/monitor mounts both, at /livez and /readyz,
// beside the metrics of package adapters/metrics.
//
// # A shared backlog
//
// The backlog is shared: a broker outage or a replay (outbox replay) fails
// the backlog check of every instance at once. Where an unready instance is
// taken out of service (a Kubernetes readiness probe on an application that
// also serves traffic), build that probe's checker without OldestPending and
// alert on outbox_oldest_pending_age_seconds instead. A parked message is
// not pending and does not age, but its aggregate's later events wait behind
// it: after MaxOldestPending they fail the backlog check, on every relay,
// until an operator unparks or discards it (outbox parked); alert on
// outbox_parked_messages to hear of it sooner.
//
// The package imports only the standard library and runtime.
package health
