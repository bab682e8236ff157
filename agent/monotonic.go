package agent

import "golang.org/x/sys/unix"

// monotonicNow is CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns and
// of the CUPTI library's timestamps.
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
