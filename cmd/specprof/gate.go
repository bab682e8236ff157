package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// gateArg marks the hidden exec gate: `specprof run` starts itself with it,
// registers the child's pid with the tracer, then releases the gate, which
// execs the target under the same pid. Nothing of the target runs before
// the tracer follows it.
const gateArg = "__specprof_exec_gate"

func runGate(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "specprof: exec gate: no command")
		return 127
	}
	// fd 3 is the read end of the release pipe: EOF means go.
	release := os.NewFile(3, "release")
	var b [1]byte
	if n, _ := release.Read(b[:]); n == 1 && b[0] == 'x' {
		return 125 // the parent failed to set up tracing and asked us to give up
	}
	_, _ = io.Copy(io.Discard, release)
	release.Close()
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "specprof: %s: command not found\n", args[0])
		return 127
	}
	// Capabilities belong to a thread, and execve gives the new program
	// those of the thread that calls it: drop them on this one.
	runtime.LockOSThread()
	if err := dropInheritedCaps(); err != nil {
		fmt.Fprintf(os.Stderr, "specprof: exec gate: %v; not starting %s with specprof's capabilities\n", err, args[0])
		return 126
	}
	err = syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "specprof: exec %s: %v\n", path, err)
	return 126
}

// dropInheritedCaps empties the calling thread's ambient and inheritable
// capability sets, the two that execve carries over to a program without
// file capabilities. specprof may hold CAP_BPF, CAP_PERFMON,
// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH as ambient capabilities (the
// deployment without root), and the target must not: with them it could
// read any file and trace any process. Under root the target is root, as
// it would be without specprof.
func dropInheritedCaps() error {
	// EINVAL: a kernel without ambient capabilities (before 4.3), so none to clear.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3: capabilities 0-31, then 32-63
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read the capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear the inheritable capabilities: %w", err)
	}
	return nil
}

// neededCaps are the capabilities specprof needs without root.
var neededCaps = []struct {
	capability uint
	name       string
}{
	{unix.CAP_BPF, "CAP_BPF"}, {unix.CAP_PERFMON, "CAP_PERFMON"},
	{unix.CAP_SYS_PTRACE, "CAP_SYS_PTRACE"}, {unix.CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"},
}

// missingCaps names the capabilities of neededCaps that the process does
// not hold in its effective set (none under root).
func missingCaps() ([]string, error) {
	if os.Geteuid() == 0 {
		return nil, nil
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("read the capabilities: %w", err)
	}
	var missing []string
	for _, c := range neededCaps {
		if data[c.capability/32].Effective&(1<<(c.capability%32)) == 0 {
			missing = append(missing, c.name)
		}
	}
	return missing, nil
}
