package dashboard_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/dashboard"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// hostile is untrusted text an event can carry in its payload, headers,
// aggregate id or last error.
const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>`

func serve(t *testing.T, h http.Handler, prefix string) (*httptest.Server, *http.Client) {
	t.Helper()
	var handler http.Handler = h
	if prefix != "" {
		mux := http.NewServeMux()
		mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
		mux.Handle(prefix, http.StripPrefix(prefix, h))
		handler = mux
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return srv, c
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func newHandler(t *testing.T, s dashboard.Store, cfg dashboard.Config) *dashboard.Handler {
	t.Helper()
	h, err := dashboard.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestOverviewReadOnlyEscapes(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StatePending, "a-1", "", `{"n":1}`)
	f.add(sqlstore.StateRetrying, "a-2", "broker down", `{"n":2}`)
	parked := f.add(sqlstore.StateParked, hostile, hostile, `{"note":"`+strings.ReplaceAll(hostile, `"`, `\"`)+`"}`)
	srv, c := serve(t, newHandler(t, f, dashboard.Config{}), "")

	code, body, hd := get(t, c, srv.URL+"/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	if !strings.Contains(hd.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("CSP header = %q", hd.Get("Content-Security-Policy"))
	}
	for _, want := range []string{`id="pending">2<`, `id="retrying">1<`, `id="parked">1<`, "OrderPlaced", "<polyline points=", "read-only"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if strings.Contains(body, "<script") || strings.Contains(body, "<img") {
		t.Errorf("overview has unescaped untrusted text:\n%s", body)
	}
	if !strings.Contains(body, "&lt;script&gt;") {
		t.Errorf("overview does not show the escaped last error")
	}
	if strings.Contains(body, "confirm?") {
		t.Errorf("read-only overview links to actions")
	}

	code, body, _ = get(t, c, srv.URL+"/event?id=1")
	if code != http.StatusOK || strings.Contains(body, "Retry") {
		t.Errorf("GET event 1: %d, retry button shown: %v", code, strings.Contains(body, "Retry"))
	}
	code, body, _ = get(t, c, srv.URL+"/event?id=3")
	if code != http.StatusOK || strings.Contains(body, "<script") || strings.Contains(body, "<img") {
		t.Errorf("GET event 3: %d, unescaped:\n%s", code, body)
	}

	if code, _, _ := get(t, c, srv.URL+"/confirm?action=retry&id=3"); code != http.StatusForbidden {
		t.Errorf("read-only confirm page: %d, want 403", code)
	}
	resp, err := c.PostForm(srv.URL+"/action", url.Values{"action": {"retry"}, "id": {"3"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("read-only POST: %d, want 403", resp.StatusCode)
	}
	if len(f.unpark) != 0 {
		t.Errorf("read-only dashboard unparked %v", f.unpark)
	}
	_ = parked
	if code, _, _ := get(t, c, srv.URL+"/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", code)
	}
	if code, _, _ := get(t, c, srv.URL+"/event?id=99"); code != http.StatusNotFound {
		t.Errorf("GET missing event: %d, want 404", code)
	}
	if code, _, _ := get(t, c, srv.URL+"/events?state=bogus"); code != http.StatusBadRequest {
		t.Errorf("GET bad state: %d, want 400", code)
	}
}

var hrefRE = regexp.MustCompile(`(?:href|action)="([^"]*)"`)

func TestMountedUnderPrefix(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StatePending, "a-1", "", `{}`)
	f.add(sqlstore.StateParked, "a-2", "bad payload", `{}`)
	srv, c := serve(t, newHandler(t, f, dashboard.Config{AllowActions: true}), "/ops/outbox")

	code, _, hd := get(t, c, srv.URL+"/ops/outbox")
	if code != http.StatusMovedPermanently || hd.Get("Location") != "outbox/" {
		t.Fatalf("GET /ops/outbox: %d Location %q, want 301 to outbox/", code, hd.Get("Location"))
	}
	base, _ := url.Parse(srv.URL + "/ops/outbox")
	loc, _ := base.Parse(hd.Get("Location"))
	code, body, _ := get(t, c, loc.String())
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", loc, code)
	}
	// Every link of the overview resolves under the prefix and answers.
	for _, m := range hrefRE.FindAllStringSubmatch(body, -1) {
		ref := strings.ReplaceAll(m[1], "&amp;", "&")
		u, err := loc.Parse(ref)
		if err != nil {
			t.Fatalf("link %q: %v", ref, err)
		}
		if !strings.HasPrefix(u.Path, "/ops/outbox/") {
			t.Errorf("link %q resolves to %s, outside the mount point", ref, u.Path)
			continue
		}
		if strings.HasSuffix(u.Path, "/action") {
			continue
		}
		if code, _, _ := get(t, c, u.String()); code != http.StatusOK {
			t.Errorf("link %q → %s: %d", ref, u, code)
		}
	}
}

// confirmToken loads the confirmation page and returns its form's token.
func confirmToken(t *testing.T, c *http.Client, base, action, id string) string {
	t.Helper()
	code, body, _ := get(t, c, base+"/confirm?action="+action+"&id="+id)
	if code != http.StatusOK {
		t.Fatalf("confirm page: %d\n%s", code, body)
	}
	m := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("confirm page has no token:\n%s", body)
	}
	return m[1]
}

func post(t *testing.T, c *http.Client, u string, form url.Values, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestActionsNeedConfirmationAndToken(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StatePending, "a-1", "", `{}`)
	p1 := f.add(sqlstore.StateParked, "a-2", "bad", `{}`)
	p2 := f.add(sqlstore.StateParked, "a-3", "bad", `{}`)
	srv, c := serve(t, newHandler(t, f, dashboard.Config{AllowActions: true}), "")

	_, body, _ := get(t, c, srv.URL+"/")
	if !strings.Contains(body, "confirm?action=retry&amp;id=2") {
		t.Fatalf("overview has no retry link for the parked event")
	}
	token := confirmToken(t, c, srv.URL, "retry", "2")
	form := url.Values{"action": {"retry"}, "id": {"2"}, "token": {token}}

	// Refused: another origin, another row, another action, no cookie.
	cases := []struct {
		name string
		form url.Values
		hdr  map[string]string
		c    *http.Client
	}{
		{"cross-site", form, map[string]string{"Sec-Fetch-Site": "cross-site"}, c},
		{"foreign origin", form, map[string]string{"Origin": "https://evil.example"}, c},
		{"other row", url.Values{"action": {"retry"}, "id": {"3"}, "token": {token}}, nil, c},
		{"other action", url.Values{"action": {"discard"}, "id": {"2"}, "token": {token}}, nil, c},
		{"no token", url.Values{"action": {"retry"}, "id": {"2"}}, nil, c},
		{"no cookie", form, nil, &http.Client{CheckRedirect: c.CheckRedirect}},
	}
	for _, tc := range cases {
		if resp := post(t, tc.c, srv.URL+"/action", tc.form, tc.hdr); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: POST answered %d, want 403", tc.name, resp.StatusCode)
		}
	}
	if len(f.unpark)+len(f.discard) != 0 {
		t.Fatalf("refused POSTs changed rows: unpark %v discard %v", f.unpark, f.discard)
	}

	resp := post(t, c, srv.URL+"/action", form, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "event?id=2&done=retried" {
		t.Fatalf("retry: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if len(f.unpark) != 1 || f.unpark[0] != p1 {
		t.Fatalf("unparked %v, want [%d]", f.unpark, p1)
	}
	_, body, _ = get(t, c, srv.URL+"/event?id=2&done=retried")
	if !strings.Contains(body, `id="done"`) {
		t.Errorf("event page shows no outcome after retry")
	}

	// The same token again: the row is no longer parked, nothing changes.
	resp = post(t, c, srv.URL+"/action", form, nil)
	if resp.Header.Get("Location") != "event?id=2&done=unchanged" {
		t.Errorf("second retry: Location %q, want done=unchanged", resp.Header.Get("Location"))
	}

	token = confirmToken(t, c, srv.URL, "discard", "3")
	resp = post(t, c, srv.URL+"/action", url.Values{"action": {"discard"}, "id": {"3"}, "token": {token}}, nil)
	if resp.StatusCode != http.StatusSeeOther || len(f.discard) != 1 || f.discard[0] != p2 {
		t.Errorf("discard: %d, discarded %v", resp.StatusCode, f.discard)
	}
	// The discard deleted the row: the page it redirects to says so
	// (it used to answer 404 "no outbox row with id 3").
	if loc := resp.Header.Get("Location"); loc != "event?id=3&done=discarded" {
		t.Fatalf("discard: Location %q", loc)
	}
	if code, body, _ := get(t, c, srv.URL+"/event?id=3&done=discarded"); code != http.StatusOK || !strings.Contains(body, `id="done"`) || !strings.Contains(body, "Discarded: event 3 was deleted") {
		t.Errorf("the page after a discard: %d\n%s", code, body)
	}
	if code, _, _ := get(t, c, srv.URL+"/action"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /action: %d, want 405", code)
	}
}

func TestSearch(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StatePending, "7", "", `{}`)    // row 1, aggregate "7"
	f.add(sqlstore.StatePublished, "7", "", `{}`)  // row 2
	f.add(sqlstore.StatePending, "zz-9", "", `{}`) // row 3
	for range 4 {
		f.add(sqlstore.StatePending, "x", "", `{}`) // rows 4..7
	}
	srv, c := serve(t, newHandler(t, f, dashboard.Config{}), "")

	// A number: the row with that id, and the events of that aggregate.
	_, body, _ := get(t, c, srv.URL+"/events?q=7")
	for _, want := range []string{"<h2>Row 7</h2>", `id="row-1"`, `id="row-2"`} {
		if !strings.Contains(body, want) {
			t.Errorf("search 7 lacks %q", want)
		}
	}
	// An aggregate id.
	_, body, _ = get(t, c, srv.URL+"/events?q=zz-9")
	if !strings.Contains(body, `id="row-3"`) || strings.Contains(body, `id="row-1"`) {
		t.Errorf("search zz-9 is wrong:\n%s", body)
	}
	// An event id.
	e, _ := f.Entry(context.Background(), 5)
	_, body, _ = get(t, c, srv.URL+"/events?q="+e.EventID.String())
	if !strings.Contains(body, `id="row-5"`) || strings.Contains(body, `id="row-4"`) {
		t.Errorf("search by event id is wrong:\n%s", body)
	}
	// Nothing.
	_, body, _ = get(t, c, srv.URL+"/events?q=nope")
	if !strings.Contains(body, `id="none"`) {
		t.Errorf("empty search shows rows")
	}
}

func TestKeysetPaging(t *testing.T) {
	f := newFake()
	for range 7 {
		f.add(sqlstore.StatePending, "a", "", `{}`)
	}
	srv, c := serve(t, newHandler(t, f, dashboard.Config{PageSize: 3}), "")
	var seen []string
	next := "events?state=pending"
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		_, body, _ := get(t, c, srv.URL+"/"+next)
		for _, m := range regexp.MustCompile(`id="row-(\d+)"`).FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		next = ""
		if m := regexp.MustCompile(`href="([^"]*)" id="next"`).FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if got := strings.Join(seen, ","); got != "1,2,3,4,5,6,7" {
		t.Errorf("pages showed rows %s, want 1..7 once each", got)
	}
	for _, q := range f.queries {
		if q.Limit > 4 {
			t.Errorf("query asked for %d rows, want at most PageSize+1", q.Limit)
		}
	}
}

func TestSamplesMakeCharts(t *testing.T) {
	f := newFake()
	h := newHandler(t, f, dashboard.Config{History: 3, SampleInterval: time.Hour})
	ctx := context.Background()
	for i := range 5 {
		f.add(sqlstore.StatePending, "a", "", `{}`)
		if _, err := h.Sample(ctx); err != nil {
			t.Fatal(err)
		}
		_ = i
	}
	srv, c := serve(t, h, "")
	_, body, _ := get(t, c, srv.URL+"/")
	// History 3: samples of 3, 4 and 5 pending; the page's own read is
	// not recorded (the last sample is younger than the interval).
	if !strings.Contains(body, "3 samples") || !strings.Contains(body, "now 5, range 3–5") {
		t.Errorf("charts do not show the last 3 samples:\n%s", body)
	}

	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []dashboard.Config{{History: 1}, {PageSize: -1}, {PageSize: 5000}, {SampleInterval: -time.Second}} {
		if _, err := dashboard.New(newFake(), cfg); !errors.Is(err, dashboard.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := dashboard.New(nil, dashboard.Config{}); !errors.Is(err, dashboard.ErrInvalidConfig) {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestLargePayloadIsCut(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StatePending, "a", "", `{"blob":"`+strings.Repeat("x", 1<<20)+`"}`)
	srv, c := serve(t, newHandler(t, f, dashboard.Config{}), "")
	code, body, _ := get(t, c, srv.URL+"/event?id=1")
	if code != http.StatusOK || len(body) > 80<<10 || !strings.Contains(body, "Showing the first 65,536 of 1,048,587 bytes") {
		t.Errorf("event page with a 1 MiB payload: %d, %d bytes, no cut notice", code, len(body))
	}
}

// TestCountsReadOncePerInterval: views within SampleInterval share one read
// of the counts, and an action makes the next view read them again.
func TestCountsReadOncePerInterval(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StateParked, "a", "bad", `{}`)
	srv, c := serve(t, newHandler(t, f, dashboard.Config{AllowActions: true, SampleInterval: time.Hour}), "")
	for range 3 {
		if _, body, hd := get(t, c, srv.URL+"/"); !strings.Contains(body, `id="parked">1<`) || !strings.Contains(hd.Get("Server-Timing"), "db;dur=") {
			t.Fatalf("overview without the parked count or Server-Timing")
		}
	}
	if f.statsCalls != 1 || f.byTypeCalls != 1 {
		t.Errorf("3 views read Stats %d and StatsByType %d times, want 1 and 1", f.statsCalls, f.byTypeCalls)
	}
	token := confirmToken(t, c, srv.URL, "discard", "1")
	post(t, c, srv.URL+"/action", url.Values{"action": {"discard"}, "id": {"1"}, "token": {token}}, nil)
	if _, body, _ := get(t, c, srv.URL+"/"); !strings.Contains(body, `id="parked">0<`) {
		t.Errorf("the overview after a discard still shows the old count")
	}
	if f.statsCalls != 2 || f.byTypeCalls != 2 {
		t.Errorf("after an action: Stats %d, StatsByType %d calls, want 2 and 2", f.statsCalls, f.byTypeCalls)
	}
}

// TestActionsLoggedByDefault checks that, with no Config.Logger, a retry
// done through the dashboard is logged on slog.Default, as the relay and
// the consumer log: an operator's actions leave a trail by default.
func TestActionsLoggedByDefault(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	f := newFake()
	id := f.add(sqlstore.StateParked, "a-1", "bad", `{}`)
	srv, c := serve(t, newHandler(t, f, dashboard.Config{AllowActions: true}), "")
	sid := strconv.FormatInt(id, 10)
	token := confirmToken(t, c, srv.URL, "retry", sid)
	resp := post(t, c, srv.URL+"/action", url.Values{"action": {"retry"}, "id": {sid}, "token": {token}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry: %d", resp.StatusCode)
	}
	if got := buf.String(); !strings.Contains(got, "outbox dashboard: retry") || !strings.Contains(got, "id="+sid) {
		t.Errorf("default logger got %q, want the retry of row %s", got, sid)
	}
}

// TestPublishedEventsEarlierError: a published event keeps the error of
// its last failed attempt; the lists leave it out of its row, which it
// does not describe any more, and the event's page labels it as earlier (a
// new user's trial read "published, last error NO_ROUTE" as a failure).
func TestPublishedEventsEarlierError(t *testing.T) {
	f := newFake()
	id := f.add(sqlstore.StatePublished, "a-1", "amqp: NO_ROUTE", `{"n":1}`)
	f.add(sqlstore.StateRetrying, "a-2", "broker down", `{"n":2}`)
	srv, c := serve(t, newHandler(t, f, dashboard.Config{}), "")
	code, body, _ := get(t, c, srv.URL+"/events?state=published")
	if code != http.StatusOK || !strings.Contains(body, "row-1") || strings.Contains(body, "NO_ROUTE") {
		t.Errorf("GET published events: %d; the row shows its earlier error: %v", code, strings.Contains(body, "NO_ROUTE"))
	}
	code, body, _ = get(t, c, srv.URL+"/events?state=retrying")
	if code != http.StatusOK || !strings.Contains(body, "broker down") {
		t.Errorf("GET retrying events: %d; the row lacks its error", code)
	}
	code, body, _ = get(t, c, srv.URL+"/event?id="+strconv.FormatInt(id, 10))
	if code != http.StatusOK || !strings.Contains(body, "last error before it was published") || !strings.Contains(body, "NO_ROUTE") {
		t.Errorf("GET the published event: %d; want its error labelled as earlier:\n%s", code, body)
	}
}

// TestHeldEventSaysWhatItWaitsFor: a pending event behind a parked event of
// its aggregate (Entry.BlockedBy) links to it, in the lists and on its page,
// instead of showing 0 attempts and no error (found by a new user).
func TestHeldEventSaysWhatItWaitsFor(t *testing.T) {
	f := newFake()
	parked := f.add(sqlstore.StateParked, "a-1", "too large", `{"n":1}`)
	held := f.add(sqlstore.StatePending, "a-1", "", `{"n":2}`)
	f.mu.Lock()
	f.entries[held-1].BlockedBy = parked
	f.mu.Unlock()
	srv, c := serve(t, newHandler(t, f, dashboard.Config{}), "")
	link := `href="event?id=` + strconv.FormatInt(parked, 10) + `"`
	code, body, _ := get(t, c, srv.URL+"/events?state=pending")
	if code != http.StatusOK || !strings.Contains(body, "waits for parked") || !strings.Contains(body, link) {
		t.Errorf("GET pending events: %d; the held row does not link to parked row %d:\n%s", code, parked, body)
	}
	code, body, _ = get(t, c, srv.URL+"/event?id="+strconv.FormatInt(held, 10))
	if code != http.StatusOK || !strings.Contains(body, `id="blocked-by"`) || !strings.Contains(body, link) {
		t.Errorf("GET the held event: %d; want it to name parked row %d:\n%s", code, parked, body)
	}
}

// TestSlotPanel: with Config.Slot, the overview shows the replication
// slot's figures (a slot without a relay and with lost WAL flagged), says
// when the slot does not exist, and shows a failure to read it in its
// place while the rest of the page stays.
func TestSlotPanel(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StatePending, "a-1", "", `{"n":1}`)
	var figures dashboard.SlotFigures
	var fail error
	h := newHandler(t, f, dashboard.Config{Slot: func(context.Context) (dashboard.SlotFigures, error) { return figures, fail }})
	srv, c := serve(t, h, "")

	figures = dashboard.SlotFigures{Name: "outbox_messages_cdc", Exists: true, Streaming: true, LagBytes: 3 << 20, WALStatus: "reserved", ConfirmedLSN: "0/1A2B3C"}
	_, body, _ := get(t, c, srv.URL+"/")
	for _, want := range []string{"CDC slot outbox_messages_cdc", `id="slot-streaming">streaming<`, `id="slot-lag">3.0 MiB<`, `id="slot-wal-status">reserved<`, "0/1A2B3C", `id="pending">1<`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview of a streaming slot lacks %q", want)
		}
	}
	figures = dashboard.SlotFigures{Name: "outbox_messages_cdc", Exists: true, LagBytes: 512, WALStatus: "lost"}
	_, body, _ = get(t, c, srv.URL+"/")
	for _, want := range []string{`warn" id="slot-streaming">no relay<`, `id="slot-lag">512 B<`, `bad" id="slot-wal-status">lost<`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview of a lost slot lacks %q", want)
		}
	}
	figures = dashboard.SlotFigures{Name: "outbox_messages_cdc"}
	if _, body, _ = get(t, c, srv.URL+"/"); !strings.Contains(body, `id="slot-missing"`) {
		t.Errorf("overview of a missing slot does not say so")
	}
	fail = errors.New("permission denied for view pg_replication_slots")
	code, body, _ := get(t, c, srv.URL+"/")
	if code != http.StatusOK || !strings.Contains(body, "Could not read the slot: permission denied") || !strings.Contains(body, `id="pending">1<`) {
		t.Errorf("overview with a failing slot: %d, want the page with the error in the panel:\n%s", code, body)
	}
}

// TestDeadLetterPanel: with Config.DeadLetters, the overview shows each
// consumer's dead letters (waiting ones flagged, with the command that
// lists them), says when there are none, and shows a failure to read them
// in its place while the rest of the page stays.
func TestDeadLetterPanel(t *testing.T) {
	f := newFake()
	f.add(sqlstore.StatePending, "a-1", "", `{"n":1}`)
	var counts []sqlstore.DeadLetterCount
	var fail error
	h := newHandler(t, f, dashboard.Config{DeadLetters: func(context.Context) ([]sqlstore.DeadLetterCount, error) { return counts, fail }})
	srv, c := serve(t, h, "")

	_, body, _ := get(t, c, srv.URL+"/")
	if !strings.Contains(body, `id="dead-letters-none"`) {
		t.Errorf("overview without dead letters does not say so")
	}
	counts = []sqlstore.DeadLetterCount{
		{Consumer: "billing", Waiting: 3, Redriven: 1, Oldest: time.Now().Add(-2 * time.Hour)},
		{Consumer: "notifier", Redriven: 2},
	}
	_, body, _ = get(t, c, srv.URL+"/")
	for _, want := range []string{`id="dead-letters"`, "<td>billing</td>", `<span class="bad">3</span>`, "outbox deadletters list --consumer billing", "<td>notifier</td>", "2h"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview with dead letters lacks %q:\n%s", want, body)
		}
	}
	fail = errors.New(`relation "outbox_dead_letters" does not exist`)
	code, body, _ := get(t, c, srv.URL+"/")
	if code != http.StatusOK || !strings.Contains(body, "Could not read the dead letters: relation") || !strings.Contains(body, `id="pending">1<`) {
		t.Errorf("overview with failing dead letters: %d, want the page with the error in the panel:\n%s", code, body)
	}
}
