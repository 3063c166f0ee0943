// Package testdata is the module of outboxgen's golden cases: each
// directory holds a schema, the code outboxgen generates from it (or the
// diagnostics it prints) and, for some, hand-written upcasters and
// round-trip tests. CI builds and vets this module, so the golden files are
// proven to compile; go test ./outboxgen -update rewrites them.
package testdata
