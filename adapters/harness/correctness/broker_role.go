package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerStats counts the faults the broker injected; the control channel
// returns it as JSON from GET /stats.
type brokerStats struct {
	// Rejected is how many produce requests got NOT_LEADER_FOR_PARTITION
	// (one partition down).
	Rejected int64
	// Refused is how many produce requests got NOT_ENOUGH_REPLICAS (every
	// partition down).
	Refused int64
	// Delayed is how many produce requests were held past the clients'
	// write timeout and then written (ambiguous writes).
	Delayed int64
	// Produce is how many produce requests the broker saw.
	Produce int64
}

// faultBroker is a kfake cluster with the suite's two produce faults: a
// window during which one partition, or every partition, rejects produce
// requests, and a budget
// of produce requests that are written only after a delay longer than the
// relays' write timeout, so their ack is lost and the relay writes again.
type faultBroker struct {
	fake *kfake.Cluster

	mu            sync.Mutex
	rejectPart    int32
	rejectUntil   time.Time
	delayBudget   int
	delayDuration time.Duration

	rejected, refused, delayed, produce atomic.Int64
}

// runBroker is the broker role: a single-node kfake cluster on a fixed
// loopback port with the suite's topic, and an HTTP control channel:
//
//	POST /reject?partition=P&for=3s   partition P answers NOT_LEADER_FOR_PARTITION
//	POST /reject?partition=-1&for=3s  every partition answers NOT_ENOUGH_REPLICAS (a full outage)
//	POST /delay?n=N&sleep=1500ms      the next N produce requests are written late
//	GET  /stats                       brokerStats as JSON
func runBroker(ctx context.Context, cfg childConfig, log *slog.Logger) error {
	fake, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(cfg.BrokerPort),
		kfake.SeedTopics(int32(cfg.Partitions), topic),
		kfake.DefaultNumPartitions(cfg.Partitions),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(cfg.MaxMessageBytes)}),
	)
	if err != nil {
		return fmt.Errorf("start kfake: %w", err)
	}
	defer fake.Close()
	b := &faultBroker{fake: fake, rejectPart: -1}
	fake.ControlKey(int16(kmsg.Produce), b.control)

	ln, err := net.Listen("tcp", cfg.ControlAddr)
	if err != nil {
		return fmt.Errorf("listen control: %w", err)
	}
	srv := &http.Server{Handler: b.mux(log), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("broker listening", "addrs", fake.ListenAddrs(), "control", cfg.ControlAddr)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("control server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("control shutdown: %w", err)
	}
	return nil
}

// control runs on every produce request. kafka-go sends one request per
// partition batch, so a request names one partition.
func (b *faultBroker) control(r kmsg.Request) (kmsg.Response, error, bool) {
	b.fake.KeepControl()
	b.produce.Add(1)
	req := r.(*kmsg.ProduceRequest)
	b.mu.Lock()
	rejectPart, rejecting := b.rejectPart, time.Now().Before(b.rejectUntil)
	delay := time.Duration(0)
	if b.delayBudget > 0 {
		b.delayBudget--
		delay = b.delayDuration
	}
	b.mu.Unlock()

	if rejecting && (rejectPart < 0 || producesTo(req, rejectPart)) {
		code := kerr.NotLeaderForPartition.Code
		if rejectPart < 0 {
			code = kerr.NotEnoughReplicas.Code // a full outage has its own error, so its rows can be told apart
			b.refused.Add(1)
		} else {
			b.rejected.Add(1)
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	}
	if delay > 0 {
		b.delayed.Add(1)
		// Written after the client gave up waiting: the ack is lost.
		b.fake.SleepControl(func() { time.Sleep(delay) })
	}
	return nil, nil, false
}

// producesTo reports whether req writes to partition p of the topic.
func producesTo(req *kmsg.ProduceRequest, p int32) bool {
	for _, rt := range req.Topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			if rp.Partition == p {
				return true
			}
		}
	}
	return false
}

func (b *faultBroker) mux(log *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reject", func(w http.ResponseWriter, r *http.Request) {
		p, err1 := strconv.Atoi(r.URL.Query().Get("partition"))
		d, err2 := time.ParseDuration(r.URL.Query().Get("for"))
		if err := errors.Join(err1, err2); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.rejectPart, b.rejectUntil = int32(p), time.Now().Add(d)
		b.mu.Unlock()
		log.Info("rejecting produce requests", "partition", p, "for", d)
	})
	mux.HandleFunc("POST /delay", func(w http.ResponseWriter, r *http.Request) {
		n, err1 := strconv.Atoi(r.URL.Query().Get("n"))
		d, err2 := time.ParseDuration(r.URL.Query().Get("sleep"))
		if err := errors.Join(err1, err2); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.delayBudget, b.delayDuration = b.delayBudget+n, d
		b.mu.Unlock()
		log.Info("delaying produce requests", "n", n, "sleep", d)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(brokerStats{Rejected: b.rejected.Load(), Refused: b.refused.Load(), Delayed: b.delayed.Load(), Produce: b.produce.Load()})
	})
	return mux
}
