package publishing

import (
	"errors"
	"testing"

	"github.com/gooutbox/outbox/runtime"
)

// TestGate: Close waits for the Publish call in flight before it runs
// release, runs release once, and a Publish after it returns the closed
// error without running; a Publish's error is classified.
func TestGate(t *testing.T) {
	var g Gate
	errClosed := errors.New("closed")
	errBroker := errors.New("broker down")
	isBroker := func(err error) bool { return errors.Is(err, errBroker) }

	if err := g.Publish(errClosed, isBroker, func() error { return errBroker }); !runtime.IsTransient(err) {
		t.Errorf("Publish error %v: want it marked transient", err)
	}

	entered, leave := make(chan struct{}), make(chan struct{})
	published := make(chan error, 1)
	go func() {
		published <- g.Publish(errClosed, isBroker, func() error {
			close(entered)
			<-leave
			return nil
		})
	}()
	<-entered
	released := make(chan struct{})
	closed := make(chan error, 1)
	go func() {
		closed <- g.Close(func() error { close(released); return nil })
	}()
	select {
	case <-released:
		t.Fatal("Close released while a Publish call was in flight")
	case <-closed:
		t.Fatal("Close returned while a Publish call was in flight")
	default:
	}
	close(leave)
	if err := <-published; err != nil {
		t.Fatalf("Publish in flight: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-released
	ran := false
	if err := g.Publish(errClosed, isBroker, func() error { ran = true; return nil }); !errors.Is(err, errClosed) || ran {
		t.Errorf("Publish after Close = %v (ran: %v), want the closed error without running", err, ran)
	}
	if err := g.Close(func() error { t.Error("a second Close ran release"); return nil }); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
