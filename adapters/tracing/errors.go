package tracing

import "errors"

// ErrInvalidConfig is wrapped by the error [New] returns for an unusable
// [Config]: one without a TracerProvider.
var ErrInvalidConfig = errors.New("tracing: invalid config")
