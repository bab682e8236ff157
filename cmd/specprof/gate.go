package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
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
	err = syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "specprof: exec %s: %v\n", path, err)
	return 126
}
