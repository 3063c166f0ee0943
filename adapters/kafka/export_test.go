package kafka

import "time"

// SetStallWarnAfter sets how long a partition's stream stays full before s
// logs it (10s by default).
func SetStallWarnAfter(s *Subscriber, d time.Duration) { s.stallWarnAfter = d }

// Fetch is fetch, the subscriber's read of a reader's next record.
var Fetch = fetch

// Classify is classify, the publisher's error classes.
var Classify = classify
