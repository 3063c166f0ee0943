// Package tracingtest records the spans of a test in memory: an
// OpenTelemetry SDK tracer provider that exports every span synchronously,
// when it ends, to an in-memory exporter the test reads.
//
//	tp, spans := tracingtest.New()
//	tr, _ := tracing.New(tracing.Config{TracerProvider: tp})
//	// ... publish and consume ...
//	for _, s := range spans.GetSpans() { ... }
package tracingtest

import (
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// New returns a tracer provider that samples every span and exports each,
// as it ends, to the returned exporter. Shut the provider down when done
// (tp.Shutdown(ctx)); spans ended after that are not recorded.
func New() (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSyncer(exp),
	)
	return tp, exp
}
