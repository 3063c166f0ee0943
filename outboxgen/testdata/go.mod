module github.com/gooutbox/outbox/outboxgen/testdata

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/google/uuid v1.6.0
	github.com/gooutbox/outbox v0.0.0
)

replace github.com/gooutbox/outbox => ../..
