package main

// The adapters whose URL schemes "outbox relay --broker" opens (see package
// adapters/broker): importing one registers its schemes.
import (
	_ "github.com/gooutbox/outbox/adapters/amqp"        // amqp://, amqps://
	_ "github.com/gooutbox/outbox/adapters/eventbridge" // eventbridge://
	_ "github.com/gooutbox/outbox/adapters/kafka"       // kafka://
	_ "github.com/gooutbox/outbox/adapters/memory"
	_ "github.com/gooutbox/outbox/adapters/nats"       // nats://
	_ "github.com/gooutbox/outbox/adapters/redis"      // redis://
	_ "github.com/gooutbox/outbox/adapters/servicebus" // servicebus://
	_ "github.com/gooutbox/outbox/adapters/sql"        // postgres://, postgresql://
	_ "github.com/gooutbox/outbox/adapters/sqs"        // sqs://, sns://
)
