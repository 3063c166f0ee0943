package amqp

import "time"

// SetGateClock replaces the clock of the fence of p's connection, which
// must be connected (see Publisher.Connect).
func SetGateClock(p *Publisher, now func() time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate.SetClock(now)
}
