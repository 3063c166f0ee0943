package runtimetest

import (
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// CheckCloudEvent checks message metadata against the CloudEvents 1.0 rules
// for binary content mode under a binding prefix (runtime.CloudEventsPrefixKafka
// for Kafka; "" means that default, ce_, as [runtime.CloudEvents.Prefix]
// does): the required attributes id, source, specversion and type are
// present and non-empty, specversion is "1.0", source is a URI-reference,
// time is RFC 3339, dataschema an absolute URI, subject non-empty when
// present, and every attribute name is lowercase ASCII letters and digits,
// starting with a letter, at most 20 characters (a SHOULD of the spec, taken
// as a MUST here). The content-type key, when present, is a media type (the
// datacontenttype attribute). Keys without the prefix are not attributes and
// are not checked. It returns every violation, joined.
//
// It is written from the specification, independently of
// [runtime.CloudEvents], so that tests of publishers and adapters can check
// what reaches the broker.
func CheckCloudEvent(md map[string]string, prefix string) error {
	if prefix == "" {
		prefix = runtime.CloudEventsPrefixKafka
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("cloudevents: "+format, args...)) }
	attrs := map[string]string{}
	for k, v := range md {
		if name, ok := strings.CutPrefix(k, prefix); ok {
			attrs[name] = v
			if !attributeName(name) {
				bad("attribute name %q (key %q) is not 1-20 lowercase letters or digits starting with a letter", name, k)
			}
		}
	}
	for _, name := range []string{"id", "source", "specversion", "type"} {
		if attrs[name] == "" {
			bad("required attribute %s%s is missing or empty", prefix, name)
		}
	}
	if v, ok := attrs["specversion"]; ok && v != "1.0" {
		bad("specversion %q, want 1.0", v)
	}
	if v := attrs["source"]; v != "" {
		if _, err := url.Parse(v); err != nil {
			bad("source %q is not a URI-reference: %v", v, err)
		}
	}
	if v, ok := attrs["time"]; ok {
		if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
			bad("time %q is not RFC 3339: %v", v, err)
		}
	}
	if v, ok := attrs["dataschema"]; ok {
		if u, err := url.Parse(v); err != nil || !u.IsAbs() {
			bad("dataschema %q is not an absolute URI", v)
		}
	}
	if v, ok := attrs["subject"]; ok && v == "" {
		bad("subject is empty")
	}
	if _, ok := attrs["datacontenttype"]; ok && prefix == runtime.CloudEventsPrefixKafka {
		bad("datacontenttype travels in the content-type header under the Kafka binding, not as %sdatacontenttype", prefix)
	}
	if v, ok := md[runtime.MetadataContentType]; ok {
		if _, _, err := mime.ParseMediaType(v); err != nil {
			bad("content-type %q is not a media type: %v", v, err)
		}
	}
	return errors.Join(errs...)
}

// attributeName reports whether s is a valid CloudEvents attribute name.
func attributeName(s string) bool {
	if s == "" || len(s) > 20 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
