package runtimetest

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
)

// IOParallel is the least default -parallel that [Main] sets: how many
// parallel tests of a package run at once when the command line does not
// say.
const IOParallel = 8

// Main runs m with a default -parallel of the larger of [IOParallel] and
// four times GOMAXPROCS, and returns m.Run's exit code. It is for the
// TestMain of packages whose tests spend their time waiting on databases,
// brokers and lease timers rather than on the CPU: go test's default, one
// parallel test per CPU, leaves a 2-core machine idle through them. A
// -parallel (-test.parallel) on the command line still wins, as flags are
// parsed in m.Run:
//
//	func TestMain(m *testing.M) { runtimetest.Main(m) }
//
// Since Go 1.15 a TestMain that returns exits with m.Run's code.
func Main(m *testing.M) int {
	if f := flag.Lookup("test.parallel"); f != nil {
		_ = f.Value.Set(strconv.Itoa(max(IOParallel, 4*runtime.GOMAXPROCS(0))))
	}
	return m.Run()
}
