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
package dashboard
