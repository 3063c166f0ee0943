package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
)

// PartitionLag is how far a consumer group is behind on one partition.
type PartitionLag struct {
	Topic     string
	Partition int
	// Committed is the group's committed offset: the next record it will
	// read. -1 when the group committed none on the partition; it then
	// starts at Start (SubscriberConfig.StartOffset kafka.FirstOffset, the
	// default) or at End (kafka.LastOffset).
	Committed int64
	// Start and End are the partition's first retained offset and the
	// offset after its last record (its high watermark).
	Start, End int64
	// Lag is the number of records the group has yet to commit: End less
	// Committed (or Start, when retention deleted past it); without a
	// committed offset, End - Start, or 0 for a group that starts at the
	// end.
	Lag int64
}

// Lag returns the subscriber's consumer group lag on each partition of
// topics, in topic and partition order; with no topics, on every topic the
// group committed offsets on. It asks the brokers (SubscriberConfig's,
// with the dialer OverwriteReaderConfig sets, if any), and needs no
// subscription: an operator's tool or a metrics exporter calls it beside
// the consumers. A topic that does not exist is an error naming it.
func (s *Subscriber) Lag(ctx context.Context, topics ...string) ([]PartitionLag, error) {
	rc := s.readerConfig("lag")
	client := &kafka.Client{Addr: kafka.TCP(rc.Brokers...), Timeout: 10 * time.Second}
	if d := rc.Dialer; d != nil {
		t := &kafka.Transport{Dial: d.DialFunc, TLS: d.TLS, SASL: d.SASLMechanism, ClientID: d.ClientID}
		defer t.CloseIdleConnections()
		client.Transport = t
	}
	group := s.cfg.ConsumerGroup
	wrap := func(what string, err error) error {
		return fmt.Errorf("kafka: lag of group %q: %s: %w", group, what, err)
	}

	partitions := map[string][]int{}
	if len(topics) == 0 {
		// Every topic the group committed offsets on.
		res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group})
		if err != nil {
			return nil, wrap("fetch the committed offsets", err)
		}
		if errors.Is(res.Error, kafka.GroupIdNotFound) {
			return nil, nil // a group that never committed (some brokers say so)
		}
		if res.Error != nil {
			return nil, wrap("fetch the committed offsets", res.Error)
		}
		if len(res.Topics) == 0 {
			return nil, nil
		}
		for t := range res.Topics {
			topics = append(topics, t)
		}
	}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, wrap("read the topics' partitions", err)
	}
	for _, t := range meta.Topics {
		if t.Error != nil {
			return nil, wrap(fmt.Sprintf("topic %q", t.Name), t.Error)
		}
		for _, p := range t.Partitions {
			partitions[t.Name] = append(partitions[t.Name], p.ID)
		}
	}
	for _, t := range topics {
		if len(partitions[t]) == 0 {
			return nil, wrap(fmt.Sprintf("topic %q", t), kafka.UnknownTopicOrPartition)
		}
	}

	committed, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: partitions})
	if err != nil {
		return nil, wrap("fetch the committed offsets", err)
	}
	switch {
	case errors.Is(committed.Error, kafka.GroupIdNotFound):
		// A group that never committed: the brokers that do not answer
		// with offsets of -1 say so.
		committed.Topics = map[string][]kafka.OffsetFetchPartition{}
		for t, ps := range partitions {
			for _, p := range ps {
				committed.Topics[t] = append(committed.Topics[t], kafka.OffsetFetchPartition{Partition: p, CommittedOffset: -1})
			}
		}
	case committed.Error != nil:
		return nil, wrap("fetch the committed offsets", committed.Error)
	}
	reqs := map[string][]kafka.OffsetRequest{}
	for t, ps := range partitions {
		for _, p := range ps {
			reqs[t] = append(reqs[t], kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
		}
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: reqs})
	if err != nil {
		return nil, wrap("list the partitions' offsets", err)
	}
	type key struct {
		topic     string
		partition int
	}
	bounds := map[key]kafka.PartitionOffsets{}
	for t, ps := range ends.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, wrap(fmt.Sprintf("offsets of %s/%d", t, p.Partition), p.Error)
			}
			bounds[key{t, p.Partition}] = p
		}
	}
	var out []PartitionLag
	for t, ps := range committed.Topics {
		for _, p := range ps {
			if p.Error != nil && !errors.Is(p.Error, kafka.UnknownTopicOrPartition) {
				return nil, wrap(fmt.Sprintf("committed offset of %s/%d", t, p.Partition), p.Error)
			}
			b, ok := bounds[key{t, p.Partition}]
			if !ok {
				continue
			}
			l := PartitionLag{Topic: t, Partition: p.Partition, Committed: p.CommittedOffset, Start: b.FirstOffset, End: b.LastOffset}
			switch {
			case l.Committed < 0 && rc.StartOffset == kafka.LastOffset:
				// The group starts at the end: nothing before it is its.
				l.Committed, l.Lag = -1, 0
			case l.Committed < 0:
				l.Committed, l.Lag = -1, l.End-l.Start
			default:
				// Retention may have deleted records past the committed
				// offset: the group resumes at the first one left.
				l.Lag = max(0, l.End-max(l.Committed, l.Start))
			}
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return slices.Clip(out), nil
}
