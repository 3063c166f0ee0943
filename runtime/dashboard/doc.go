// Package dashboard is a web dashboard for the outbox: an [http.Handler]
// the application mounts wherever it likes (the operator command can serve
// it too). It shows
//
//   - the backlog (pending, retrying, parked) and the lag (age of the oldest
//     pending event) now and over time, as server-rendered SVG sparklines of
//     samples the handler keeps in memory;
//   - the counts per topic and event type;
//   - the parked events with their last error, and a button to retry
//     (unpark) or discard each, behind a confirmation page;
//   - any event found by its row id, its event id, or its aggregate id, and a
//     keyset-paged list of events by state, topic and event type.
//
// Pages are html/template with no JavaScript and no build step; payloads and
// errors (untrusted) are escaped by the templates, and the responses carry a
// Content-Security-Policy that allows no script at all.
//
// # Mounting
//
// Every link and form is relative, so the handler works at the root or
// under a prefix:
//
//	h, err := dashboard.New(store, dashboard.Config{})
//	go h.Run(ctx) // sample the backlog every Config.SampleInterval
//	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
//
// A request for the prefix without its trailing slash ("/outbox") is
// redirected to "/outbox/". Without Run, the handler samples lazily, when a
// page is requested and the last sample is older than the interval.
// The dashboard has no authentication of its own: put it behind the
// application's (a middleware around h), as any admin page.
//
// # Actions and CSRF
//
// The dashboard is read-only unless [Config.AllowActions] is set: then
// parked events get Retry and Discard buttons. A button leads (GET) to a
// confirmation page showing the event; only its form (POST) acts. Without
// AllowActions there are no buttons, and the confirmation page and every
// POST answer 403 Forbidden.
//
// A POST is accepted only when all of these hold:
//
//   - [http.CrossOriginProtection] accepts it: the browser's Sec-Fetch-Site
//     header, or else its Origin header, says the request comes from the
//     dashboard's own origin (requests without either, from non-browser
//     clients, pass this check);
//   - it carries the dashboard's cookie, a random value set with
//     SameSite=Strict and HttpOnly when the confirmation page is shown;
//   - its hidden token is the HMAC-SHA256, under a random key made by [New]
//     (so tokens do not survive a restart, and are not shared between
//     handlers), of that cookie, the action, the row id and the time the
//     page was rendered, at most one hour ago.
//
// A token therefore authorises one action on one row, from the browser the
// confirmation page was shown to.
//
// # Cost
//
// Counting a large backlog takes a while ([sqlstore.Store.Stats] counts the
// pending rows; [sqlstore.Store.StatsByType] groups the unpublished ones),
// so the overview reads both at most once per [Config.SampleInterval], both
// at once, shared by concurrent viewers and read again after an action;
// other views show the last sample and its age. Every other query is
// bounded: lists are keyset pages of at most [Config.PageSize] rows
// ([sqlstore.Query.AfterID]), never an OFFSET or a COUNT per row, and an
// event page shows at most 64 KiB of payload. Responses carry a
// Server-Timing header (db and render durations).
//
// Page weight and time with 100,000 pending and 1,000 parked events (go test
// -run '^$' -bench Pages -benchtime 20x ./internal/coretest/dashboard; 2-core machine,
// the whole request in process):
//
//	| view | SQLite | PostgreSQL | page (HTML, uncompressed) |
//	|---|---|---|---|
//	| overview, counts read now (first view per SampleInterval) | 169 ms (479 ms loaded) | 52 ms (263 ms loaded) | 20.7 KB |
//	| overview, last sample reused | 1.2 ms | 1.3 ms | 19.6 KB |
//	| parked list, 50 rows | 2.3 ms | 2.2 ms | 35.2 KB |
//	| pending list, the page after row 50,500 | 2.0 ms | 1.9 ms | 25.3 KB |
//	| search by aggregate id | 22.7 ms | 10.1 ms | 4.2 KB |
//	| one event | 0.1 ms | 0.3 ms | 4.1 KB |
//
// The figures come from one quiet run. The "loaded" figures come from a run
// while other test suites shared both cores.
//
// A fresh read costs what StatsByType (a GROUP BY over the unpublished rows)
// and Stats (counts over the pending and parked indexes) cost. The two run
// concurrently, and a cache of SampleInterval bounds how often they run while
// someone is looking. Run adds one Stats per interval. Rendering takes about 1
// ms. A search by aggregate walks the primary key, because the outbox has no
// index on the aggregate (its writers should not pay for one); a search by
// event id uses the unique index.
//
// # Trying it
//
// Run the quickstart with go run ./examples/quickstart -dashboard :8080, then
// open http://localhost:8080/outbox/: with -dashboard the quickstart keeps
// placing an order every second until Ctrl-C, so the charts move, and
// -dashboard-actions gets the buttons. The operator command serves it too:
// outbox dashboard --db URL [--addr 127.0.0.1:8080] [--allow-actions], at
// the root of its address (http://127.0.0.1:8080/). The sparklines are drawn
// from an in-memory ring of samples ([Config.History], default 360), one
// every [Config.SampleInterval] (10s); lists are pages of [Config.PageSize]
// (50) rows. The dashboard logs each retry and discard
// ([Config.Logger]). dashboard.png, in this directory, is a screenshot:
// backlog, lag and parked charts, counts per topic and event type, and a
// parked event with its last error and retry/discard links.
//
// The browser test (TestDashboardInBrowser in examples/quickstart) drives
// Debian's Chromium headless through chromedp. It runs against SQLite with
// a real relay and the in-memory broker, where the broker refuses one event
// for good:
//
//  1. load the overview through the /outbox redirect and read the counts;
//  2. find the parked event and its error, click retry and confirm;
//  3. reload the event's page until it says published.
//
// The test skips when Chromium is missing and fails when
// OUTBOX_TEST_REQUIRE_INTEGRATION=1. CI installs Chromium.
// OUTBOX_DASHBOARD_SCREENSHOT=file.png saves the screenshot.
//
// # Tests
//
// The tests named here are in the folder internal/coretest/dashboard, in a
// module of their own: they need SQLite, which this module does not require
// (see package runtime/runtimetest, "Running the repository's tests").
package dashboard
