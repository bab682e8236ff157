// Package proc reads what the agent needs to know about a target process
// from /proc: its memory mappings, the ELF modules behind them and their
// load bias, its threads and identity, and its memory.
//
// Everything here works on a foreign process without stopping it. Paths
// reported by the kernel are in the target's mount namespace; Module.HostPath
// is the same file reached from the agent (through /proc/PID/root, or
// /proc/PID/map_files when the file was deleted or replaced on disk), so
// containerised targets need no special handling by callers.
package proc
