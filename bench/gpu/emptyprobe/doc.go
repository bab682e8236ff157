// Command emptyprobe attaches a BPF program that does nothing to every CUDA
// driver entry point specprof hooks, in one running process, for a while:
// the cost of the uprobe traps alone, without specprof's frame walk, ring
// buffer and agent. Entry probes only: specprof's return probes on the sync
// and blocking-copy calls (a few per cycle against hundreds of launches)
// have no counterpart here. bench/gpu/abattach.py runs it in place of `specprof
// attach` (--attach-cmd) to split specprof's cost on a workload into the
// traps and the rest (docs/benchmarks/h200.md §17).
//
//	emptyprobe -pid PID -duration 12s
//
// It logs "probes attached" in the format of specprof's log once the probes
// are in place, and removes them when the duration is up or on SIGINT/SIGTERM.
package main
