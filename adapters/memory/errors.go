package memory

import "errors"

// ErrClosed is returned by [PubSub.Publish] and [PubSub.Subscribe] after
// [PubSub.Close].
var ErrClosed = errors.New("memory: pub/sub closed")

// ErrTopicFull is wrapped by [PubSub.Publish]'s error when the messages would
// take a topic past [Config.MaxMessagesPerTopic]. Nothing is stored then.
// The log is never trimmed, so the topic stays full for the life of the
// [PubSub]: raise the bound or use a broker with retention.
var ErrTopicFull = errors.New("memory: topic full")

// ErrInvalidConfig is wrapped by the errors of [Config.Validate] and [New]
// when a setting is out of range.
var ErrInvalidConfig = errors.New("memory: invalid config")
