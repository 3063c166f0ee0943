// Package memory is an in-process Watermill [message.Publisher] and
// [message.Subscriber] that neither loses nor reorders messages: the broker
// of the quickstart, of examples and of tests that need no server.
//
// # Why not gochannel as it is
//
// Watermill's gochannel with its default Config starts one goroutine per
// published message, so Publish returns before delivery and concurrent
// deliveries overtake each other (a pre-filled outbox relayed through it
// arrived with thousands of order violations); with no subscriber, a message
// is dropped and Publish still returns nil, so the relay marks it published.
// Its Persistent and BlockPublishUntilSubscriberAck options do not close
// these gaps:
//
//   - A new subscriber of a persistent GoChannel gets the stored messages
//     from one goroutine each (`go s.sendMessageToSubscriber(msg, ...)` in
//     Subscribe), so the replay has no order, and messages published while
//     the replay runs are delivered live, concurrently with it.
//   - BlockPublishUntilSubscriberAck does not block when the topic has no
//     subscriber, and without Persistent that message is gone.
//   - A subscriber that is closed while holding a message counts as having
//     acked it; Publish returns nil and, without Persistent, nobody gets it.
//
// Measured with Watermill v1.5.1: 5,000 messages of 200 aggregates published
// in batches before the first Subscribe were all dropped with the default
// Config; with Persistent and BlockPublishUntilSubscriberAck all 5,000
// arrived, 4,147 of them out of their aggregate's order.
//
// None of this can be fixed from outside GoChannel, so this package is a
// small pub/sub of its own rather than a wrapper.
//
// # How it works
//
// Each topic is an append-only log in memory. [PubSub.Publish] appends all
// its messages to the log at once, under one lock, and returns; a message is
// never dropped, whether or not anyone subscribes. Each [PubSub.Subscribe]
// call reads the topic's log from its first message, one message at a time:
// the next message is sent only after the current one is acked; a nacked
// message is sent again before any later one. So every subscription receives
// every message of the topic, published before or after it subscribed, in
// publish order.
//
// There are no consumer groups: two subscriptions to one topic each receive
// every message, and a new subscription starts again at the beginning of the
// topic. Messages live as long as the [PubSub]: in-process only, gone when
// the process exits, and bounded only by [Config.MaxMessagesPerTopic].
// Publisher and subscriber are one value: subscribe on the same [PubSub] you
// publish to.
//
// # Broker URL
//
// Importing the package registers memory:// with package adapters/broker,
// so that broker.Open (and the outbox command's relay) opens them; the
// parameters are documented on openMemory (go doc -u).
package memory
