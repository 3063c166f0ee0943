package consumer_test

// The end-to-end test: GORM plugin → outbox table → relay → Kafka (kfake)
// → consumer with the inbox on PostgreSQL, in a child process that is
// SIGKILLed and restarted, with one reset of the group's offsets to the
// start of the topic.

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	kafkago "github.com/segmentio/kafka-go"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// Order is the aggregate of the end-to-end test. Seq counts its payments;
// each payment event carries the Seq it produced. Every third payment is
// recorded as v1, as an older deployment of the producer would.
type Order struct {
	ID  int64 `gorm:"primaryKey"`
	Seq int
	runtime.Recorder
}

func (o *Order) Pay(now time.Time) {
	o.Seq++
	id := strconv.FormatInt(o.ID, 10)
	if o.Seq%3 == 0 {
		o.Record(PaidV1{EventVersion: 1, OccurredAt: runtime.OccurredAt(now), OrderID: id, Seq: o.Seq})
		return
	}
	o.Record(PaidV2{EventVersion: 2, OccurredAt: runtime.OccurredAt(now), OrderID: id, Seq: o.Seq, Currency: "USD"})
}

const (
	envChildDSN     = "OUTBOX_CONSUMER_CHILD_DSN"
	envChildBrokers = "OUTBOX_CONSUMER_CHILD_BROKERS"
	envChildTopic   = "OUTBOX_CONSUMER_CHILD_TOPIC"
)

// TestConsumerChild is the consumer process of TestEndToEndExactlyOnce. It
// runs until it is killed.
func TestConsumerChild(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(envChildDSN)
	if dsn == "" {
		t.Skip("runs only as the child of TestEndToEndExactlyOnce")
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	drv := driver(t, db)
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv})
	must(t, consumer.Handle(c, drv, writeEffect("billing")))
	b := &broker{addrs: strings.Split(os.Getenv(envChildBrokers), ","), topic: os.Getenv(envChildTopic)}
	// Four group members share the eight partitions; each applies its
	// partitions' messages one at a time, in order.
	runRouter(t, c, b.subscriber(t, "billing"), b.topic, 4)
	select {} // until SIGKILL
}

// child is a running consumer process.
type child struct {
	cmd  *exec.Cmd
	out  *runtimetest.LogBuffer // read while the child writes it
	done chan error
}

func startChild(t *testing.T, dsn string, b *broker) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildDSN+"="+dsn, envChildBrokers+"="+strings.Join(b.addrs, ","), envChildTopic+"="+b.topic)
	ch := &child{cmd: cmd, out: &runtimetest.LogBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = ch.out, ch.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ch.done <- cmd.Wait() }()
	t.Cleanup(func() { ch.kill(t) })
	return ch
}

// kill SIGKILLs the child (if it still runs) and waits for it.
func (ch *child) kill(t *testing.T) {
	if ch.cmd.ProcessState != nil {
		return
	}
	_ = ch.cmd.Process.Kill()
	<-ch.done
}

// waitFor polls cond (a database or broker query) until it holds, failing
// the test when the child exits, or when progress (the effects applied)
// has not grown for stall: a machine busy with other suites under -race
// may be slow, but a consumer that stops applying fails.
func waitFor(t *testing.T, ch *child, what string, stall time.Duration, progress func() int64, cond func() bool) {
	t.Helper()
	last, moved := progress(), time.Now()
	for !cond() {
		select {
		case err := <-ch.done:
			t.Fatalf("consumer process exited (%v) while waiting for %s; output:\n%s", err, what, ch.out)
		default:
		}
		if n := progress(); n != last {
			last, moved = n, time.Now()
		}
		if time.Since(moved) > stall {
			out := ch.out.String()
			if len(out) > 4000 {
				out = "..." + out[len(out)-4000:]
			}
			t.Fatalf("waiting for %s: no progress for %v (%d applied); the consumer's output:\n%s", what, stall, last, out)
		}
		time.Sleep(20 * time.Millisecond) // polling a database or a broker, not synchronising goroutines
	}
}

// groupOffsets returns the group's committed offset and the end offset of
// each partition of the topic.
func groupOffsets(t *testing.T, client *kafkago.Client, topic string, partitions int) (committed, end []int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := make([]int, partitions)
	reqs := make([]kafkago.OffsetRequest, partitions)
	for p := range partitions {
		ids[p], reqs[p] = p, kafkago.LastOffsetOf(p)
	}
	of, err := client.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: "billing", Topics: map[string][]int{topic: ids}})
	if err != nil {
		t.Fatal(err)
	}
	lo, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatal(err)
	}
	committed, end = make([]int64, partitions), make([]int64, partitions)
	for _, p := range of.Topics[topic] {
		committed[p.Partition] = p.CommittedOffset
	}
	for _, p := range lo.Topics[topic] {
		end[p.Partition] = p.LastOffset
	}
	return committed, end
}

// resetToEarliest commits offset 0 for every partition of the topic for the
// group, as kafka-consumer-groups --reset-offsets --to-earliest does. The
// broker accepts it once the group has no members: it waits for the
// session of a killed member to expire.
func resetToEarliest(t *testing.T, client *kafkago.Client, topic string, partitions int) {
	t.Helper()
	offsets := make([]kafkago.OffsetCommit, partitions)
	for p := range partitions {
		offsets[p] = kafkago.OffsetCommit{Partition: p, Offset: 0}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{
			GroupID: "billing", GenerationID: -1, Topics: map[string][]kafkago.OffsetCommit{topic: offsets},
		})
		cancel()
		if err == nil {
			for _, p := range resp.Topics[topic] {
				err = errors.Join(err, p.Error)
			}
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reset offsets: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the dead member's session has not expired yet
	}
}

// TestEndToEndExactlyOnce: events committed by concurrent writers travel
// outbox → relay → Kafka → a consumer process that is killed and restarted
// twice, with the group's offsets reset to the start once (a full replay).
// Every event is applied exactly once, in order per aggregate.
func TestEndToEndExactlyOnce(t *testing.T) {
	t.Parallel()
	events, aggregates, partitions := 2_000, 100, 8
	if runtimetest.Long() {
		events = 10_000
	}
	dsn := hookstest.PostgresDSN(t)
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	prepare(t, db)
	must(t, hooks.Migrate(context.Background(), db, ""))
	must(t, db.AutoMigrate(&Order{}))
	b := newBroker(t, partitions)
	plugin, err := hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return b.topic }})
	must(t, err)
	must(t, db.Use(plugin))
	storeDB, err := db.DB()
	must(t, err)
	store, err := sqlstore.NewStore(databasesql.New(storeDB), sqlstore.StoreConfig{})
	must(t, err)
	r, err := relay.New(store, b.publisher(t), relay.Config{})
	must(t, err)
	relayCtx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(relayCtx) }()
	t.Cleanup(func() {
		stopRelay()
		if err := <-relayDone; err != nil {
			t.Errorf("relay Run = %v", err)
		}
	})

	orders := make([]Order, aggregates)
	must(t, db.Session(&gorm.Session{SkipHooks: true}).Create(&orders).Error)

	// Writers: 8 goroutines, writer w owns the orders with index ≡ w (mod 8),
	// so each order's payments commit in Seq order.
	var (
		mu        sync.Mutex
		committed = map[string]bool{}
		wg        sync.WaitGroup
		writeErrs = make(chan error, 8)
	)
	start := time.Now()
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range events / 8 {
				id := orders[w+8*rng.IntN((aggregates-w+7)/8)].ID
				var evID string
				err := db.Transaction(func(tx *gorm.DB) error {
					var o Order
					if err := tx.First(&o, id).Error; err != nil {
						return err
					}
					o.Pay(time.Now())
					evID = o.OutboxRecorder().Pending()[0].ID.String()
					return tx.Save(&o).Error
				})
				if err != nil {
					writeErrs <- err
					return
				}
				mu.Lock()
				committed[evID] = true
				mu.Unlock()
			}
		})
	}

	writersDone := make(chan time.Duration, 1)
	go func() {
		wg.Wait()
		writersDone <- time.Since(start)
	}()

	applied := func() int64 { return count(t, db, "effects") }
	client := &kafkago.Client{Addr: kafkago.TCP(b.addrs...), Timeout: 10 * time.Second}

	// Consumer process 1, killed after a third of the events.
	c1 := startChild(t, dsn, b)
	waitFor(t, c1, "a third of the events applied", 2*time.Minute, applied, func() bool { return applied() >= int64(events/3) })
	c1.kill(t)
	t.Logf("%v: killed consumer 1 at %d applied", time.Since(start).Round(time.Millisecond), applied())

	// Consumer process 2, killed after two thirds.
	c2 := startChild(t, dsn, b)
	waitFor(t, c2, "two thirds of the events applied", 2*time.Minute, applied, func() bool { return applied() >= int64(2*events/3) })
	c2.kill(t)
	atKill := applied()
	t.Logf("%v: killed consumer 2 at %d applied", time.Since(start).Round(time.Millisecond), atKill)

	// Reset the group to the start: everything is delivered again.
	resetToEarliest(t, client, b.topic, partitions)
	if got, _ := groupOffsets(t, client, b.topic, partitions); slicesMax(got) != 0 {
		t.Fatalf("committed offsets after the reset = %v, want all 0", got)
	}

	writeTime := <-writersDone
	close(writeErrs)
	for err := range writeErrs {
		t.Fatal(err)
	}
	t.Logf("%v: offsets reset; the writers committed every event after %v", time.Since(start).Round(time.Millisecond), writeTime.Round(time.Millisecond))

	// Consumer process 3 replays the whole topic and catches up.
	c3 := startChild(t, dsn, b)
	waitFor(t, c3, "every event applied and the group caught up", 3*time.Minute, applied, func() bool {
		if applied() < int64(events) {
			return false
		}
		if n := applied(); n > int64(events) {
			t.Fatalf("%d effects for %d events", n, events)
		}
		got, end := groupOffsets(t, client, b.topic, partitions)
		return cmp.Equal(got, end)
	})
	elapsed := time.Since(start)
	c3.kill(t)

	// Exactly once: one effect and one inbox entry per committed event.
	effs := effects(t, db)
	got := map[string]bool{}
	versions := map[int]int{}
	for _, e := range effs {
		if got[e.EventID] {
			t.Fatalf("event %s applied twice", e.EventID)
		}
		got[e.EventID] = true
		versions[e.Version]++
	}
	if diff := cmp.Diff(committed, got); diff != "" {
		t.Fatalf("applied events (-committed +applied):\n%s", diff)
	}
	if n := count(t, db, consumer.DefaultTable); n != int64(events) {
		t.Errorf("inbox entries = %d, want %d", n, events)
	}
	// In order per aggregate: effects are in apply order (serial id).
	last := map[string]int{}
	for _, e := range effs {
		if e.Seq != last[e.OrderID]+1 {
			t.Fatalf("order %s: seq %d applied after %d", e.OrderID, e.Seq, last[e.OrderID])
		}
		last[e.OrderID] = e.Seq
		if wantCur := map[bool]string{true: "EUR", false: "USD"}[e.Version == 1]; e.Currency != wantCur {
			t.Fatalf("event %s v%d: currency %q, want %q (upcast)", e.EventID, e.Version, e.Currency, wantCur)
		}
	}
	if versions[1] == 0 || versions[2] == 0 {
		t.Errorf("versions applied = %v, want both v1 and v2", versions)
	}
	t.Logf("%d events over %d orders applied exactly once in %v (v1: %d, v2: %d); the replay re-delivered at least %d",
		events, len(last), elapsed.Round(time.Millisecond), versions[1], versions[2], atKill)
}

func slicesMax(s []int64) int64 {
	var m int64
	for _, v := range s {
		m = max(m, v)
	}
	return m
}
