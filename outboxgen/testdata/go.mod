module github.com/gooutbox/outbox/outboxgen/testdata

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/google/uuid v1.6.0
	github.com/gooutbox/outbox v0.0.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
)

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/gooutbox/outbox => ../..
