package redis

import (
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultURL is the server URL used when a config names neither a URL nor
// a Client.
const DefaultURL = "redis://127.0.0.1:6379/0"

// newClient returns client, or a new client for url when client is nil
// (owned reports which).
func newClient(client goredis.UniversalClient, url string) (c goredis.UniversalClient, owned bool, err error) {
	if client != nil {
		return client, false, nil
	}
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, false, fmt.Errorf("%w: URL: %w", ErrInvalidConfig, err)
	}
	if opts.DB < 0 {
		// go-redis would not SELECT it, and write to database 0.
		return nil, false, fmt.Errorf("%w: URL: database %d is negative", ErrInvalidConfig, opts.DB)
	}
	return goredis.NewClient(opts), true, nil
}

// unclosable hides Close from watermill-redisstream, which closes its
// client on Close: the Subscriber closes the client itself, and only when it
// created it.
type unclosable struct {
	goredis.UniversalClient
}

// Close does nothing.
func (unclosable) Close() error { return nil }
