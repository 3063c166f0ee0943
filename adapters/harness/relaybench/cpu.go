package main

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeter measures the CPU time spent from its start: by this process
// (the relays, their publishers and the in-process broker), and by the
// PostgreSQL server when it runs on this machine (its processes named
// "postgres" in /proc, and the backends they reaped).
type cpuMeter struct {
	server, self time.Duration
	serverOK     bool
}

// cpuUse is what a cpuMeter measured; server is zero when serverOK is
// false (the server is elsewhere, or /proc is not there to read).
type cpuUse struct {
	server, self time.Duration
	serverOK     bool
}

// startCPU starts a measurement; local says whether the database URL is
// on this machine.
func startCPU(local bool) cpuMeter {
	m := cpuMeter{self: selfCPU()}
	if local {
		m.server, m.serverOK = serverCPU()
	}
	return m
}

func (m cpuMeter) stop() cpuUse {
	u := cpuUse{self: selfCPU() - m.self}
	if m.serverOK {
		s, ok := serverCPU()
		u.server, u.serverOK = s-m.server, ok
	}
	return u
}

// localURL reports whether a database URL's host is this machine.
func localURL(dsn string) bool {
	u, err := url.Parse(dsn)
	if err != nil {
		return false
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1", "":
		return true
	}
	return false
}

// selfCPU is this process's user and system time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is Linux's USER_HZ, the unit of the times in /proc/<pid>/stat.
const clockTick = 10 * time.Millisecond

// serverCPU adds up the user and system time of the processes named
// postgres, and of the children they reaped (the postmaster reaps the
// backends that exit), from /proc.
func serverCPU() (time.Duration, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var ticks int64
	found := false
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // it exited
		}
		// pid (comm) state ppid ... utime stime cutime cstime: fields 14 – 17.
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		for _, v := range f[11:15] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, false
			}
			ticks += n
		}
		found = true
	}
	return time.Duration(ticks) * clockTick, found
}
