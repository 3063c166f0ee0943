package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/gooutbox/outbox/runtime"
)

// readRawLog reads every record of every partition of the topic from
// offset 0 up to the partitions' end offsets at the time of the call,
// without a consumer group, and returns them in offset order per
// partition. The event id comes from the record's event_id header.
func readRawLog(ctx context.Context, brokers []string, partitions int) ([]delivery, error) {
	ends, err := endOffsets(ctx, brokers, partitions)
	if err != nil {
		return nil, err
	}
	start := map[int32]kgo.Offset{}
	for p := range ends {
		start[p] = kgo.NewOffset().At(0)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))
	if err != nil {
		return nil, fmt.Errorf("raw log client: %w", err)
	}
	defer cl.Close()
	byPart := map[int32][]delivery{}
	done := func() bool {
		for p, end := range ends {
			if int64(len(byPart[p])) < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read raw log: %w", err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			d := delivery{AggregateID: string(r.Key), Partition: r.Partition, Offset: r.Offset}
			for _, h := range r.Headers {
				if h.Key == runtime.MetadataEventID {
					d.EventID = string(h.Value)
				}
			}
			byPart[r.Partition] = append(byPart[r.Partition], d)
		})
	}
	var out []delivery
	for p := range int32(partitions) {
		for i, d := range byPart[p] {
			if d.Offset != int64(i) {
				return nil, fmt.Errorf("partition %d: record %d has offset %d (gap in the log)", p, i, d.Offset)
			}
		}
		out = append(out, byPart[p]...)
	}
	return out, nil
}

// endOffsets asks the broker for the end offset of each partition.
func endOffsets(ctx context.Context, brokers []string, partitions int) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("list offsets client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(partitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets of %s/%d: %w", t.Topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	if len(ends) != partitions {
		return nil, fmt.Errorf("list offsets: %d of %d partitions answered", len(ends), partitions)
	}
	return ends, nil
}
