package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// Default values of the [Config] fields. A zero field means its default.
const (
	DefaultMaxStall         = time.Minute
	DefaultMaxOldestPending = 5 * time.Minute
	DefaultTimeout          = 2 * time.Second
)

// ErrInvalidConfig is wrapped by the errors of [New] for a bad [Config].
var ErrInvalidConfig = errors.New("health: invalid config")

// Progress reports when a relay last made progress: *relay.Relay
// implements it (its LastProgress method, in runtime/relay).
type Progress interface {
	// LastProgress is the end of the relay's last round that did not fail
	// as a whole, or the zero time before the first.
	LastProgress() time.Time
}

// Pinger checks that a database answers: *sql.DB implements it.
type Pinger interface {
	PingContext(ctx context.Context) error
}

// BrokerPinger checks that the relay's broker answers: the publishers of
// adapters/kafka, adapters/amqp, adapters/nats and adapters/redis implement
// it (their Ping methods), and so does any publisher with such a method.
type BrokerPinger interface {
	// Ping returns nil when the broker answered within ctx.
	Ping(ctx context.Context) error
}

// Config says what a [Checker] checks. Each check is on when its source is
// set; the zero value checks nothing and always reports healthy. Negative
// durations are rejected by [New].
type Config struct {
	// Relay is the relay whose progress is checked ("relay" check).
	// Default: nil, no relay check.
	Relay Progress

	// MaxStall is how long the relay may go without progress. A relay
	// makes progress at least every relay.Config.PollInterval when idle
	// and with every batch when busy, so keep MaxStall above PollInterval
	// plus PublishTimeout and twice StoreTimeout (1s + 30s + 20s with the
	// relay's defaults). Before the relay's first progress, the time since
	// [New] counts instead, so a relay that is starting is not failed at
	// once. Default: 1m ([DefaultMaxStall]).
	MaxStall time.Duration

	// Broker is the relay's publisher, pinged by the "broker" check of
	// readiness (not of liveness: a restart cannot cure a broker outage),
	// so that a relay that cannot reach its broker is not ready. Pass the
	// publisher when it is a BrokerPinger. Default: nil, no broker check.
	Broker BrokerPinger

	// DB is the database pinged by the "database" check.
	// Default: nil, no database check.
	DB Pinger

	// OldestPending returns the age of the oldest pending message, zero
	// when none ("backlog" check): wrap sqlstore.Store.Stats or
	// runtimetest.MemoryStore.Stats (see the package example).
	// Default: nil, no backlog check.
	OldestPending func(ctx context.Context) (time.Duration, error)

	// MaxOldestPending is the largest acceptable age of the oldest
	// pending message. Default: 5m ([DefaultMaxOldestPending]).
	MaxOldestPending time.Duration

	// Timeout bounds each check; a check that takes longer fails. The
	// request's own context bounds them too.
	// Default: 2s ([DefaultTimeout]).
	Timeout time.Duration

	// Clock tells the time. Default: [runtime.SystemClock].
	Clock runtime.Clock
}

func (c *Config) setDefaults() {
	if c.MaxStall == 0 {
		c.MaxStall = DefaultMaxStall
	}
	if c.MaxOldestPending == 0 {
		c.MaxOldestPending = DefaultMaxOldestPending
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Clock == nil {
		c.Clock = runtime.SystemClock{}
	}
}

// Validate reports a negative duration, naming its field, with an error
// wrapping [ErrInvalidConfig]. Zero fields are valid (they mean their
// defaults).
func (c Config) Validate() error {
	for _, f := range []struct {
		name  string
		value time.Duration
	}{
		{"MaxStall", c.MaxStall},
		{"MaxOldestPending", c.MaxOldestPending},
		{"Timeout", c.Timeout},
	} {
		if f.value < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalidConfig, f.name, f.value)
		}
	}
	// A typed nil (a nil *relay.Relay or *sql.DB in the interface) is not
	// "no check": its first probe would panic in the checker's goroutine,
	// which takes the process down.
	for _, f := range []struct {
		name  string
		value any
	}{{"Relay", c.Relay}, {"DB", c.DB}, {"Broker", c.Broker}} {
		if v := reflect.ValueOf(f.value); f.value != nil && v.Kind() == reflect.Pointer && v.IsNil() {
			return fmt.Errorf("%w: %s is a nil %T; leave the field nil for no %s check", ErrInvalidConfig, f.name, f.value, strings.ToLower(f.name))
		}
	}
	return nil
}

// Status is the outcome of a check or of a whole report.
type Status string

// The statuses.
const (
	StatusOK   Status = "ok"
	StatusFail Status = "fail"
)

// Names of the checks, the [Result.Name] values.
const (
	CheckRelay    = "relay"
	CheckDatabase = "database"
	CheckBacklog  = "backlog"
	CheckBroker   = "broker"
)

// Report is the result of all the checks of one request, and the JSON body
// of the handlers' responses.
type Report struct {
	// Status is [StatusOK] when every check passed.
	Status Status `json:"status"`
	// Checks are the checks that ran, in the order relay, database,
	// backlog, broker.
	Checks []Result `json:"checks"`
}

// Result is the outcome of one check.
type Result struct {
	// Name is [CheckRelay], [CheckDatabase], [CheckBacklog] or
	// [CheckBroker].
	Name string `json:"name"`
	// Status is [StatusOK] when the check passed.
	Status Status `json:"status"`
	// Seconds is what was measured: the time since the relay's last
	// progress, the ping's duration, or the age of the oldest pending
	// message.
	Seconds float64 `json:"seconds"`
	// LimitSeconds is the limit Seconds was held to (MaxStall,
	// MaxOldestPending), 0 for the database check.
	LimitSeconds float64 `json:"limit_seconds,omitempty"`
	// Error says why the check failed; empty when it passed.
	Error string `json:"error,omitempty"`
}

// Checker runs the checks of a [Config] and serves them over HTTP. It is
// safe for concurrent use.
type Checker struct {
	cfg     Config
	created time.Time
}

// New returns a Checker for cfg, with its defaults applied, or an error
// wrapping [ErrInvalidConfig].
func New(cfg Config) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Checker{cfg: cfg, created: cfg.Clock.Now()}, nil
}

// Check runs every configured check, concurrently, and reports them.
func (c *Checker) Check(ctx context.Context) Report {
	return c.report(ctx, true)
}

// Live runs the relay check only (see [Checker.Liveness]).
func (c *Checker) Live(ctx context.Context) Report {
	return c.report(ctx, false)
}

// Readiness returns a handler that runs every check ([Checker.Check]) and
// answers 200 with the JSON [Report] when all pass, 503 otherwise.
func (c *Checker) Readiness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, c.Check(r.Context()))
	})
}

// Liveness returns a handler that runs only the relay check
// ([Checker.Live]): a stalled relay is one that a restart may cure, a
// database outage or a backlog is not. It answers as [Checker.Readiness].
func (c *Checker) Liveness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, c.Live(r.Context()))
	})
}

// ServeHTTP serves the readiness report ([Checker.Readiness]).
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serve(w, r, c.Check(r.Context()))
}

func serve(w http.ResponseWriter, r *http.Request, rep Report) {
	body, err := json.Marshal(rep)
	if err != nil {
		http.Error(w, "health: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	code := http.StatusOK
	if rep.Status != StatusOK {
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(append(body, '\n'))
	}
}

func (c *Checker) report(ctx context.Context, all bool) Report {
	var checks []func(context.Context) Result
	if c.cfg.Relay != nil {
		checks = append(checks, c.checkRelay)
	}
	if all && c.cfg.DB != nil {
		checks = append(checks, c.checkDB)
	}
	if all && c.cfg.OldestPending != nil {
		checks = append(checks, c.checkBacklog)
	}
	if all && c.cfg.Broker != nil {
		checks = append(checks, c.checkBroker)
	}
	rep := Report{Status: StatusOK, Checks: make([]Result, len(checks))}
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Go(func() { rep.Checks[i] = check(ctx) })
	}
	wg.Wait()
	for _, r := range rep.Checks {
		if r.Status != StatusOK {
			rep.Status = StatusFail
		}
	}
	return rep
}

func (c *Checker) checkRelay(context.Context) Result {
	res := Result{Name: CheckRelay, Status: StatusOK, LimitSeconds: c.cfg.MaxStall.Seconds()}
	now := c.cfg.Clock.Now()
	last := c.cfg.Relay.LastProgress()
	since := last
	if last.IsZero() {
		since = c.created
	}
	age := max(now.Sub(since), 0)
	res.Seconds = age.Seconds()
	if age > c.cfg.MaxStall {
		res.Status = StatusFail
		if last.IsZero() {
			res.Error = fmt.Sprintf("no progress since the check started %v ago (limit %v): is the relay running?", age.Round(time.Millisecond), c.cfg.MaxStall)
		} else {
			res.Error = fmt.Sprintf("no progress for %v (limit %v)", age.Round(time.Millisecond), c.cfg.MaxStall)
		}
	}
	return res
}

func (c *Checker) checkDB(ctx context.Context) Result {
	res := Result{Name: CheckDatabase, Status: StatusOK}
	start := c.cfg.Clock.Now()
	_, err := bounded(ctx, c.cfg.Timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.cfg.DB.PingContext(ctx)
	})
	res.Seconds = max(c.cfg.Clock.Now().Sub(start), 0).Seconds()
	if err != nil {
		res.Status, res.Error = StatusFail, "ping: "+err.Error()
	}
	return res
}

func (c *Checker) checkBroker(ctx context.Context) Result {
	res := Result{Name: CheckBroker, Status: StatusOK}
	start := c.cfg.Clock.Now()
	_, err := bounded(ctx, c.cfg.Timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.cfg.Broker.Ping(ctx)
	})
	res.Seconds = max(c.cfg.Clock.Now().Sub(start), 0).Seconds()
	if err != nil {
		res.Status, res.Error = StatusFail, "broker ping: "+err.Error()
	}
	return res
}

func (c *Checker) checkBacklog(ctx context.Context) Result {
	res := Result{Name: CheckBacklog, Status: StatusOK, LimitSeconds: c.cfg.MaxOldestPending.Seconds()}
	age, err := bounded(ctx, c.cfg.Timeout, c.cfg.OldestPending)
	if err != nil {
		res.Status, res.Error = StatusFail, "oldest pending: "+err.Error()
		return res
	}
	res.Seconds = age.Seconds()
	if age > c.cfg.MaxOldestPending {
		res.Status = StatusFail
		res.Error = fmt.Sprintf("oldest pending message is %v old (limit %v)", age.Round(time.Millisecond), c.cfg.MaxOldestPending)
	}
	return res
}

// bounded calls fn with a context that expires after timeout, and returns
// when fn does or when that context is done, whichever comes first: a
// source that ignores its context cannot hold the probe.
func bounded[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("no answer: %w", context.Cause(ctx))
	}
}
