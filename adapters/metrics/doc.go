// Package metrics exports an outbox's Prometheus metrics: the backlog the
// store holds, what the relay publishes and how fast, and what consumers do
// with each delivery.
//
// [Metrics] is one prometheus.Collector that you register on a registry of
// your own (nothing is registered globally) and feed through the relay's
// and the consumers' callbacks:
//
//	m, err := metrics.New(metrics.Config{Store: store}) // sqlstore.Store: outbox gauges, queried at scrape time
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m)
//	r, err := relay.New(store, pub, relay.Config{OnBatch: m.ObserveBatch})
//	billing, err := consumer.New(events, consumer.Config{Name: "billing", OnOutcome: m.Consumer("billing"), ...})
//	err = m.AddInbox(billing) // *consumer.Consumer: inbox size, counted at scrape time
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// examples/readme/monitor is a complete program.
//
// # Metrics
//
// Names follow Prometheus conventions: the outbox_ prefix, base units
// (seconds, messages), _total for counters. Labels are bounded: topic and
// event_type come from the event schema, consumer and outcome from the
// code, reason from a fixed list; no label carries an id.
//
//	| name                                     | type      | labels                                  | what                                                                                                  |
//	|------------------------------------------|-----------|-----------------------------------------|-------------------------------------------------------------------------------------------------------|
//	| outbox_pending_messages                  | gauge     |                                         | messages waiting to be published, not parked (store, at scrape time)                                  |
//	| outbox_retrying_messages                 | gauge     |                                         | pending messages with a failed attempt counted; an outage counts none (store)                         |
//	| outbox_parked_messages                   | gauge     |                                         | messages parked after a permanent failure or too many attempts (store)                               |
//	| outbox_oldest_pending_age_seconds        | gauge     |                                         | age of the oldest pending message, 0 when none (store)                                                |
//	| outbox_stats_up                          | gauge     |                                         | 1 when the last store query succeeded within Timeout; the four gauges above are absent when 0        |
//	| outbox_inbox_messages                    | gauge     | consumer                                | entries in the consumer's inbox (applied events not pruned yet; counted at scrape time)             |
//	| outbox_inbox_stats_up                    | gauge     | consumer                                | 1 when the last inbox count succeeded within Timeout                                                  |
//	| outbox_relay_shards_held                 | gauge     |                                         | shards the relay holds, 0 standing by (Metrics.SetRelay; read at scrape time)                         |
//	| outbox_relay_published_total             | counter   | topic, event_type                       | messages published (acknowledged by the broker) and handed to the store to mark                      |
//	| outbox_relay_publish_failures_total      | counter   | topic, event_type, permanent            | messages not published, per attempt; permanent="true": parked                                        |
//	| outbox_relay_store_errors_total          | counter   |                                         | relay rounds in which the store failed to claim or to mark                                            |
//	| outbox_relay_batch_size                  | histogram |                                         | messages claimed per batch                                                                            |
//	| outbox_relay_publish_duration_seconds    | histogram |                                         | time to publish one batch: first Publish call to the broker's last answer                            |
//	| outbox_relay_batch_duration_seconds      | histogram |                                         | time of one relay batch, round start to mark end: claim, publish, mark                               |
//	| outbox_relay_lag_seconds                 | histogram |                                         | per published message, its created_at (commit, database clock) to the broker's ack (relay clock)    |
//	| outbox_consumer_messages_total           | counter   | consumer, event_type, outcome, reason   | deliveries by outcome (applied, duplicate, ignored, skipped, nacked, dead_lettered, failed) and reason |
//	| outbox_consumer_handle_duration_seconds  | histogram | consumer, outcome                       | time to handle one delivery: decode, handler and inbox transaction, retries and backoff               |
//
// The store and inbox gauges cost a query each (sqlstore.Store.Stats, a
// count of the inbox's index) when a registry is scraped; each answer is
// reused for [Config.CacheFor] and each query is bounded by
// [Config.Timeout], so a slow database leaves the gauges out (and
// outbox_stats_up at 0) instead of hanging the scrape.
//
// The lag compares two clocks, the database's and the relay host's: clock
// skew shifts it (a negative lag counts as 0). When a batch spans several
// topics, every message of the batch is measured to the end of the
// batch's publishing. A message published again after a failure is
// measured from its commit, so the lag includes its retries.
//
// outbox_relay_publish_failures_total counts a message each time it fails,
// including messages not tried because an earlier message of their
// aggregate failed in the same batch. outbox_consumer_messages_total has an
// empty event_type for a malformed message and an unknown event type (the
// value would come from a producer's mistake), and an empty reason for the
// outcomes applied, duplicate and ignored.
//
// The package depends on prometheus/client_golang; runtime and its
// subpackages do not.
package metrics
