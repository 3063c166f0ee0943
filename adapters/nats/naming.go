package nats

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
)

// maxNamePart bounds the readable part of a derived stream or consumer name,
// so that names stay well under the server's limits and readable in
// `nats stream ls`.
const maxNamePart = 48

// Subject returns the NATS subject of a Watermill topic: the topic itself.
// A dotted topic ("orders.created") is a subject of several tokens, which is
// valid. The error wraps [ErrInvalidTopic] when the topic cannot be published
// to: empty, containing whitespace or control characters, an empty token
// ("a..b", leading or trailing dot), or a wildcard token ("*", ">").
func Subject(topic string) (string, error) {
	if topic == "" {
		return "", fmt.Errorf("%w: empty topic", ErrInvalidTopic)
	}
	if strings.IndexFunc(topic, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "", fmt.Errorf("%w: %q contains whitespace or a control character", ErrInvalidTopic, topic)
	}
	for tok := range strings.SplitSeq(topic, ".") {
		switch tok {
		case "":
			return "", fmt.Errorf("%w: %q has an empty token", ErrInvalidTopic, topic)
		case "*", ">":
			return "", fmt.Errorf("%w: %q has a wildcard token %q", ErrInvalidTopic, topic, tok)
		}
	}
	return topic, nil
}

// StreamName returns the name of the stream the adapter creates for topic
// when no stream captures the topic's subject yet: prefix, "_", the topic
// with every character a stream name may not hold ('.', '*', '>', '/', '\',
// whitespace, control characters) replaced by '_' and cut to 48 bytes, "_",
// and the first 8 hex digits of the SHA-256 of the topic. The hash keeps
// topics apart that differ only in replaced characters ("orders.created" and
// "orders_created") or beyond the cut. An empty prefix drops the prefix and
// its separator.
//
// Example: StreamName("OUTBOX", "orders.created") is
// "OUTBOX_orders_created_" followed by 8 hex digits.
func StreamName(prefix, topic string) string {
	return derivedName(prefix, topic)
}

// ConsumerName returns the durable consumer name of a consumer group, by the
// same rule as [StreamName] without a prefix.
func ConsumerName(group string) string {
	return derivedName("", group)
}

func derivedName(prefix, s string) string {
	sum := sha256.Sum256([]byte(s))
	clean := sanitize(s)
	if len(clean) > maxNamePart {
		clean = clean[:maxNamePart]
	}
	name := clean + "_" + hex.EncodeToString(sum[:4])
	if prefix != "" {
		name = prefix + "_" + name
	}
	return name
}

// sanitize replaces every byte that is not an ASCII letter, digit, '-' or
// '_' with '_': a strict subset of what NATS names allow, so the result is
// a valid name and a valid file name on every server platform.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// validPrefix reports whether p may start a stream name.
func validPrefix(p string) bool {
	return sanitize(p) == p
}
