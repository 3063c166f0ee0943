package kafka

import "time"

// SetStallWarnAfter sets how long a full partition stream holds the others
// back before s logs it (10s by default).
func SetStallWarnAfter(s *Subscriber, d time.Duration) { s.stallWarnAfter = d }
