package sqs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

const (
	// AttrMetadata is the message attribute that carries all of a message's
	// metadata as one JSON object (string to string) when it does not fit in
	// attributes of its own (see package doc, "Message format").
	AttrMetadata = "outbox_metadata"

	// AttrBody is the message attribute that says how the body encodes the
	// payload when it is not the payload itself: "base64" (standard
	// encoding, for a payload that is not valid UTF-8 or holds characters SQS
	// refuses) or "empty" (an empty payload; SQS refuses empty bodies, so the
	// body is "-").
	AttrBody = "outbox_body"

	// maxAttributes is SQS's and SNS's limit on message attributes.
	maxAttributes = 10

	// stringType is the DataType of every attribute this package writes.
	stringType = "String"

	bodyBase64 = "base64"
	bodyEmpty  = "empty"
)

// encoded is a message in SQS form.
type encoded struct {
	body  string
	attrs map[string]string
	// size is the size SQS counts against its limit: the body plus each
	// attribute's name, data type and value.
	size int
}

// encode turns a Watermill message into a body and string attributes.
func encode(msg *message.Message) encoded {
	var e encoded
	e.attrs = make(map[string]string, len(msg.Metadata)+1)
	switch {
	case len(msg.Payload) == 0:
		e.body = "-"
		e.attrs[AttrBody] = bodyEmpty
	case validText(string(msg.Payload)):
		e.body = string(msg.Payload)
	default:
		e.body = base64.StdEncoding.EncodeToString(msg.Payload)
		e.attrs[AttrBody] = bodyBase64
	}
	if fitsAttributes(msg.Metadata, maxAttributes-len(e.attrs)) {
		maps.Copy(e.attrs, msg.Metadata)
	} else if len(msg.Metadata) > 0 {
		// json.Marshal of a map[string]string cannot fail; it escapes
		// control characters and replaces invalid UTF-8 with U+FFFD.
		b, _ := json.Marshal(map[string]string(msg.Metadata))
		e.attrs[AttrMetadata] = string(b)
	}
	e.size = len(e.body)
	for k, v := range e.attrs {
		e.size += len(k) + len(stringType) + len(v)
	}
	return e
}

// fitsAttributes reports whether md can travel as at most n attributes of
// their own: valid names, not reserved, non-empty values of characters SQS
// accepts.
func fitsAttributes(md message.Metadata, n int) bool {
	if len(md) > n {
		return false
	}
	for k, v := range md {
		if k == AttrMetadata || k == AttrBody || !validAttributeName(k) || v == "" || !validText(v) {
			return false
		}
	}
	return true
}

// validAttributeName reports whether SQS accepts name as a message attribute
// name: 1 to 256 of A-Z a-z 0-9 _ - ., no leading, trailing or doubled
// period, and no "AWS." or "Amazon." prefix.
func validAttributeName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// validText reports whether s is valid UTF-8 made only of the characters SQS
// allows in bodies and attribute values: #x9, #xA, #xD, #x20 to #xD7FF,
// #xE000 to #xFFFD, #x10000 to #x10FFFF.
func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// decode turns a received body and string attributes back into a payload
// and metadata. Attributes other than the reserved ones become metadata.
func decode(body string, attrs map[string]string) ([]byte, message.Metadata, error) {
	md := make(message.Metadata, len(attrs))
	if packed, ok := attrs[AttrMetadata]; ok {
		if err := json.Unmarshal([]byte(packed), (*map[string]string)(&md)); err != nil {
			return nil, nil, fmt.Errorf("sqs: attribute %s: %w", AttrMetadata, err)
		}
	}
	for k, v := range attrs {
		if k != AttrMetadata && k != AttrBody {
			md[k] = v
		}
	}
	switch enc := attrs[AttrBody]; enc {
	case "":
		return []byte(body), md, nil
	case bodyEmpty:
		return []byte{}, md, nil
	case bodyBase64:
		payload, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return nil, nil, fmt.Errorf("sqs: base64 body: %w", err)
		}
		return payload, md, nil
	default:
		return nil, nil, fmt.Errorf("sqs: unknown %s %q", AttrBody, enc)
	}
}
