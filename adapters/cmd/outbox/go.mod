module github.com/gooutbox/outbox/adapters/cmd/outbox

go 1.26.0

require github.com/gooutbox/outbox v0.0.0-00010101000000-000000000000

require github.com/gooutbox/outbox/adapters/amqp v0.0.0-00010101000000-000000000000

require github.com/gooutbox/outbox/adapters/nats v0.0.0-00010101000000-000000000000

require github.com/gooutbox/outbox/adapters/redis v0.0.0-00010101000000-000000000000

require github.com/gooutbox/outbox/adapters/sql v0.0.0-00010101000000-000000000000

require github.com/gooutbox/outbox/adapters/sqs v0.0.0-00010101000000-000000000000

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/glebarez/go-sqlite v1.23.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/google/go-cmp v0.7.0
	github.com/google/uuid v1.6.0
	github.com/gooutbox/outbox/adapters/kafka/kafkatest v0.0.0-00010101000000-000000000000
	github.com/gooutbox/outbox/adapters/metrics v0.0.0-00010101000000-000000000000
	github.com/gooutbox/outbox/hooks/hookstest v0.0.0-00010101000000-000000000000
	github.com/gooutbox/outbox/runtime/sqlstore/pgcdc v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.12.0
	github.com/prometheus/client_golang v1.25.0
	github.com/rabbitmq/amqp091-go v1.10.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
)

require (
	github.com/Azure/azure-sdk-for-go/sdk/azcore v1.23.0 // indirect
	github.com/Azure/azure-sdk-for-go/sdk/internal v1.12.0 // indirect
	github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus v1.11.0 // indirect
	github.com/Azure/go-amqp v1.7.0 // indirect
	github.com/aws/aws-sdk-go-v2/service/eventbridge v1.55.11 // indirect
	github.com/ncruces/go-strftime v1.0.0 // indirect
	golang.org/x/net v0.59.0 // indirect
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/Rican7/retry v0.3.1 // indirect
	github.com/ThreeDotsLabs/watermill-amqp/v3 v3.0.2 // indirect
	github.com/ThreeDotsLabs/watermill-nats/v2 v2.1.3 // indirect
	github.com/ThreeDotsLabs/watermill-redisstream v1.4.5 // indirect
	github.com/ThreeDotsLabs/watermill-sql/v4 v4.1.2 // indirect
	github.com/aws/aws-sdk-go-v2 v1.48.0 // indirect
	github.com/aws/aws-sdk-go-v2/config v1.33.18 // indirect
	github.com/aws/aws-sdk-go-v2/credentials v1.21.0 // indirect
	github.com/aws/aws-sdk-go-v2/feature/ec2/imds v1.20.9 // indirect
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.5.12 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.8.12 // indirect
	github.com/aws/aws-sdk-go-v2/internal/v4a v1.5.12 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/accept-encoding v1.13.25 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/presigned-url v1.14.12 // indirect
	github.com/aws/aws-sdk-go-v2/service/signin v1.13.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/sns v1.48.0 // indirect
	github.com/aws/aws-sdk-go-v2/service/sqs v1.53.0 // indirect
	github.com/aws/aws-sdk-go-v2/service/sso v1.39.5 // indirect
	github.com/aws/aws-sdk-go-v2/service/ssooidc v1.44.5 // indirect
	github.com/aws/aws-sdk-go-v2/service/sts v1.52.0 // indirect
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cenkalti/backoff/v3 v3.2.2 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/glebarez/sqlite v1.11.0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/gooutbox/outbox/adapters/eventbridge v0.0.0-00010101000000-000000000000
	github.com/gooutbox/outbox/adapters/servicebus v0.0.0-00010101000000-000000000000
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pglogrepl v0.0.0-20251213150135-2e8d0df862c1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/lib/pq v1.10.9 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/segmentio/kafka-go v0.4.51 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	github.com/twmb/franz-go v1.22.3 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	github.com/vmihailenco/msgpack v4.0.4+incompatible // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/appengine v1.6.8 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gorm.io/driver/mysql v1.6.0 // indirect
	gorm.io/driver/postgres v1.6.1 // indirect
	gorm.io/gorm v1.30.5 // indirect
	modernc.org/libc v1.74.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.11.0 // indirect
	modernc.org/sqlite v1.55.0 // indirect
)

replace github.com/gooutbox/outbox => ../../..

replace github.com/gooutbox/outbox/runtime/sqlstore/pgcdc => ../../../runtime/sqlstore/pgcdc

replace github.com/gooutbox/outbox/adapters/amqp => ../../amqp

replace github.com/gooutbox/outbox/adapters/nats => ../../nats

replace github.com/gooutbox/outbox/adapters/redis => ../../redis

replace github.com/gooutbox/outbox/adapters/sql => ../../sql

replace github.com/gooutbox/outbox/adapters/sqs => ../../sqs

replace github.com/gooutbox/outbox/adapters/metrics => ../../metrics

replace github.com/gooutbox/outbox/adapters/eventbridge => ../../eventbridge

replace github.com/gooutbox/outbox/adapters/servicebus => ../../servicebus

replace github.com/gooutbox/outbox/hooks/hookstest => ../../../hooks/hookstest

replace github.com/gooutbox/outbox/adapters/kafka/kafkatest => ../../../adapters/kafka/kafkatest
