package model

import (
	"time"

	"golang.org/x/sys/unix"
)

// monotonicNow is CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns and
// of the CUPTI library's timestamps (design.md §4).
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// Clock converts CLOCK_MONOTONIC ns (every timestamp in the model) to wall
// time. The offset is measured once, as the tightest of a few readings
// bracketing time.Now, so that all exported spans share one conversion.
type Clock struct {
	offset int64 // wall ns - monotonic ns
}

// NewClock measures the monotonic-to-wall offset.
func NewClock() Clock {
	best := int64(-1)
	var off int64
	for i := 0; i < 5; i++ {
		a := monotonicNow()
		w := time.Now().UnixNano()
		b := monotonicNow()
		if d := int64(b - a); best < 0 || d < best {
			best = d
			off = w - int64(a+(b-a)/2)
		}
	}
	return Clock{offset: off}
}

// FixedClock is a Clock with a given offset (tests, replays).
func FixedClock(offsetNs int64) Clock { return Clock{offset: offsetNs} }

// Wall converts a CLOCK_MONOTONIC timestamp to wall time.
func (c Clock) Wall(mono uint64) time.Time { return time.Unix(0, int64(mono)+c.offset) }

// Offset is wall ns minus monotonic ns.
func (c Clock) Offset() int64 { return c.offset }
