package bpf

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ensureTracefs mounts tracefs at /sys/kernel/tracing when neither it nor
// debugfs's tracing directory is there (Load): the openat and process
// tracepoints are found through it, and a fresh machine often has it
// unmounted. It reports whether it mounted it. A mount needs CAP_SYS_ADMIN;
// without it the error says what to run.
func ensureTracefs() (bool, error) {
	for _, dir := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.TRACEFS_MAGIC {
			return false, nil
		}
	}
	err := unix.Mount("nodev", "/sys/kernel/tracing", "tracefs", 0, "")
	if err == nil {
		return true, nil
	}
	if errors.Is(err, unix.EPERM) {
		return false, fmt.Errorf("tracefs is not mounted and specprof may not mount it (no CAP_SYS_ADMIN): run 'mount -t tracefs nodev /sys/kernel/tracing' as root once, or add it to /etc/fstab")
	}
	return false, fmt.Errorf("mount tracefs at /sys/kernel/tracing: %w (mount it by hand: mount -t tracefs nodev /sys/kernel/tracing)", err)
}
