// Package pprof builds specprof's three pprof profiles from the agent's
// cycle timelines and CPU samples, for `go tool pprof`:
//
//   - gpu_time: GPU kernel time by the Python stack that launched it. The
//     stack is abridged to what the agent knows of every launch: the
//     preset's cycle function → the phase function → the launch site (the
//     innermost Python frame of the driver call) → the kernel name as the
//     leaf "function" ("graph N" for a whole graph replay under graph-level
//     tracing). Sample types: kernels (count), gpu (nanoseconds);
//     labels phase, device, stream (strings) and pid, tid (numbers).
//   - sync_wait: the time the CPU was blocked in synchronizing calls, by
//     the same abridged stack with the blocking API as the leaf. Sample
//     types: syncs (count), wait (nanoseconds).
//   - cpu: the CPU sampler's samples, by full Python stack with the native
//     leaf. Sample types: samples (count), cpu (nanoseconds); the period
//     is the sampling interval.
//
// Python functions carry their file and (where the agent reports it) their
// first line; locations carry the line. Memory is bounded: each profile
// keeps at most Options.MaxStacks distinct (stack, labels) pairs and
// Options.MaxFrames distinct frames; what does not fit is added to one
// overflow sample, so totals stay exact, and the profile's comments say
// how much was folded. Output is deterministic: functions, locations and
// samples are sorted.
package pprof
