package kafka

import (
	"errors"
	"fmt"
)

// ErrInvalidTopic is wrapped by the errors of [ValidateTopic].
var ErrInvalidTopic = errors.New("not a valid Kafka topic name")

// maxTopicLength is the longest topic name Kafka accepts.
const maxTopicLength = 249

// ValidateTopic reports whether Kafka accepts name as a topic name: 1 to
// 249 characters of ASCII letters, digits, '.', '_' and '-', and not "."
// or "..". The error wraps [ErrInvalidTopic] and says what is wrong.
//
// The [Publisher] refuses such a topic for good ([runtime.PermanentError]:
// the relay parks the message, naming it) rather than retry it. Give it to
// the writers too, so that a save with such a topic fails at once with the
// event named: hooks.Config.ValidateTopic or
// sqlstore.WriterConfig.ValidateTopic.
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrInvalidTopic, name)
	case len(name) > maxTopicLength:
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidTopic, len(name), maxTopicLength)
	}
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: %q has %q at byte %d (only ASCII letters, digits, '.', '_' and '-')", ErrInvalidTopic, name, r, i)
		}
	}
	return nil
}
