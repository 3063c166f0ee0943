package sqs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gooutbox/outbox/runtime"
)

// queueCache resolves queue names to URLs (GetQueueUrl), creating missing
// queues when create is set, and remembers them.
type queueCache struct {
	client SQSAPI
	create bool
	attrs  map[string]string

	mu   sync.Mutex
	urls map[string]string
}

func newQueueCache(client SQSAPI, create bool, attrs map[string]string) *queueCache {
	return &queueCache{client: client, create: create, attrs: attrs, urls: make(map[string]string)}
}

// url returns the URL of queue name.
func (c *queueCache) url(ctx context.Context, name string) (string, error) {
	c.mu.Lock()
	u, ok := c.urls[name]
	c.mu.Unlock()
	if ok {
		return u, nil
	}
	out, err := c.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err == nil {
		u = aws.ToString(out.QueueUrl)
	} else {
		var missing *types.QueueDoesNotExist
		if !c.create || !errors.As(err, &missing) {
			return "", fmt.Errorf("GetQueueUrl %s: %w", name, err)
		}
		if u, err = createFIFOQueue(ctx, c.client, name, c.attrs); err != nil {
			return "", err
		}
	}
	c.mu.Lock()
	c.urls[name] = u
	c.mu.Unlock()
	return u, nil
}

// forget drops name from the cache, after the queue was found missing.
func (c *queueCache) forget(name string) {
	c.mu.Lock()
	delete(c.urls, name)
	c.mu.Unlock()
}

// createFIFOQueue creates a FIFO queue (idempotent when the queue exists
// with the same attributes) and returns its URL.
func createFIFOQueue(ctx context.Context, client SQSAPI, name string, extra map[string]string) (string, error) {
	attrs := maps.Clone(extra)
	if attrs == nil {
		attrs = make(map[string]string, 2)
	}
	attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
	if _, ok := attrs[string(types.QueueAttributeNameContentBasedDeduplication)]; !ok {
		attrs[string(types.QueueAttributeNameContentBasedDeduplication)] = "false"
	}
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		var exists *types.QueueNameExists
		if errors.As(err, &exists) {
			// It exists with other attributes: use it as it is.
			got, gerr := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
			if gerr == nil {
				return aws.ToString(got.QueueUrl), nil
			}
		}
		return "", fmt.Errorf("CreateQueue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// permanentf returns a [runtime.PermanentError] with a formatted error.
func permanentf(format string, args ...any) error {
	return runtime.Permanent(fmt.Errorf(format, args...))
}
