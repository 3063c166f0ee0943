package sqstest

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	// Region and Account are the region and account id of the fake's ARNs.
	Region  = "us-east-1"
	Account = "000000000000"

	maxMessageBytes   = 256 * 1024
	maxBatchEntries   = 10
	maxAttributes     = 10
	dedupWindow       = 5 * time.Minute
	defaultVisibility = 30 * time.Second
)

// Fault is a failure [Server.FailEntries] injects into one entry of a
// SendMessageBatch or PublishBatch request.
type Fault struct {
	// Code and Message are reported in the entry's Failed result.
	Code, Message string
	// SenderFault is reported as the entry's SenderFault.
	SenderFault bool
}

// Entry is what [Server.FailEntries]'s function sees of a batch entry.
type Entry struct {
	// Destination is the queue or topic name.
	Destination string
	// Body, GroupID and DedupID are the entry's body, MessageGroupId and
	// MessageDeduplicationId.
	Body, GroupID, DedupID string
	// Attributes are the entry's string message attributes.
	Attributes map[string]string
}

// Server is an in-process fake of the SQS (AWS JSON 1.0 protocol) and SNS
// (AWS Query protocol) APIs that this module's adapter uses. See the package
// documentation for what it implements.
type Server struct {
	ln   net.Listener
	http *http.Server
	url  string

	mu     sync.Mutex
	queues map[string]*queue
	topics map[string]*topic // by ARN
	seq    int64
	fail   func(Entry) *Fault
}

type queue struct {
	name, url, arn string
	fifo           bool
	contentDedup   bool
	visibility     time.Duration
	attrs          map[string]string
	msgs           []*storedMessage
	byReceipt      map[string]*storedMessage
	groups         map[string]int // undeleted messages per message group
	deleted        int            // messages in msgs marked deleted
	dedup          map[string]dedupRecord
	changed        chan struct{} // closed and replaced whenever q changes
}

type dedupRecord struct {
	at        time.Time
	messageID string
	seq       string
}

type storedMessage struct {
	id, body, group, dedupID, seq string
	attrs                         map[string]string
	receipt                       string
	visibleAt                     time.Time
	receives                      int
	sent                          time.Time
	deleted                       bool
}

type topic struct {
	name, arn    string
	fifo         bool
	contentDedup bool
	subs         []*subscription
	dedup        map[string]dedupRecord
}

type subscription struct {
	arn, queueARN string
	raw           bool
}

// Start starts a Server on a free loopback port.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sqstest: listen: %w", err)
	}
	s := &Server{
		ln:     ln,
		url:    "http://" + ln.Addr().String(),
		queues: make(map[string]*queue),
		topics: make(map[string]*topic),
	}
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.http.Serve(ln) }()
	return s, nil
}

// URL returns the endpoint, "http://127.0.0.1:port", for
// ClientConfig.Endpoint.
func (s *Server) URL() string { return s.url }

// Close stops the server; long polls in progress are interrupted.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		return s.http.Close()
	}
	return nil
}

// FailEntries installs fn, called for every entry of SendMessageBatch and
// PublishBatch requests: a non-nil Fault fails that entry (nothing is
// stored) and is reported in the response's Failed list. nil removes it.
func (s *Server) FailEntries(fn func(Entry) *Fault) {
	s.mu.Lock()
	s.fail = fn
	s.mu.Unlock()
}

// notifyLocked wakes the long polls of q. The server's mutex must be held.
func (q *queue) notifyLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// apiError is an error response.
type apiError struct {
	status int
	code   string // SQS JSON __type / SNS code
	query  string // SQS query-compatible code
	msg    string
	sender bool
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func senderError(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, query: code, msg: fmt.Sprintf(format, args...), sender: true}
}

var errQueueMissing = &apiError{status: http.StatusBadRequest, code: "QueueDoesNotExist", query: "AWS.SimpleQueueService.NonExistentQueue", msg: "The specified queue does not exist.", sender: true}

// ServeHTTP serves SQS JSON requests (X-Amz-Target: AmazonSQS.*) and SNS
// Query requests (Action=...).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if target := r.Header.Get("X-Amz-Target"); strings.HasPrefix(target, "AmazonSQS.") {
		s.serveSQS(w, r, strings.TrimPrefix(target, "AmazonSQS."))
		return
	}
	if r.URL.Path == "/health" {
		_, _ = io.WriteString(w, "ok")
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.serveSNS(w, r.Form)
}

// ---- SQS ----

func (s *Server) serveSQS(w http.ResponseWriter, r *http.Request, op string) {
	var in map[string]json.RawMessage
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	var out any
	if err != nil {
		err = senderError("InvalidParameterValue", "malformed request: %v", err)
	} else {
		switch op {
		case "CreateQueue":
			out, err = s.createQueue(in)
		case "GetQueueUrl":
			out, err = s.getQueueURL(in)
		case "GetQueueAttributes":
			out, err = s.getQueueAttributes(in)
		case "SetQueueAttributes":
			out, err = s.setQueueAttributes(in)
		case "SendMessage":
			out, err = s.sendMessage(in)
		case "SendMessageBatch":
			out, err = s.sendMessageBatch(in)
		case "ReceiveMessage":
			out, err = s.receiveMessage(r.Context(), in)
		case "DeleteMessage":
			out, err = s.deleteMessage(in)
		case "ChangeMessageVisibility":
			out, err = s.changeVisibility(in)
		case "PurgeQueue":
			out, err = s.purgeQueue(in)
		default:
			err = &apiError{status: http.StatusBadRequest, code: "UnsupportedOperation", query: "AWS.SimpleQueueService.UnsupportedOperation", msg: "sqstest does not implement " + op, sender: true}
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if err != nil {
		e, ok := err.(*apiError)
		if !ok {
			e = &apiError{status: http.StatusInternalServerError, code: "InternalError", query: "InternalError", msg: err.Error()}
		}
		fault := "Receiver"
		if e.sender {
			fault = "Sender"
		}
		w.Header().Set("x-amzn-query-error", e.query+";"+fault)
		b, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.msg})
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(e.status)
		_, _ = w.Write(b)
		return
	}
	writeJSON(w, out)
}

// writeJSON writes v as the whole body, with its Content-Length and no
// trailing newline, so that a client that decodes one JSON value has read
// the body to its end.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func str(in map[string]json.RawMessage, key string) string {
	var v string
	_ = json.Unmarshal(in[key], &v)
	return v
}

func num(in map[string]json.RawMessage, key string) (int, bool) {
	raw, ok := in[key]
	if !ok {
		return 0, false
	}
	var v int
	if json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	return v, true
}

// queueByURL returns the queue a QueueUrl names. s.mu must be held.
func (s *Server) queueByURL(u string) (*queue, error) {
	name := u[strings.LastIndex(u, "/")+1:]
	q := s.queues[name]
	if q == nil {
		return nil, errQueueMissing
	}
	return q, nil
}

func validName(name string, max int) bool {
	if name == "" || len(name) > max {
		return false
	}
	base := strings.TrimSuffix(name, ".fifo")
	for _, c := range []byte(base) {
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return base != ""
}

func (s *Server) createQueue(in map[string]json.RawMessage) (any, error) {
	name := str(in, "QueueName")
	var attrs map[string]string
	_ = json.Unmarshal(in["Attributes"], &attrs)
	if !validName(name, 80) {
		return nil, senderError("InvalidParameterValue", "invalid queue name %q", name)
	}
	fifo := attrs["FifoQueue"] == "true"
	if fifo != strings.HasSuffix(name, ".fifo") {
		return nil, senderError("InvalidParameterValue", "a FIFO queue name must end in .fifo, and only a FIFO queue's")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[name]; q != nil {
		for k, v := range attrs {
			if q.attrs[k] != v && k != "Policy" {
				return nil, &apiError{status: http.StatusBadRequest, code: "QueueNameExists", query: "QueueAlreadyExists", msg: "queue exists with other attribute " + k, sender: true}
			}
		}
		return map[string]string{"QueueUrl": q.url}, nil
	}
	q := &queue{
		name: name, url: s.url + "/" + Account + "/" + name, arn: "arn:aws:sqs:" + Region + ":" + Account + ":" + name,
		fifo: fifo, contentDedup: attrs["ContentBasedDeduplication"] == "true", visibility: defaultVisibility,
		attrs: make(map[string]string), dedup: make(map[string]dedupRecord),
		byReceipt: make(map[string]*storedMessage), changed: make(chan struct{}),
		groups: make(map[string]int),
	}
	for k, v := range attrs {
		q.attrs[k] = v
	}
	if v, err := strconv.Atoi(attrs["VisibilityTimeout"]); err == nil {
		q.visibility = time.Duration(v) * time.Second
	}
	s.queues[name] = q
	return map[string]string{"QueueUrl": q.url}, nil
}

func (s *Server) getQueueURL(in map[string]json.RawMessage) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[str(in, "QueueName")]
	if q == nil {
		return nil, errQueueMissing
	}
	return map[string]string{"QueueUrl": q.url}, nil
}

func (s *Server) getQueueAttributes(in map[string]json.RawMessage) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(str(in, "QueueUrl"))
	if err != nil {
		return nil, err
	}
	attrs := map[string]string{
		"QueueArn":                  q.arn,
		"FifoQueue":                 strconv.FormatBool(q.fifo),
		"ContentBasedDeduplication": strconv.FormatBool(q.contentDedup),
		"VisibilityTimeout":         strconv.Itoa(int(q.visibility / time.Second)),
	}
	visible, inFlight := 0, 0
	now := time.Now()
	for _, m := range q.msgs {
		if m.deleted {
			continue
		}
		if m.visibleAt.After(now) {
			inFlight++
		} else {
			visible++
		}
	}
	attrs["ApproximateNumberOfMessages"] = strconv.Itoa(visible)
	attrs["ApproximateNumberOfMessagesNotVisible"] = strconv.Itoa(inFlight)
	for k, v := range q.attrs {
		if _, ok := attrs[k]; !ok {
			attrs[k] = v
		}
	}
	return map[string]any{"Attributes": attrs}, nil
}

func (s *Server) setQueueAttributes(in map[string]json.RawMessage) (any, error) {
	var attrs map[string]string
	_ = json.Unmarshal(in["Attributes"], &attrs)
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(str(in, "QueueUrl"))
	if err != nil {
		return nil, err
	}
	for k, v := range attrs {
		switch k {
		case "FifoQueue":
			return nil, senderError("InvalidAttributeName", "FifoQueue cannot be changed")
		case "ContentBasedDeduplication":
			q.contentDedup = v == "true"
		case "VisibilityTimeout":
			if n, err := strconv.Atoi(v); err == nil {
				q.visibility = time.Duration(n) * time.Second
			}
		}
		q.attrs[k] = v
	}
	return map[string]string{}, nil
}

// sqsEntry is a SendMessage request or batch entry.
type sqsEntry struct {
	ID                     string `json:"Id"`
	MessageBody            string
	MessageGroupID         string `json:"MessageGroupId"`
	MessageDeduplicationID string `json:"MessageDeduplicationId"`
	DelaySeconds           int
	MessageAttributes      map[string]struct {
		DataType    string
		StringValue *string
		BinaryValue []byte
	}
}

// stringAttrs validates e's attributes and returns them as strings
// (binary values base64-encoded by JSON are kept as their raw bytes).
func (e *sqsEntry) stringAttrs() (map[string]string, int, *apiError) {
	if len(e.MessageAttributes) > maxAttributes {
		return nil, 0, senderError("InvalidParameterValue", "number of message attributes [%d] exceeds the allowed maximum [%d]", len(e.MessageAttributes), maxAttributes)
	}
	attrs := make(map[string]string, len(e.MessageAttributes))
	size := 0
	for k, v := range e.MessageAttributes {
		switch {
		case k == "" || len(k) > 256:
			return nil, 0, senderError("InvalidParameterValue", "invalid attribute name %q", k)
		case v.DataType == "":
			return nil, 0, senderError("InvalidParameterValue", "attribute %q has no DataType", k)
		case v.StringValue != nil:
			if *v.StringValue == "" {
				return nil, 0, senderError("InvalidParameterValue", "message attribute %q must contain a non-empty value", k)
			}
			if !validText(*v.StringValue) {
				return nil, 0, senderError("InvalidParameterValue", "attribute %q holds invalid characters", k)
			}
			attrs[k] = *v.StringValue
		default:
			attrs[k] = string(v.BinaryValue)
		}
		size += len(k) + len(v.DataType) + len(attrs[k])
	}
	return attrs, size, nil
}

func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return false
		}
	}
	return true
}

// enqueueLocked validates and stores one message; it returns the message id
// and sequence number (FIFO). A duplicate within the deduplication window is
// reported as sent with the first message's id, and not stored. s.mu must be
// held.
func (s *Server) enqueueLocked(q *queue, body, group, dedupID string, attrs map[string]string, size int) (id, seq string, err *apiError) {
	switch {
	case body == "":
		return "", "", senderError("MissingParameter", "the request must contain the parameter MessageBody")
	case !validText(body):
		return "", "", senderError("InvalidMessageContents", "invalid binary character in message body")
	case size > maxMessageBytes:
		return "", "", senderError("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", maxMessageBytes)
	}
	now := time.Now()
	if q.fifo {
		if group == "" {
			return "", "", senderError("MissingParameter", "the request must contain the parameter MessageGroupId")
		}
		if dedupID == "" {
			if !q.contentDedup {
				return "", "", senderError("InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			}
			sum := sha256.Sum256([]byte(body))
			dedupID = hex.EncodeToString(sum[:])
		}
		if d, ok := q.dedup[dedupID]; ok && now.Sub(d.at) < dedupWindow {
			return d.messageID, d.seq, nil
		}
	}
	s.seq++
	id = newID()
	if q.fifo {
		seq = fmt.Sprintf("%020d", s.seq)
		q.dedup[dedupID] = dedupRecord{at: now, messageID: id, seq: seq}
	}
	q.msgs = append(q.msgs, &storedMessage{id: id, body: body, group: group, dedupID: dedupID, seq: seq, attrs: attrs, sent: now})
	q.groups[group]++
	q.notifyLocked()
	return id, seq, nil
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func (s *Server) sendMessage(in map[string]json.RawMessage) (any, error) {
	var e sqsEntry
	raw, _ := json.Marshal(in)
	_ = json.Unmarshal(raw, &e)
	attrs, size, aerr := e.stringAttrs()
	if aerr != nil {
		return nil, aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(str(in, "QueueUrl"))
	if err != nil {
		return nil, err
	}
	id, seq, aerr := s.enqueueLocked(q, e.MessageBody, e.MessageGroupID, e.MessageDeduplicationID, attrs, size+len(e.MessageBody))
	if aerr != nil {
		return nil, aerr
	}
	out := map[string]string{"MessageId": id, "MD5OfMessageBody": md5Hex(e.MessageBody)}
	if seq != "" {
		out["SequenceNumber"] = seq
	}
	return out, nil
}

func (s *Server) sendMessageBatch(in map[string]json.RawMessage) (any, error) {
	var entries []sqsEntry
	_ = json.Unmarshal(in["Entries"], &entries)
	switch {
	case len(entries) == 0:
		return nil, senderError("EmptyBatchRequest", "there should be at least one SendMessageBatchRequestEntry in the request")
	case len(entries) > maxBatchEntries:
		return nil, senderError("TooManyEntriesInBatchRequest", "maximum number of entries per request are %d; you have sent %d", maxBatchEntries, len(entries))
	}
	ids := make(map[string]bool)
	total := 0
	for _, e := range entries {
		if ids[e.ID] {
			return nil, senderError("BatchEntryIdsNotDistinct", "id %s repeated", e.ID)
		}
		ids[e.ID] = true
		_, size, _ := e.stringAttrs()
		total += size + len(e.MessageBody)
	}
	if total > maxMessageBytes {
		return nil, senderError("BatchRequestTooLong", "batch requests cannot be longer than %d bytes; you have sent %d bytes", maxMessageBytes, total)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(str(in, "QueueUrl"))
	if err != nil {
		return nil, err
	}
	successful, failed := []map[string]string{}, []map[string]any{}
	for _, e := range entries {
		attrs, size, aerr := e.stringAttrs()
		if aerr == nil && s.fail != nil {
			if f := s.fail(Entry{Destination: q.name, Body: e.MessageBody, GroupID: e.MessageGroupID, DedupID: e.MessageDeduplicationID, Attributes: attrs}); f != nil {
				aerr = &apiError{code: f.Code, msg: f.Message, sender: f.SenderFault}
			}
		}
		var id, seq string
		if aerr == nil {
			id, seq, aerr = s.enqueueLocked(q, e.MessageBody, e.MessageGroupID, e.MessageDeduplicationID, attrs, size+len(e.MessageBody))
		}
		if aerr != nil {
			failed = append(failed, map[string]any{"Id": e.ID, "Code": aerr.code, "Message": aerr.msg, "SenderFault": aerr.sender})
			continue
		}
		res := map[string]string{"Id": e.ID, "MessageId": id, "MD5OfMessageBody": md5Hex(e.MessageBody)}
		if seq != "" {
			res["SequenceNumber"] = seq
		}
		successful = append(successful, res)
	}
	return map[string]any{"Successful": successful, "Failed": failed}, nil
}

func (s *Server) receiveMessage(ctx context.Context, in map[string]json.RawMessage) (any, error) {
	max := 1
	if n, ok := num(in, "MaxNumberOfMessages"); ok {
		if n < 1 || n > 10 {
			return nil, senderError("InvalidParameterValue", "MaxNumberOfMessages must be between 1 and 10")
		}
		max = n
	}
	wait, _ := num(in, "WaitTimeSeconds")
	if wait < 0 || wait > 20 {
		return nil, senderError("InvalidParameterValue", "WaitTimeSeconds must be between 0 and 20")
	}
	vis, hasVis := num(in, "VisibilityTimeout")
	var attrNames, sysNames []string
	_ = json.Unmarshal(in["MessageAttributeNames"], &attrNames)
	_ = json.Unmarshal(in["MessageSystemAttributeNames"], &sysNames)
	var legacy []string
	_ = json.Unmarshal(in["AttributeNames"], &legacy)
	sysNames = append(sysNames, legacy...)
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		s.mu.Lock()
		q, err := s.queueByURL(str(in, "QueueUrl"))
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if ctx.Err() != nil {
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		visibility := q.visibility
		if hasVis {
			visibility = time.Duration(vis) * time.Second
		}
		msgs, next := q.takeLocked(max, visibility)
		changed := q.changed
		s.mu.Unlock()
		if len(msgs) > 0 || !time.Now().Before(deadline) {
			out := make([]map[string]any, 0, len(msgs))
			for _, m := range msgs {
				out = append(out, m.result(attrNames, sysNames))
			}
			return map[string]any{"Messages": out}, nil
		}
		wake := time.Until(deadline)
		if !next.IsZero() && time.Until(next) < wake {
			wake = time.Until(next)
		}
		timer := time.NewTimer(max0(wake))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func max0(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return time.Millisecond
	}
	return d
}

// takeLocked hands out up to max visible messages, making them invisible
// for visibility, and returns the time the next in-flight message becomes
// visible (zero when none). On a FIFO queue a message group with a message
// in flight hands out nothing: a group's messages come in order, the next
// only after the earlier ones are deleted or visible again.
func (q *queue) takeLocked(max int, visibility time.Duration) ([]*storedMessage, time.Time) {
	now := time.Now()
	var next time.Time
	blocked := make(map[string]bool)
	// Only received messages can be in flight; byReceipt holds each once.
	for _, m := range q.byReceipt {
		if m.visibleAt.After(now) {
			blocked[m.group] = true
			if next.IsZero() || m.visibleAt.Before(next) {
				next = m.visibleAt
			}
		}
	}
	if q.fifo && len(blocked) == len(q.groups) {
		return nil, next // every group waits for a message in flight
	}
	var taken []*storedMessage
	for _, m := range q.msgs {
		if len(taken) == max {
			break
		}
		if m.deleted || m.visibleAt.After(now) || q.fifo && blocked[m.group] {
			continue
		}
		m.receives++
		delete(q.byReceipt, m.receipt)
		m.receipt = newID() + "-" + m.id
		q.byReceipt[m.receipt] = m
		m.visibleAt = now.Add(visibility)
		taken = append(taken, m)
	}
	return taken, next
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// result renders a received message.
func (m *storedMessage) result(attrNames, sysNames []string) map[string]any {
	res := map[string]any{"MessageId": m.id, "ReceiptHandle": m.receipt, "Body": m.body, "MD5OfBody": md5Hex(m.body)}
	all := func(names []string, name string) bool {
		for _, n := range names {
			if n == "All" || n == ".*" || n == name || strings.HasSuffix(n, ".*") && strings.HasPrefix(name, strings.TrimSuffix(n, "*")) {
				return true
			}
		}
		return false
	}
	attrs := map[string]any{}
	for k, v := range m.attrs {
		if all(attrNames, k) {
			attrs[k] = map[string]string{"DataType": "String", "StringValue": v}
		}
	}
	if len(attrs) > 0 {
		res["MessageAttributes"] = attrs
	}
	sys := map[string]string{}
	for k, v := range map[string]string{
		"MessageGroupId":                   m.group,
		"MessageDeduplicationId":           m.dedupID,
		"SequenceNumber":                   m.seq,
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.sent.UnixMilli(), 10),
	} {
		if v != "" && all(sysNames, k) {
			sys[k] = v
		}
	}
	if len(sys) > 0 {
		res["Attributes"] = sys
	}
	return res
}

// byReceiptLocked finds the message a receipt handle was last issued for.
func (q *queue) byReceiptLocked(receipt string) *storedMessage {
	return q.byReceipt[receipt]
}

// deleteLocked removes m, compacting msgs once half of it is deleted.
func (q *queue) deleteLocked(m *storedMessage) {
	delete(q.byReceipt, m.receipt)
	m.deleted = true
	q.deleted++
	if q.groups[m.group]--; q.groups[m.group] == 0 {
		delete(q.groups, m.group)
	}
	if q.deleted*2 < len(q.msgs) {
		return
	}
	kept := q.msgs[:0]
	for _, m := range q.msgs {
		if !m.deleted {
			kept = append(kept, m)
		}
	}
	clear(q.msgs[len(kept):])
	q.msgs, q.deleted = kept, 0
}

func (s *Server) deleteMessage(in map[string]json.RawMessage) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(str(in, "QueueUrl"))
	if err != nil {
		return nil, err
	}
	receipt := str(in, "ReceiptHandle")
	if receipt == "" {
		return nil, senderError("MissingParameter", "the request must contain the parameter ReceiptHandle")
	}
	// As SQS does, a receipt handle of a message already deleted (or
	// received again since) deletes nothing and is no error.
	if m := q.byReceiptLocked(receipt); m != nil {
		q.deleteLocked(m)
		q.notifyLocked()
	}
	return map[string]string{}, nil
}

func (s *Server) changeVisibility(in map[string]json.RawMessage) (any, error) {
	vis, ok := num(in, "VisibilityTimeout")
	if !ok || vis < 0 || vis > 43200 {
		return nil, senderError("InvalidParameterValue", "VisibilityTimeout must be between 0 and 43200")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(str(in, "QueueUrl"))
	if err != nil {
		return nil, err
	}
	m := q.byReceiptLocked(str(in, "ReceiptHandle"))
	if m == nil || !m.visibleAt.After(time.Now()) {
		return nil, &apiError{status: http.StatusBadRequest, code: "MessageNotInflight", query: "AWS.SimpleQueueService.MessageNotInflight", msg: "the message is not in flight", sender: true}
	}
	m.visibleAt = time.Now().Add(time.Duration(vis) * time.Second)
	q.notifyLocked()
	return map[string]string{}, nil
}

func (s *Server) purgeQueue(in map[string]json.RawMessage) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(str(in, "QueueUrl"))
	if err != nil {
		return nil, err
	}
	q.msgs, q.deleted = nil, 0
	clear(q.byReceipt)
	clear(q.groups)
	q.notifyLocked()
	return map[string]string{}, nil
}
