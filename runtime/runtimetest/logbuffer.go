package runtimetest

import (
	"bytes"
	"sync"
)

// LogBuffer collects text written from several goroutines at once, such as
// the output of a slog handler shared by a relay, a consumer or a broker
// adapter under test, or of a child process; String reads what was written
// so far. The zero value is an empty buffer ready to use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p. It never fails.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
