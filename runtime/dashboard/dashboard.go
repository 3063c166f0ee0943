package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Store is what the dashboard reads and changes: the methods of
// [*sqlstore.Store] it uses, so a *sqlstore.Store satisfies it.
type Store interface {
	// Stats returns the outbox's counts and the age of its oldest pending
	// event.
	Stats(ctx context.Context) (relay.Stats, error)
	// StatsByType returns the same per topic and event type.
	StatsByType(ctx context.Context) ([]sqlstore.GroupStats, error)
	// Entries returns one keyset page of rows matching q.
	Entries(ctx context.Context, q sqlstore.Query) ([]sqlstore.Entry, error)
	// Entry returns one row by id, or an error wrapping
	// [sqlstore.ErrNotFound].
	Entry(ctx context.Context, id int64) (sqlstore.Entry, error)
	// Unpark makes parked rows pending again and returns how many it
	// changed.
	Unpark(ctx context.Context, ids ...int64) (int64, error)
	// Discard marks parked rows as done without publishing them and returns
	// how many it changed.
	Discard(ctx context.Context, ids ...int64) (int64, error)
}

// Config configures a [Handler]. The zero value is a read-only dashboard.
type Config struct {
	// AllowActions shows Retry and Discard buttons on parked events and
	// accepts the POSTs they send. The default, false, is read-only: no
	// buttons, and 403 Forbidden for the confirmation page and every POST.
	AllowActions bool
	// Title is shown in the page header and title (default "Outbox").
	Title string
	// SampleInterval is how often [Handler.Run] samples [Store.Stats] for
	// the backlog and lag charts, and how old the last sample may be before
	// a page request takes a new one (default 10s).
	SampleInterval time.Duration
	// History is how many samples the charts keep, the oldest dropped first
	// (default 360: an hour at the default interval).
	History int
	// PageSize is how many events a list shows per page (default 50, at
	// most [sqlstore.MaxQueryLimit]).
	PageSize int
	// ParkedShown is how many parked events the overview lists (default
	// 20); the rest are a link away.
	ParkedShown int
	// QueryTimeout bounds the store calls of one request (default 10s).
	QueryTimeout time.Duration
	// Slot, when set, reports the replication slot of a change-data-capture
	// relay (package runtime/sqlstore/pgcdc), which the overview shows
	// beside the counts: whether a relay streams from it, and the WAL it
	// keeps. It is called once per overview, under QueryTimeout; an error
	// is shown in its place. Default: nil, no slot panel.
	Slot func(ctx context.Context) (SlotFigures, error)
	// DeadLetters, when set, reports the consumers' dead letters (the
	// Counts of runtime/consumer's DeadLetterTable, or of a
	// sqlstore.DeadLetters), which the overview shows per consumer: how
	// many wait for an operator, since when, and the command that lists
	// and re-drives them (`outbox deadletters`). It is called once per
	// overview, under QueryTimeout; an error is shown in its place.
	// Default: nil, no dead-letter panel.
	DeadLetters func(ctx context.Context) ([]sqlstore.DeadLetterCount, error)
	// Logger receives store and sampling failures (Warn, Error) and, at
	// Info, every retry and discard done through the dashboard, as an
	// audit trail. Default: [slog.Default]; pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Title == "" {
		c.Title = "Outbox"
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = 10 * time.Second
	}
	if c.History == 0 {
		c.History = 360
	}
	if c.PageSize == 0 {
		c.PageSize = 50
	}
	if c.ParkedShown == 0 {
		c.ParkedShown = 20
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ErrInvalidConfig is returned by [New] for a negative or out-of-range
// [Config] field.
var ErrInvalidConfig = errors.New("dashboard: invalid config")

func (c Config) validate() error {
	switch {
	case c.SampleInterval < 0:
		return fmt.Errorf("%w: SampleInterval %v is negative", ErrInvalidConfig, c.SampleInterval)
	case c.History < 2:
		return fmt.Errorf("%w: History %d: need at least 2 samples", ErrInvalidConfig, c.History)
	case c.PageSize < 1 || c.PageSize > sqlstore.MaxQueryLimit-1:
		return fmt.Errorf("%w: PageSize %d: want 1 to %d", ErrInvalidConfig, c.PageSize, sqlstore.MaxQueryLimit-1)
	case c.ParkedShown < 1 || c.ParkedShown > sqlstore.MaxQueryLimit-1:
		return fmt.Errorf("%w: ParkedShown %d: want 1 to %d", ErrInvalidConfig, c.ParkedShown, sqlstore.MaxQueryLimit-1)
	case c.QueryTimeout < 0:
		return fmt.Errorf("%w: QueryTimeout %v is negative", ErrInvalidConfig, c.QueryTimeout)
	}
	return nil
}

// Handler serves the dashboard. It is safe for concurrent use.
type Handler struct {
	store Store
	cfg   Config
	pages map[string]*template.Template
	csrf  *csrf
	cop   *http.CrossOriginProtection

	refresh sync.Mutex // one reader of Stats and StatsByType at a time

	mu       sync.Mutex // guards the fields below
	history  *ring
	groups   []sqlstore.GroupStats
	groupsAt time.Time // when groups was read; zero: read again
}

//go:embed templates/*.html
var templateFS embed.FS

// New returns a dashboard over store. Call [Handler.Run] to sample the
// backlog in the background.
func New(store Store, cfg Config) (*Handler, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("dashboard: csrf key: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	return &Handler{
		store:   store,
		cfg:     cfg,
		pages:   pages,
		csrf:    &csrf{key: key, maxAge: time.Hour, now: time.Now},
		cop:     http.NewCrossOriginProtection(),
		history: newRing(cfg.History),
	}, nil
}

func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "events", "event", "confirm", "error", "done"} {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// Run samples [Store.Stats] every [Config.SampleInterval] for the charts
// until ctx is cancelled, then returns nil. A failed sample is logged and
// skipped.
func (h *Handler) Run(ctx context.Context) error {
	t := time.NewTicker(h.cfg.SampleInterval)
	defer t.Stop()
	for {
		if _, err := h.Sample(ctx); err != nil && ctx.Err() == nil {
			h.cfg.Logger.Warn("outbox dashboard: sample failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample reads [Store.Stats] once, adds it to the charts' history and
// returns it.
func (h *Handler) Sample(ctx context.Context) (relay.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.QueryTimeout)
	defer cancel()
	st, err := h.store.Stats(ctx)
	if err != nil {
		return relay.Stats{}, err
	}
	h.record(time.Now(), st)
	return st, nil
}

func (h *Handler) record(at time.Time, st relay.Stats) {
	h.mu.Lock()
	h.history.add(sample{At: at, Stats: st})
	h.mu.Unlock()
}

// ServeHTTP serves the dashboard's pages: the overview at the mount point,
// "events" (lists and search), "event?id=N", and, with AllowActions,
// "confirm" and the POST target "action".
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	p := r.URL.Path
	if p == "" {
		// Mounted with http.StripPrefix("/outbox", h) and asked for
		// "/outbox": the relative links need the trailing slash.
		redirectToDir(w, r)
		return
	}
	p = strings.TrimPrefix(p, "/")
	if p == "action" {
		h.action(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	switch p {
	case "":
		h.overview(w, r)
	case "events":
		h.events(w, r)
	case "event":
		h.event(w, r)
	case "confirm":
		h.confirm(w, r)
	default:
		h.fail(w, r, http.StatusNotFound, "no such page")
	}
}

func setSecurityHeaders(hd http.Header) {
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
}

// redirectToDir redirects a request for the mount point without its
// trailing slash to the same path with it, relatively, so it works under
// any prefix.
func redirectToDir(w http.ResponseWriter, r *http.Request) {
	orig := r.RequestURI
	if u, err := url.ParseRequestURI(orig); err == nil {
		orig = u.Path
	}
	loc := path.Base(orig) + "/"
	if loc == "//" || loc == "./" || loc == "/" {
		loc = "./"
	}
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusMovedPermanently)
}

// timing measures a request's store calls and rendering for the
// Server-Timing header.
type timing struct {
	start time.Time
	db    time.Duration
}

func (t *timing) since(start time.Time) { t.db += time.Since(start) }

// page is what every template gets.
type page struct {
	Title        string
	Heading      string
	AllowActions bool
	Nav          string
	Data         any
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, heading string, tm *timing, data any) {
	var buf bytes.Buffer
	renderStart := time.Now()
	err := h.pages[name].ExecuteTemplate(&buf, "layout.html", page{
		Title:        h.cfg.Title,
		Heading:      heading,
		AllowActions: h.cfg.AllowActions,
		Nav:          name,
		Data:         data,
	})
	if err != nil {
		h.cfg.Logger.Error("outbox dashboard: render failed", "page", name, "error", err)
		http.Error(w, "dashboard: render failed", http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Length", strconv.Itoa(buf.Len()))
	if tm != nil {
		hd.Set("Server-Timing", fmt.Sprintf("db;dur=%.1f, render;dur=%.1f",
			float64(tm.db.Microseconds())/1000, float64(time.Since(renderStart).Microseconds())/1000))
	}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", http.StatusText(status), nil, msg)
}

func (h *Handler) storeFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.cfg.Logger.Error("outbox dashboard: store call failed", "what", what, "error", err)
	h.fail(w, r, http.StatusInternalServerError, what+": "+err.Error())
}

// SlotFigures are what the overview shows of a change-data-capture
// relay's replication slot (see [Config.Slot]).
type SlotFigures struct {
	// Name is the slot's name.
	Name string
	// Exists reports whether the slot exists; the other fields are zero
	// when it does not.
	Exists bool
	// Streaming reports whether a relay streams from the slot now.
	Streaming bool
	// LagBytes is the WAL written since the slot's confirmed position:
	// what the slot keeps the server from recycling.
	LagBytes int64
	// WALStatus is the server's wal_status of the slot (reserved,
	// extended, unreserved, or lost: invalidated).
	WALStatus string
	// ConfirmedLSN is the slot's confirmed position, in PostgreSQL's
	// text form.
	ConfirmedLSN string
}

// slotPanel is the overview's slot panel: the figures, or why there are
// none.
type slotPanel struct {
	SlotFigures
	Err string
}

// deadLetterPanel is the overview's dead-letter panel: the counts, or why
// there are none.
type deadLetterPanel struct {
	Counts []sqlstore.DeadLetterCount
	Err    string
}

// overviewData is the overview page's data.
type overviewData struct {
	Slot        *slotPanel
	DeadLetters *deadLetterPanel
	Stats       relay.Stats
	StatsAt     time.Time
	GroupsAt    time.Time
	Backlog     chart
	Lag         chart
	Parked      chart
	Groups      []sqlstore.GroupStats
	GroupsMore  int
	ParkedRows  []sqlstore.Entry
	ParkedMore  bool
	Refresh     int
	SampleEvery time.Duration
}

const maxGroupsShown = 200

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
	defer cancel()
	tm := &timing{start: time.Now()}
	t0 := time.Now()
	snap, err := h.snapshot(ctx)
	tm.since(t0)
	if err != nil {
		h.storeFailed(w, r, "stats", err)
		return
	}
	t0 = time.Now()
	parked, err := h.store.Entries(ctx, sqlstore.Query{State: sqlstore.StateParked, Limit: h.cfg.ParkedShown + 1})
	tm.since(t0)
	if err != nil {
		h.storeFailed(w, r, "parked events", err)
		return
	}
	samples := snap.samples
	d := overviewData{
		Stats:       samples[len(samples)-1].Stats,
		StatsAt:     samples[len(samples)-1].At,
		Groups:      snap.groups,
		GroupsAt:    snap.groupsAt,
		ParkedRows:  parked,
		SampleEvery: h.cfg.SampleInterval,
	}
	if len(d.Groups) > maxGroupsShown {
		d.GroupsMore = len(d.Groups) - maxGroupsShown
		d.Groups = d.Groups[:maxGroupsShown]
	}
	if len(d.ParkedRows) > h.cfg.ParkedShown {
		d.ParkedRows, d.ParkedMore = d.ParkedRows[:h.cfg.ParkedShown], true
	}
	d.Backlog = newChart(samples, func(s relay.Stats) float64 { return float64(s.Pending) }, formatCount)
	d.Lag = newChart(samples, func(s relay.Stats) float64 { return s.OldestPending.Seconds() }, formatSeconds)
	d.Parked = newChart(samples, func(s relay.Stats) float64 { return float64(s.Parked) }, formatCount)
	if h.cfg.Slot != nil {
		t0 = time.Now()
		f, err := h.cfg.Slot(ctx)
		tm.since(t0)
		d.Slot = &slotPanel{SlotFigures: f}
		if err != nil {
			h.cfg.Logger.Warn("outbox dashboard: reading the replication slot failed", "error", err)
			d.Slot.Err = err.Error()
		}
	}
	if h.cfg.DeadLetters != nil {
		t0 = time.Now()
		counts, err := h.cfg.DeadLetters(ctx)
		tm.since(t0)
		d.DeadLetters = &deadLetterPanel{Counts: counts}
		if err != nil {
			h.cfg.Logger.Warn("outbox dashboard: reading the dead letters failed", "error", err)
			d.DeadLetters.Err = err.Error()
		}
	}
	if n, err := strconv.Atoi(r.URL.Query().Get("refresh")); err == nil && n >= 2 && n <= 3600 {
		d.Refresh = n
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", tm, d)
}

// snapshotData is what the overview shows of the store's counts.
type snapshotData struct {
	samples  []sample // at least one
	groups   []sqlstore.GroupStats
	groupsAt time.Time
}

// snapshot returns the samples and the per-type counts, reading the store
// only for what is older than Config.SampleInterval (both at once, when
// both are): counting a large backlog takes a while, and the charts need
// samples, not a count per page view. Concurrent requests share one read.
func (h *Handler) snapshot(ctx context.Context) (snapshotData, error) {
	h.refresh.Lock()
	defer h.refresh.Unlock()
	now := time.Now()
	h.mu.Lock()
	last, ok := h.history.last()
	needStats := !ok || now.Sub(last.At) >= h.cfg.SampleInterval
	needGroups := h.groupsAt.IsZero() || now.Sub(h.groupsAt) >= h.cfg.SampleInterval
	h.mu.Unlock()

	var (
		wg        sync.WaitGroup
		statsErr  error
		groupsErr error
		groups    []sqlstore.GroupStats
	)
	if needGroups {
		wg.Go(func() { groups, groupsErr = h.store.StatsByType(ctx) })
	}
	if needStats {
		_, statsErr = h.Sample(ctx)
	}
	wg.Wait()
	if err := errors.Join(statsErr, groupsErr); err != nil {
		return snapshotData{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if needGroups {
		h.groups, h.groupsAt = groups, now
	}
	return snapshotData{samples: h.history.all(), groups: h.groups, groupsAt: h.groupsAt}, nil
}

// invalidate makes the next overview read the store's counts afresh (after
// an action changed them).
func (h *Handler) invalidate() {
	h.mu.Lock()
	h.groupsAt = time.Time{}
	h.history.stale = true
	h.mu.Unlock()
}

// eventsData is the events page's data: a filtered list or a search.
type eventsData struct {
	Filter   filter
	Search   string
	Searched bool
	ByRowID  *sqlstore.Entry // the row whose id is the search term
	Rows     []sqlstore.Entry
	NextURL  string
	FirstURL string
	States   []sqlstore.State
}

// filter is the events list's query string.
type filter struct {
	State, Topic, EventType, AggregateType, AggregateID string
	After                                               int64
}

func (f filter) url(after int64) string {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("state", f.State)
	set("topic", f.Topic)
	set("type", f.EventType)
	set("aggregate_type", f.AggregateType)
	set("aggregate", f.AggregateID)
	if after > 0 {
		v.Set("after", strconv.FormatInt(after, 10))
	}
	if len(v) == 0 {
		return "events"
	}
	return "events?" + v.Encode()
}

func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
	defer cancel()
	tm := &timing{start: time.Now()}
	qv := r.URL.Query()
	d := eventsData{
		Filter: filter{
			State:         qv.Get("state"),
			Topic:         qv.Get("topic"),
			EventType:     qv.Get("type"),
			AggregateType: qv.Get("aggregate_type"),
			AggregateID:   qv.Get("aggregate"),
		},
		Search: strings.TrimSpace(qv.Get("q")),
		States: []sqlstore.State{sqlstore.StatePending, sqlstore.StateRetrying, sqlstore.StateParked, sqlstore.StatePublished},
	}
	state, err := sqlstore.ParseState(d.Filter.State)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if a := qv.Get("after"); a != "" {
		d.Filter.After, err = strconv.ParseInt(a, 10, 64)
		if err != nil || d.Filter.After < 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("after=%q is not a row id", a))
			return
		}
	}
	q := sqlstore.Query{
		State:         state,
		Topic:         d.Filter.Topic,
		EventType:     d.Filter.EventType,
		AggregateType: d.Filter.AggregateType,
		AggregateID:   d.Filter.AggregateID,
		AfterID:       d.Filter.After,
		Limit:         h.cfg.PageSize + 1,
	}
	if d.Search != "" {
		d.Searched = true
		if id, err := uuid.Parse(d.Search); err == nil {
			q.EventID = id
		} else {
			// A number is a row id, and may also be an aggregate id.
			if id, err := strconv.ParseInt(d.Search, 10, 64); err == nil && id > 0 {
				t0 := time.Now()
				e, err := h.store.Entry(ctx, id)
				tm.since(t0)
				switch {
				case err == nil:
					d.ByRowID = &e
				case !errors.Is(err, sqlstore.ErrNotFound):
					h.storeFailed(w, r, "event by id", err)
					return
				}
			}
			q.AggregateID = d.Search
		}
	}
	t0 := time.Now()
	rows, err := h.store.Entries(ctx, q)
	tm.since(t0)
	if err != nil {
		if errors.Is(err, sqlstore.ErrInvalidQuery) {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		h.storeFailed(w, r, "events", err)
		return
	}
	if len(rows) > h.cfg.PageSize {
		rows = rows[:h.cfg.PageSize]
		next := d.Filter.url(rows[len(rows)-1].ID)
		if d.Searched {
			next += "&q=" + url.QueryEscape(d.Search)
			if !strings.Contains(next, "?") {
				next = strings.Replace(next, "&", "?", 1)
			}
		}
		d.NextURL = next
	}
	if d.Filter.After > 0 {
		d.FirstURL = d.Filter.url(0)
	}
	d.Rows = rows
	h.render(w, r, http.StatusOK, "events", "Events", tm, d)
}

// eventData is the event page's data.
type eventData struct {
	Entry        sqlstore.Entry
	Payload      string
	PayloadCut   bool // only the first PayloadShown of PayloadSize bytes
	PayloadShown int64
	PayloadSize  int64
	Headers      [][2]string
	Done         string
}

// maxPayloadShown bounds the payload an event page shows, and so the page.
const maxPayloadShown = 64 << 10

// doneMessages are the outcomes an action redirects with (never reflected
// from the request).
var doneMessages = map[string]string{
	"retried":   "Retried: the event is pending again; the relay will publish it.",
	"discarded": "Discarded: the event will not be published.",
	"unchanged": "Nothing changed: the event was no longer parked.",
}

// loadEntry reads the row raw names, or answers the request and returns
// false. discarded tells that the request follows a discard, which
// deleted the row: a row not found then gets a page that says so.
func (h *Handler) loadEntry(w http.ResponseWriter, r *http.Request, ctx context.Context, tm *timing, raw string, discarded bool) (sqlstore.Entry, bool) {
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("id=%q is not a row id", raw))
		return sqlstore.Entry{}, false
	}
	t0 := time.Now()
	e, err := h.store.Entry(ctx, id)
	tm.since(t0)
	switch {
	case errors.Is(err, sqlstore.ErrNotFound) && discarded:
		h.render(w, r, http.StatusOK, "done", "Discarded", tm,
			fmt.Sprintf("Discarded: event %d was deleted from the outbox and will not be published; its aggregate's later events go out.", id))
		return sqlstore.Entry{}, false
	case errors.Is(err, sqlstore.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no outbox row with id %d", id))
		return sqlstore.Entry{}, false
	case err != nil:
		h.storeFailed(w, r, "event", err)
		return sqlstore.Entry{}, false
	}
	return e, true
}

func (h *Handler) event(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
	defer cancel()
	tm := &timing{start: time.Now()}
	e, ok := h.loadEntry(w, r, ctx, tm, r.URL.Query().Get("id"), r.URL.Query().Get("done") == "discarded")
	if !ok {
		return
	}
	d := eventData{Entry: e, Done: doneMessages[r.URL.Query().Get("done")], PayloadSize: int64(len(e.Payload))}
	if len(e.Payload) > maxPayloadShown {
		d.Payload = strings.ToValidUTF8(string(e.Payload[:maxPayloadShown]), "")
		d.PayloadCut, d.PayloadShown = true, maxPayloadShown
	} else {
		d.Payload = prettyJSON(e.Payload)
	}
	for k, v := range e.Headers {
		d.Headers = append(d.Headers, [2]string{k, v})
	}
	sort.Slice(d.Headers, func(i, j int) bool { return d.Headers[i][0] < d.Headers[j][0] })
	h.render(w, r, http.StatusOK, "event", fmt.Sprintf("Event %d", e.ID), tm, d)
}

func prettyJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

// confirmData is the confirmation page's data.
type confirmData struct {
	Action string // "retry" or "discard"
	Entry  sqlstore.Entry
	Token  string
}

func validAction(a string) bool { return a == "retry" || a == "discard" }

func (h *Handler) confirm(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.AllowActions {
		h.fail(w, r, http.StatusForbidden, "this dashboard is read-only (Config.AllowActions is false)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
	defer cancel()
	tm := &timing{start: time.Now()}
	action := r.URL.Query().Get("action")
	if !validAction(action) {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("action=%q: want retry or discard", action))
		return
	}
	e, ok := h.loadEntry(w, r, ctx, tm, r.URL.Query().Get("id"), false)
	if !ok {
		return
	}
	session := h.csrf.session(w, r)
	d := confirmData{Action: action, Entry: e, Token: h.csrf.token(session, action, e.ID)}
	h.render(w, r, http.StatusOK, "confirm", "Confirm "+action, tm, d)
}

func (h *Handler) action(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.AllowActions {
		h.fail(w, r, http.StatusForbidden, "this dashboard is read-only (Config.AllowActions is false)")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		h.fail(w, r, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if err := h.cop.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "cross-origin request refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "bad form")
		return
	}
	action := r.PostForm.Get("action")
	id, err := strconv.ParseInt(r.PostForm.Get("id"), 10, 64)
	if !validAction(action) || err != nil || id < 1 {
		h.fail(w, r, http.StatusBadRequest, "the form needs an action (retry or discard) and a row id")
		return
	}
	if err := h.csrf.check(r, r.PostForm.Get("token"), action, id); err != nil {
		h.fail(w, r, http.StatusForbidden, err.Error()+": go back to the event and confirm again")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
	defer cancel()
	var n int64
	done := "retried"
	if action == "retry" {
		n, err = h.store.Unpark(ctx, id)
	} else {
		n, err = h.store.Discard(ctx, id)
		done = "discarded"
	}
	if err != nil {
		h.storeFailed(w, r, action, err)
		return
	}
	if n == 0 {
		done = "unchanged"
	}
	h.invalidate()
	h.cfg.Logger.Info("outbox dashboard: "+action, "id", id, "changed", n)
	w.Header().Set("Location", fmt.Sprintf("event?id=%d&done=%s", id, done))
	w.WriteHeader(http.StatusSeeOther)
}
