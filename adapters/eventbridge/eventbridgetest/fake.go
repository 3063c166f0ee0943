package eventbridgetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxRequestSize is PutEvents' limit on the entries of one request.
const maxRequestSize = 256 * 1024

// Event is an entry the Server accepted.
type Event struct {
	// ID is the event id the Server gave it.
	ID string
	// EventBus is the bus's name (the default bus is "default").
	EventBus                   string
	Source, DetailType, Detail string
	Resources                  []string
	// Time is the entry's time, zero when it had none.
	Time time.Time
}

// Server is an in-process EventBridge endpoint (see the package
// documentation). It is safe for concurrent use.
type Server struct {
	srv *http.Server
	url string

	mu     sync.Mutex
	buses  map[string]bool
	events []Event
	fail   []string // error codes of the next entries to fail
	seq    int
}

func newServer() *Server {
	return &Server{buses: map[string]bool{"default": true}}
}

// URL is the endpoint's URL, for PublisherConfig.Endpoint.
func (s *Server) URL() string { return s.url }

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// CreateEventBus makes a custom event bus exist (the default bus always
// does).
func (s *Server) CreateEventBus(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buses[name] = true
}

// Events returns the entries accepted so far, in the order accepted.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// FailEntries makes the next len(codes) entries fail, in order, with the
// given error codes ("ThrottlingException", "InternalException", ...).
func (s *Server) FailEntries(codes ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = append(s.fail, codes...)
}

// apiError is an error of a whole request.
type apiError struct {
	status    int
	code, msg string
}

// ServeHTTP serves AWS JSON 1.1 requests of the EventBridge API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		writeError(w, apiError{http.StatusBadRequest, "SerializationException", err.Error()})
		return
	}
	var out any
	var aerr *apiError
	switch target {
	case "AWSEvents.PutEvents":
		out, aerr = s.putEvents(body)
	default:
		aerr = &apiError{http.StatusBadRequest, "UnknownOperationException", "eventbridgetest implements PutEvents only, not " + target}
	}
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(out)
}

func writeError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Errortype", e.code)
	w.WriteHeader(e.status)
	b, _ := json.Marshal(map[string]string{"__type": e.code, "message": e.msg})
	_, _ = w.Write(b)
}

// putEventsInput and putEventsOutput are PutEvents' JSON shapes.
type putEventsInput struct {
	Entries []struct {
		Source       *string
		DetailType   *string
		Detail       *string
		EventBusName *string
		Resources    []string
		Time         *float64
		TraceHeader  *string
	}
	EndpointId *string
}

type resultEntry struct {
	EventId      string `json:",omitempty"`
	ErrorCode    string `json:",omitempty"`
	ErrorMessage string `json:",omitempty"`
}

type putEventsOutput struct {
	FailedEntryCount int
	Entries          []resultEntry
}

func (s *Server) putEvents(body []byte) (any, *apiError) {
	var in putEventsInput
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, &apiError{http.StatusBadRequest, "SerializationException", err.Error()}
	}
	if n := len(in.Entries); n < 1 || n > 10 {
		return nil, &apiError{http.StatusBadRequest, "ValidationException",
			fmt.Sprintf("1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length less than or equal to 10 and greater than or equal to 1 (got %d)", n)}
	}
	size := 0
	for _, e := range in.Entries {
		if e.Time != nil {
			size += 14
		}
		size += len(deref(e.Source)) + len(deref(e.DetailType)) + len(deref(e.Detail))
		for _, r := range e.Resources {
			size += len(r)
		}
	}
	if size >= maxRequestSize {
		return nil, &apiError{http.StatusBadRequest, "ValidationException", "Total size of the entries in the request is over the limit (" + strconv.Itoa(size) + " bytes)"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := putEventsOutput{Entries: make([]resultEntry, len(in.Entries))}
	for i, e := range in.Entries {
		bus := deref(e.EventBusName)
		if bus == "" {
			bus = "default"
		}
		if j := strings.LastIndex(bus, "/"); strings.HasPrefix(bus, "arn:") && j >= 0 {
			bus = bus[j+1:]
		}
		code, msg := "", ""
		switch {
		case len(s.fail) > 0:
			code, msg = s.fail[0], "injected by eventbridgetest.Server.FailEntries"
			s.fail = s.fail[1:]
		case deref(e.Source) == "" || deref(e.DetailType) == "" || e.Detail == nil:
			code, msg = "InvalidArgument", "Parameter(s) Source, DetailType and Detail must be specified"
		case !utf8.ValidString(deref(e.Detail)) || !isJSONObject(deref(e.Detail)):
			code, msg = "MalformedDetail", "Detail is malformed."
		case !s.buses[bus]:
			code, msg = "ResourceNotFoundException", "Event bus "+bus+" does not exist."
		}
		if code != "" {
			out.FailedEntryCount++
			out.Entries[i] = resultEntry{ErrorCode: code, ErrorMessage: msg}
			continue
		}
		s.seq++
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq)
		ev := Event{ID: id, EventBus: bus, Source: deref(e.Source), DetailType: deref(e.DetailType), Detail: deref(e.Detail), Resources: e.Resources}
		if e.Time != nil {
			sec := int64(*e.Time)
			ev.Time = time.Unix(sec, int64((*e.Time-float64(sec))*1e9)).UTC()
		}
		s.events = append(s.events, ev)
		out.Entries[i] = resultEntry{EventId: id}
	}
	return out, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func isJSONObject(s string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &v) == nil
}
