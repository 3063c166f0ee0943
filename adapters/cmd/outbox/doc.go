// Command outbox operates an outbox table: it shows the backlog, lists,
// retries and discards parked events, purges published rows, replays a range
// of published events after a broker lost them, runs a relay process and its
// retention, and creates the tables. On the consuming side, it lists,
// re-drives and discards the messages consumers dead-lettered into their
// database, and shows a consumer group's lag.
//
//	go run github.com/gooutbox/outbox/adapters/cmd/outbox@latest status --db postgres://postgres@127.0.0.1:5432/shop
//	outbox parked list --db mysql://root@127.0.0.1:3306/shop
//	outbox list --aggregate-type order --aggregate-id 42
//	outbox parked retry 1042 1043
//	outbox replay --from 2026-11-30T10:00:00Z --to 2026-11-30T11:00:00Z --topic orders
//	outbox relay --broker kafka://127.0.0.1:9092 --retention 7d
//
// The database comes from --db or $OUTBOX_DATABASE_URL: postgres://
// (pgx), mysql://user:pass@host:3306/db (go-sql-driver/mysql; MariaDB
// too) or sqlite:path/to/file.db. Every command takes --json for output a
// program reads; --db, --table and --json may come before the command's
// name too (outbox --db URL list). It exits 0 when it succeeded, 1 on an error, 2 on a usage
// error, and 3 when "status" or "lag" found what one of its --fail-if flags names.
//
// It lives under adapters (not beside the runtime), in a module of its own,
// because "relay" opens any broker by URL through package adapters/broker,
// so it imports every adapter (brokers.go), and with them every broker
// client; the other commands need only the database drivers.
//
// # Installing
//
// The command is pointed at the outbox's database. Its relay subcommand
// imports every adapter, and with them every broker client, so that the
// runtime packages stay free of them. For the same reason a tool dependency
// on it (go get -tool) records every broker client's module in your go.mod
// (about 80 indirect requirements): to keep a small app's go.mod to what it
// imports, run the command with go run
// github.com/gooutbox/outbox/adapters/cmd/outbox@vX.Y.Z or go install it
// instead.
//
// In a module of your own, "go get -tool github.com/gooutbox/outbox/adapters/cmd/outbox"
// makes it go tool outbox at the version go.mod pins. Working from a local
// clone, with a replace directive for github.com/gooutbox/outbox in go.mod,
// go get would still ask the module proxy: add the tool with go mod edit
// -tool github.com/gooutbox/outbox/adapters/cmd/outbox, then go mod tidy.
//
// outbox dev (go run github.com/gooutbox/outbox/adapters/cmd/outbox@latest dev)
// serves the quickstart's in-process Kafka (package adapters/kafka/kafkatest)
// on 127.0.0.1:9092 until Ctrl-C, for a local program that needs a Kafka:
// --port picks another port, --data dir keeps its records.
//
// # Commands
//
//	go run github.com/gooutbox/outbox/adapters/cmd/outbox@latest status --db postgres://postgres@127.0.0.1:5432/shop
//	# or, in your module, at the version go.mod pins: go tool outbox status ...
//	# (after go get -tool github.com/gooutbox/outbox/adapters/cmd/outbox; with a replace directive:
//	#  go mod edit -tool github.com/gooutbox/outbox/adapters/cmd/outbox && go mod tidy)
//	export OUTBOX_DATABASE_URL=mysql://root@127.0.0.1:3306/shop   # or sqlite:app.db; --db wins
//	outbox status                         # backlog per topic and event type
//	outbox status --fail-if-parked --fail-if-older 5m   # exit 3 when either holds (cron, probes)
//	outbox list --event-id 01a22dcb-3a03-75b4-ad4e-a0e84f9bd1aa   # or --aggregate-id, --state, --topic
//	outbox parked list [--topic orders] [--after 1200 --limit 100]
//	outbox parked show 1042               # last error, headers, payload (any row)
//	outbox parked retry 1042 1043         # or: parked retry --all --topic orders
//	outbox parked discard 1044            # deleted, never published; the aggregate goes on
//	outbox purge --published-before 7d    # or an RFC 3339 time
//	outbox replay --from 2026-11-30T10:00:00Z --to 2026-11-30T11:00:00Z --topic orders   # or row ids
//	outbox relay --broker kafka://127.0.0.1:9092 --retention 7d   # a relay process, with retention
//	outbox relay --broker kafka://127.0.0.1:9092 --listen :9090   # + /metrics, /livez, /readyz
//	outbox janitor --published-age 7d --inbox-retention 14d       # retention alone (--once: one pass)
//	outbox dashboard --addr 127.0.0.1:8080 # the web dashboard (read-only unless --allow-actions)
//	outbox migrate --inbox                # create the outbox (and inbox) tables
//	outbox migrate --dead-letters         # and the consumers' dead-letter table
//	outbox deadletters list --consumer billing   # what consumer.DeadLetterTable kept
//	outbox deadletters show 7             # its error, metadata and payload
//	outbox deadletters redrive 7 --broker kafka://127.0.0.1:9092   # publish it again to its topic
//	outbox deadletters redrive --all --consumer billing --broker kafka://127.0.0.1:9092
//	outbox deadletters discard 8          # delete it for good
//	outbox lag --broker kafka://127.0.0.1:9092 --group billing   # lag per partition
//	outbox migrate --partition-interval 24h   # PostgreSQL: a new outbox partitioned by day (package runtime/sqlstore)
//
//	$ outbox status
//	TOPIC     EVENT TYPE     PENDING  RETRYING  PARKED  OLDEST PENDING
//	orders    orders.placed  3        1         1       586ms
//	payments  payments.made  2        0         0       586ms
//	TOTAL                    5        1         1       587ms
//	$ outbox parked list
//	ID  TOPIC   EVENT TYPE     AGGREGATE  ATTEMPTS  PARKED   LAST ERROR
//	3   orders  orders.placed  order/o3   1         7ms ago  message too large
//
// # Behaviour
//
//   - Start-up: outbox relay started while its database or broker does not
//     answer (a connection refused, a timeout, a name that does not resolve, a
//     server starting up) waits for them, with a WARN per try (1 s apart,
//     doubling to 30 s), and stops cleanly on a signal meanwhile; with
//     --listen, /livez answers 200 and /readyz and /metrics 503 ("starting")
//     while it waits (TestRelayWaitsForItsBrokerAndDatabase). What waiting
//     would not mend exits at once: a bad --broker URL (no scheme, an unknown
//     one, a parameter its scheme does not take, or one the broker refuses: a
//     PostgreSQL database or login, a RabbitMQ user, password or vhost) is a
//     usage error naming the flag and the schemes, the scheme checked before
//     the database is waited for (TestRelayBadBrokerURL; broker.Open connects
//     once to check: TestOpenPostgresServerRefusesURL,
//     TestOpenAMQPServerRefusesURL); a database that answers but refuses the
//     relay (PostgreSQL's no such database, 3D000, or authentication,
//     28000/28P01; MySQL's 1049, 1045) exits 1 naming the URL without its
//     password (TestRelayDatabaseRefused); and a missing table, the outbox's
//     or one migrate creates beside it (<table>_leases, <table>_relays), or
//     the inbox table that --inbox-retention prunes, exits 1 with the
//     missing-table hint (TestRelayMissingTable; the janitor too,
//     TestMissingTableHint).
//   - Databases: postgres://… (pgx), mysql://user:pass@host:3306/db?… (MySQL
//     8, MariaDB; the URL's parameters go to go-sql-driver/mysql,
//     parseTime=true is added), sqlite:path/to/app.db (only migrate creates a
//     missing SQLite file; the other commands fail naming it). --table names
//     another outbox table, --inbox-table another inbox table (a missing
//     table's hint names the flag of that table).
//   - Output: aligned tables for people; --json for programs (snake_case
//     fields; relay and janitor then log JSON lines to stderr).
//   - Exit status: 0 done; 1 error (database unreachable, an id that was not a
//     parked row — the others are still done; an id given twice is one row,
//     counted once); 2 usage error (printed once, on one line; a bad flag
//     value names the flag, the value and what it takes, e.g. --limit -1: a
//     number of rows from 1 to 1000, and migrate --partition-interval on a
//     database other than PostgreSQL is refused before anything is created); 3
//     a status --fail-if-parked | --fail-if-pending N | --fail-if-older AGE
//     condition holds (the status is printed first). --help, -h and outbox
//     help <command> print to stdout and exit 0. Flags and arguments may be
//     interleaved.
//   - Replay puts published rows back in the queue (attempts reset) in one
//     statement; the relays publish them again through their usual machinery,
//     each aggregate's rows in id order and before its newer pending rows.
//     Consumers with an inbox apply each event once while their inbox still
//     holds its marker (replay no further back than the inbox's retention).
//     Ids are inclusive; times compare created_at (--from inclusive, --to
//     exclusive); pending and parked rows are left alone. Replayed rows keep
//     their created_at, so until they are out again the oldest pending age
//     (the backlog health check, outbox status, the dashboard's lag) counts
//     from their first commit.
//   - relay takes --broker (or $OUTBOX_BROKER_URL), --batch, --poll,
//     --max-attempts, --retry-delay, --max-retry-delay, --max-active-relays
//     (default 1: one relay publishes, the others stand by), --hand-over-after
//     (15 s), --migrate, --delete-published (see "No retention at all" in
//     package runtime/sqlstore), and the retention's --retention, --inbox-retention; unset, each has the
//     library's default. A value the library would refuse or read as its
//     default (a negative number or duration, a zero that would mean the
//     default, --max-attempts above 2147483647, a --retry-delay above
//     --max-retry-delay) is a usage error naming the flag, e.g. --batch -5: a
//     number of messages per claim, 1 or more (leave the flag out for the
//     default, 1000) (TestRelayFlagValues). It stops on SIGINT/SIGTERM after
//     the batch in flight (at most --shutdown-timeout, 20s), hands its share
//     of the outbox over and exits 0.
//   - In Go: the same operations are sqlstore.Store's Entries(ctx, Query)
//     (keyset paging by AfterID), Entry, StatsByType, Replay(ctx,
//     ReplayRange), Unpark, Discard, DeletePublished.
//
// # Database URLs that fail
//
// database "shop" does not exist, role "…" does not exist, password
// authentication failed: a URL without a user (postgres://localhost/shop)
// connects as your operating-system user to an existing database. Name
// both, and turn TLS off for a local server without it:
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable, or with a
// password postgres://user:secret@db.example.com:5432/shop. The key/value
// form works too: host=127.0.0.1 user=postgres dbname=test sslmode=disable.
package main
