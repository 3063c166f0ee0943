//go:build unix

package metrics_test

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time the process has used (user and system, all
// threads): less sensitive than wall time to other processes sharing the
// machine.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
