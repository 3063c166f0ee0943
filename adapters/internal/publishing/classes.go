package publishing

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/gooutbox/outbox/runtime"
)

// ConnectionLost reports whether err says the connection to the broker
// failed rather than the message: a network error (a refused, reset or
// aborted connection, a dial or I/O timeout, a name that does not
// resolve), an EOF or a closed connection, a broken pipe, or a context
// deadline (the call timed out waiting for the broker).
func ConnectionLost(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded)
}

// Classify marks as transient ([runtime.Transient]) the errors of a
// Publish call for which transient reports true: err itself, or, when err
// wraps a [runtime.PublishErrors], each message's error in it (in place).
// An error already permanent or transient is left as it is, and so is one
// transient does not recognise: the store counts it toward parking.
func Classify(err error, transient func(error) bool) error {
	if err == nil {
		return nil
	}
	var perMessage runtime.PublishErrors
	if errors.As(err, &perMessage) {
		for i, e := range perMessage {
			if e != nil && !runtime.IsPermanent(e) && !runtime.IsTransient(e) && transient(e) {
				perMessage[i] = runtime.Transient(e)
			}
		}
		return err
	}
	if runtime.IsPermanent(err) || runtime.IsTransient(err) || !transient(err) {
		return err
	}
	return runtime.Transient(err)
}
