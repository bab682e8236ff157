// Package perfetto writes a session's cycle timelines as a Chrome trace
// (the JSON "Trace Event Format"), which ui.perfetto.dev and
// chrome://tracing load.
//
// Layout, on one time axis (CLOCK_MONOTONIC, microseconds from the first
// event; otherData.base_wall gives the wall-clock time of ts 0):
//
//   - one track (pid) per traced process (labelled with its TP rank when
//     known), one thread track per thread: the cycle as a slice, its
//     phases as slices nested in it, blocking calls (syncs, synchronous
//     copies) nested in their phase;
//   - one synthetic process per (traced process, GPU device), named
//     "GPU <n>", with one thread track per stream, "GPU <n> / stream <s>":
//     kernels, copies and sets as slices; a collective whose kernel is
//     known wraps that kernel on its stream, with its bytes, algorithm and
//     bus bandwidth as arguments (collectives without a known kernel are
//     instants on a "NCCL calls" track of their thread);
//   - flow arrows (ph s/f) from each launch on the CPU thread to the GPU
//     work it started.
//
// Slices on one track always nest properly: a slice that would overlap
// another partially (a phase whose calls interleave with another's, two
// kernels that ran concurrently on one stream) goes to an extra track
// named "… overlap <k>" next to it.
//
// Memory is bounded: whole cycles are kept until Options.MaxEvents events;
// later cycles are counted, not kept, and the file says so (otherData and
// an instant event at the end).
//
// Check validates a trace against the format's rules (required fields per
// phase type, matched and bound flows, non-negative durations, proper
// nesting); the tests run it on what Write produces.
package perfetto
