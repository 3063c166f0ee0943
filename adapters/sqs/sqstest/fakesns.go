package sqstest

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const snsXMLNS = "http://sns.amazonaws.com/doc/2010-03-31/"

// serveSNS serves one SNS Query request.
func (s *Server) serveSNS(w http.ResponseWriter, form url.Values) {
	action := form.Get("Action")
	var result any
	var err *apiError
	switch action {
	case "CreateTopic":
		result, err = s.createTopic(form)
	case "Subscribe":
		result, err = s.subscribe(form)
	case "Publish":
		result, err = s.publish(form)
	case "PublishBatch":
		result, err = s.publishBatch(form)
	case "GetTopicAttributes":
		result, err = s.getTopicAttributes(form)
	default:
		err = &apiError{status: http.StatusBadRequest, code: "InvalidAction", msg: "sqstest does not implement " + action, sender: true}
	}
	w.Header().Set("Content-Type", "text/xml")
	if err != nil {
		typ := "Receiver"
		if err.sender {
			typ = "Sender"
		}
		status := err.status
		if status == 0 {
			status = http.StatusBadRequest
		}
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `<ErrorResponse xmlns="%s"><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>`,
			snsXMLNS, typ, xmlEscape(err.code), xmlEscape(err.msg), newID())
		return
	}
	body, merr := xml.Marshal(result)
	if merr != nil {
		http.Error(w, merr.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = fmt.Fprintf(w, `<%sResponse xmlns="%s">%s<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`,
		action, snsXMLNS, body, newID(), action)
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// entries reads a Query map or list parameter: prefix.1.key=..., returning
// for each index n the values of "prefix.n.<field>".
func entries(form url.Values, prefix string) []map[string]string {
	var out []map[string]string
	for n := 1; ; n++ {
		p := prefix + "." + strconv.Itoa(n) + "."
		m := map[string]string{}
		for k, v := range form {
			if strings.HasPrefix(k, p) {
				m[strings.TrimPrefix(k, p)] = v[0]
			}
		}
		if len(m) == 0 {
			return out
		}
		out = append(out, m)
	}
}

// attributeMap reads Attributes.entry.N.key / .value.
func attributeMap(form url.Values, prefix string) map[string]string {
	out := map[string]string{}
	for _, e := range entries(form, prefix) {
		out[e["key"]] = e["value"]
	}
	return out
}

// messageAttributes reads MessageAttributes.entry.N.Name /
// .Value.DataType / .Value.StringValue from fields (already stripped of
// the entry prefix).
func messageAttributes(fields map[string]string, prefix string) (map[string]string, int, *apiError) {
	attrs := map[string]string{}
	size := 0
	for n := 1; ; n++ {
		p := prefix + "." + strconv.Itoa(n) + "."
		name, ok := fields[p+"Name"]
		if !ok {
			break
		}
		typ, val := fields[p+"Value.DataType"], fields[p+"Value.StringValue"]
		if val == "" {
			return nil, 0, senderError("ParameterValueInvalid", "message attribute %q must have a non-empty value", name)
		}
		attrs[name] = val
		size += len(name) + len(typ) + len(val)
	}
	if len(attrs) > maxAttributes {
		return nil, 0, senderError("ParameterValueInvalid", "too many message attributes: %d", len(attrs))
	}
	return attrs, size, nil
}

type createTopicResult struct {
	XMLName  xml.Name `xml:"CreateTopicResult"`
	TopicArn string
}

func (s *Server) createTopic(form url.Values) (any, *apiError) {
	name := form.Get("Name")
	attrs := attributeMap(form, "Attributes.entry")
	if !validName(name, 256) {
		return nil, senderError("InvalidParameter", "invalid topic name %q", name)
	}
	fifo := attrs["FifoTopic"] == "true"
	if fifo != strings.HasSuffix(name, ".fifo") {
		return nil, senderError("InvalidParameter", "a FIFO topic name must end in .fifo, and only a FIFO topic's")
	}
	arn := "arn:aws:sns:" + Region + ":" + Account + ":" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topics[arn] == nil {
		s.topics[arn] = &topic{name: name, arn: arn, fifo: fifo, contentDedup: attrs["ContentBasedDeduplication"] == "true", dedup: map[string]dedupRecord{}}
	}
	return createTopicResult{TopicArn: arn}, nil
}

type topicAttribute struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type getTopicAttributesResult struct {
	XMLName    xml.Name         `xml:"GetTopicAttributesResult"`
	Attributes []topicAttribute `xml:"Attributes>entry"`
}

// getTopicAttributes answers TopicArn, FifoTopic and the subscription
// counts (every subscription of the fake is confirmed at once).
func (s *Server) getTopicAttributes(form url.Values) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[form.Get("TopicArn")]
	if t == nil {
		return nil, &apiError{status: http.StatusNotFound, code: "NotFound", msg: "Topic does not exist", sender: true}
	}
	return getTopicAttributesResult{Attributes: []topicAttribute{
		{Key: "TopicArn", Value: t.arn},
		{Key: "FifoTopic", Value: strconv.FormatBool(t.fifo)},
		{Key: "SubscriptionsConfirmed", Value: strconv.Itoa(len(t.subs))},
		{Key: "SubscriptionsPending", Value: "0"},
	}}, nil
}

type subscribeResult struct {
	XMLName         xml.Name `xml:"SubscribeResult"`
	SubscriptionArn string
}

func (s *Server) subscribe(form url.Values) (any, *apiError) {
	attrs := attributeMap(form, "Attributes.entry")
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[form.Get("TopicArn")]
	if t == nil {
		return nil, &apiError{status: http.StatusNotFound, code: "NotFound", msg: "Topic does not exist", sender: true}
	}
	if form.Get("Protocol") != "sqs" {
		return nil, senderError("InvalidParameter", "sqstest supports only the sqs protocol")
	}
	endpoint := form.Get("Endpoint")
	for _, sub := range t.subs {
		if sub.queueARN == endpoint {
			return subscribeResult{SubscriptionArn: sub.arn}, nil
		}
	}
	sub := &subscription{arn: t.arn + ":" + newID(), queueARN: endpoint, raw: attrs["RawMessageDelivery"] == "true"}
	t.subs = append(t.subs, sub)
	return subscribeResult{SubscriptionArn: sub.arn}, nil
}

type publishResult struct {
	XMLName        xml.Name `xml:"PublishResult"`
	MessageId      string
	SequenceNumber string `xml:",omitempty"`
}

// publishLocked publishes one message to t and delivers it to the
// subscribed queues. s.mu must be held.
func (s *Server) publishLocked(t *topic, body, group, dedupID string, attrs map[string]string, size int) (string, string, *apiError) {
	switch {
	case body == "":
		return "", "", senderError("InvalidParameter", "empty message")
	case size > maxMessageBytes:
		return "", "", senderError("InvalidParameter", "Message too long")
	}
	now := time.Now()
	if t.fifo {
		if group == "" {
			return "", "", senderError("InvalidParameter", "The MessageGroupId parameter is required for FIFO topics")
		}
		if dedupID == "" && !t.contentDedup {
			return "", "", senderError("InvalidParameter", "The topic should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
		}
		if d, ok := t.dedup[dedupID]; ok && dedupID != "" && now.Sub(d.at) < dedupWindow {
			return d.messageID, d.seq, nil
		}
	}
	s.seq++
	id, seq := newID(), ""
	if t.fifo {
		seq = fmt.Sprintf("%020d", s.seq)
		if dedupID != "" {
			t.dedup[dedupID] = dedupRecord{at: now, messageID: id, seq: seq}
		}
	}
	for _, sub := range t.subs {
		name := sub.queueARN[strings.LastIndex(sub.queueARN, ":")+1:]
		q := s.queues[name]
		if q == nil {
			continue // SNS drops deliveries to a queue that is gone
		}
		qbody, qattrs := body, attrs
		if !sub.raw {
			notification := map[string]any{"Type": "Notification", "MessageId": id, "TopicArn": t.arn, "Message": body, "Timestamp": now.UTC().Format(time.RFC3339Nano)}
			if len(attrs) > 0 {
				ma := map[string]any{}
				for k, v := range attrs {
					ma[k] = map[string]string{"Type": "String", "Value": v}
				}
				notification["MessageAttributes"] = ma
			}
			b, _ := json.Marshal(notification)
			qbody, qattrs = string(b), nil
		}
		qdedup := dedupID
		if qdedup == "" && q.fifo {
			qdedup = id
		}
		_, _, _ = s.enqueueLocked(q, qbody, group, qdedup, qattrs, 0)
	}
	return id, seq, nil
}

func (s *Server) publish(form url.Values) (any, *apiError) {
	fields := map[string]string{}
	for k, v := range form {
		fields[k] = v[0]
	}
	attrs, size, err := messageAttributes(fields, "MessageAttributes.entry")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[form.Get("TopicArn")]
	if t == nil {
		return nil, &apiError{status: http.StatusNotFound, code: "NotFound", msg: "Topic does not exist", sender: true}
	}
	body := form.Get("Message")
	id, seq, err := s.publishLocked(t, body, form.Get("MessageGroupId"), form.Get("MessageDeduplicationId"), attrs, size+len(body))
	if err != nil {
		return nil, err
	}
	return publishResult{MessageId: id, SequenceNumber: seq}, nil
}

type batchResultEntry struct {
	Id             string
	MessageId      string
	SequenceNumber string `xml:",omitempty"`
}

type batchErrorEntry struct {
	Id          string
	Code        string
	Message     string
	SenderFault bool
}

type publishBatchResult struct {
	XMLName    xml.Name           `xml:"PublishBatchResult"`
	Successful []batchResultEntry `xml:"Successful>member"`
	Failed     []batchErrorEntry  `xml:"Failed>member"`
}

func (s *Server) publishBatch(form url.Values) (any, *apiError) {
	list := entries(form, "PublishBatchRequestEntries.member")
	switch {
	case len(list) == 0:
		return nil, senderError("EmptyBatchRequest", "the batch request doesn't contain any entries")
	case len(list) > maxBatchEntries:
		return nil, senderError("TooManyEntriesInBatchRequest", "the batch request contains more entries than permissible")
	}
	total := 0
	seen := map[string]bool{}
	for _, e := range list {
		if seen[e["Id"]] {
			return nil, senderError("BatchEntryIdsNotDistinct", "two or more batch entries in the request have the same Id")
		}
		seen[e["Id"]] = true
		_, size, _ := messageAttributes(e, "MessageAttributes.entry")
		total += size + len(e["Message"])
	}
	if total > maxMessageBytes {
		return nil, senderError("BatchRequestTooLong", "the length of all the messages put together is more than the limit")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[form.Get("TopicArn")]
	if t == nil {
		return nil, &apiError{status: http.StatusNotFound, code: "NotFound", msg: "Topic does not exist", sender: true}
	}
	res := publishBatchResult{Successful: []batchResultEntry{}, Failed: []batchErrorEntry{}}
	for _, e := range list {
		attrs, size, err := messageAttributes(e, "MessageAttributes.entry")
		if err == nil && s.fail != nil {
			if f := s.fail(Entry{Destination: t.name, Body: e["Message"], GroupID: e["MessageGroupId"], DedupID: e["MessageDeduplicationId"], Attributes: attrs}); f != nil {
				err = &apiError{code: f.Code, msg: f.Message, sender: f.SenderFault}
			}
		}
		var id, seq string
		if err == nil {
			id, seq, err = s.publishLocked(t, e["Message"], e["MessageGroupId"], e["MessageDeduplicationId"], attrs, size+len(e["Message"]))
		}
		if err != nil {
			res.Failed = append(res.Failed, batchErrorEntry{Id: e["Id"], Code: err.code, Message: err.msg, SenderFault: err.sender})
			continue
		}
		res.Successful = append(res.Successful, batchResultEntry{Id: e["Id"], MessageId: id, SequenceNumber: seq})
	}
	return res, nil
}
