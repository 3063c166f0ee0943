package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig configures the JetStream streams the adapter creates. Give the
// [Publisher] and the [Subscriber] the same values: whichever touches a topic
// first creates its stream. Every zero value means the documented default.
type StreamConfig struct {
	// Prefix starts the name of every stream the adapter creates (see
	// [StreamName]). It may hold ASCII letters, digits, '-' and '_'.
	//
	// Default: "OUTBOX".
	Prefix string

	// DedupWindow is the stream's duplicate window (JetStream's Duplicates):
	// a message whose Nats-Msg-Id (the event id) the stream has stored
	// within the window is acknowledged as a duplicate and not stored again.
	// The relay republishes a message after an ambiguous failure (a lost
	// PubAck, a timeout, a relay crash between publish and mark), so the
	// window must be longer than the longest time between two attempts:
	// the relay's maximum retry delay (30s by default), plus its lease and
	// publish timeout. A republish after the window has passed is stored
	// again and reaches consumers twice (the inbox still applies it once).
	// JetStream keeps the ids of the window in memory, about 100 bytes per
	// message published within it.
	//
	// Default: 10 minutes (JetStream's own default is 2 minutes).
	DedupWindow time.Duration

	// Replicas is the number of replicas of a created stream (1 on a single
	// server; 3 on a cluster for a stream that survives a server loss).
	//
	// Default: 1.
	Replicas int

	// Configure, if set, is called with the config of every stream the
	// adapter creates or updates, after the defaults are set, to set what
	// this struct does not expose: MaxAge, MaxBytes or MaxMsgs (the stream
	// keeps every message by default: LimitsPolicy without limits),
	// MaxMsgSize, placement. Name and Subjects are set again after it runs.
	// It must leave Duplicates positive and must not set Retention to
	// WorkQueuePolicy (one group would take the messages from the others)
	// or NoAck; [PublisherConfig.Validate] checks that.
	//
	// Default: nil (no change).
	Configure func(*jetstream.StreamConfig)
}

func (c *StreamConfig) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = "OUTBOX"
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 10 * time.Minute
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
}

// Validate reports whether c is usable; zero values are valid, since they
// mean the default. The error wraps [ErrInvalidConfig].
func (c StreamConfig) Validate() error {
	switch {
	case !validPrefix(c.Prefix):
		return fmt.Errorf("%w: Stream.Prefix %q may hold only ASCII letters, digits, '-' and '_'", ErrInvalidConfig, c.Prefix)
	case c.DedupWindow < 0:
		return fmt.Errorf("%w: negative Stream.DedupWindow %s", ErrInvalidConfig, c.DedupWindow)
	case c.Replicas < 0:
		return fmt.Errorf("%w: negative Stream.Replicas %d", ErrInvalidConfig, c.Replicas)
	}
	if c.Configure != nil {
		d := c
		d.setDefaults()
		sc := d.build("validate", "validate")
		switch {
		case sc.Duplicates <= 0:
			return fmt.Errorf("%w: Stream.Configure left Duplicates %s; it must be positive for deduplication", ErrInvalidConfig, sc.Duplicates)
		case sc.Retention == jetstream.WorkQueuePolicy:
			return fmt.Errorf("%w: Stream.Configure set WorkQueuePolicy retention; consumer groups would take messages from each other", ErrInvalidConfig)
		case sc.NoAck:
			return fmt.Errorf("%w: Stream.Configure set NoAck; publishes would not be acknowledged", ErrInvalidConfig)
		}
	}
	return nil
}

// build returns the config of the stream named name that captures subject.
func (c StreamConfig) build(name, subject string) jetstream.StreamConfig {
	sc := jetstream.StreamConfig{
		Name:        name,
		Description: "gooutbox: messages of subject " + subject,
		Subjects:    []string{subject},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		Duplicates:  c.DedupWindow,
		Replicas:    c.Replicas,
	}
	if c.Configure != nil {
		c.Configure(&sc)
	}
	sc.Name = name
	sc.Subjects = []string{subject}
	return sc
}

// provisioner finds or creates the stream of each subject and remembers it.
type provisioner struct {
	js     jetstream.JetStream
	cfg    StreamConfig
	logger watermill.LoggerAdapter
	// update makes provisioner create-or-update its own streams (the
	// publisher, whose settings win); otherwise it only creates missing ones.
	update bool

	mu      sync.Mutex
	streams map[string]string // subject -> stream name
}

func newProvisioner(js jetstream.JetStream, cfg StreamConfig, update bool, logger watermill.LoggerAdapter) *provisioner {
	return &provisioner{js: js, cfg: cfg, update: update, logger: logger, streams: make(map[string]string)}
}

// stream returns the name of the stream that captures subject (the topic's
// subject), creating it on first use.
//
// A stream that already captures the subject and is not the adapter's own
// (one created by hand, say with subjects "orders.>") is used as it is,
// with a warning when its duplicate window is shorter than DedupWindow.
// Otherwise the adapter's stream ([StreamName]) is created, or, for a
// publisher, created or updated to the current settings.
func (p *provisioner) stream(ctx context.Context, topic, subject string) (string, error) {
	p.mu.Lock()
	name, ok := p.streams[subject]
	p.mu.Unlock()
	if ok {
		return name, nil
	}
	name, err := p.provision(ctx, topic, subject)
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	p.streams[subject] = name
	p.mu.Unlock()
	return name, nil
}

// forget drops what stream remembers of subject, so that the next call
// looks again (after the stream was deleted, say).
func (p *provisioner) forget(subject string) {
	p.mu.Lock()
	delete(p.streams, subject)
	p.mu.Unlock()
}

func (p *provisioner) provision(ctx context.Context, topic, subject string) (string, error) {
	own := StreamName(p.cfg.Prefix, topic)
	found, err := p.js.StreamNameBySubject(ctx, subject)
	missing := errors.Is(err, jetstream.ErrStreamNotFound)
	if err != nil && !missing {
		return "", fmt.Errorf("nats: look up the stream of subject %q: %w", subject, err)
	}
	if err == nil && found != own {
		p.checkForeign(ctx, found, subject)
		return found, nil
	}
	sc := p.cfg.build(own, subject)
	switch {
	case p.update:
		_, err = p.js.CreateOrUpdateStream(ctx, sc)
	case missing:
		_, err = p.js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // created meanwhile by another process
		}
	}
	if err != nil {
		return "", fmt.Errorf("nats: create stream %q for subject %q: %w", own, subject, err)
	}
	return own, nil
}

// checkForeign warns when a stream the adapter did not create deduplicates
// over a shorter window than configured.
func (p *provisioner) checkForeign(ctx context.Context, name, subject string) {
	fields := watermill.LogFields{"stream": name, "subject": subject}
	s, err := p.js.Stream(ctx, name)
	if err != nil {
		p.logger.Info("using an existing stream; cannot read its config", fields.Add(watermill.LogFields{"error": err.Error()}))
		return
	}
	if d := s.CachedInfo().Config.Duplicates; d < p.cfg.DedupWindow {
		p.logger.Info("using an existing stream whose duplicate window is shorter than Stream.DedupWindow: republishes after it are stored twice",
			fields.Add(watermill.LogFields{"duplicates": d, "dedup_window": p.cfg.DedupWindow}))
		return
	}
	p.logger.Debug("using an existing stream", fields)
}
