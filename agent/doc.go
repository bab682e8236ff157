// Package agent turns what the probes report into specprof's model of a
// speculative-decoding server: processes, threads, cycles and phases.
//
// It discovers target processes and their libraries, tells the BPF side how
// to walk each interpreter (agent/python), symbolizes and classifies code
// objects with a phase preset (agent/phase), and aggregates attributed
// events into per-cycle, per-phase statistics (Report). It knows nothing of
// output formats; export consumes the Report and the per-cycle timelines.
//
// The GPU side comes from the injected CUPTI library (cupti): its records
// are joined to the launches eBPF saw (agent/correlate, gpujoin.go), per
// kernel or per whole CUDA graph replay (graph-level tracing), only inside
// tracing windows when duty-cycled (duty.go). Collectives replayed from
// graphs get the arguments of the call that was captured (graphcoll.go).
// Tensor-parallel ranks traced by one session are compared cycle by cycle:
// the straggler of each cycle and each rank's wait (ranks.go).
package agent
