// Package correlate joins the three streams specprof sees of one CUDA driver
// call (design.md §6) and aggregates the joined GPU work per attribution key.
//
// The streams, all stamped with CLOCK_MONOTONIC nanoseconds (§4):
//
//   - launches (Joiner.Launch): from eBPF uprobes, nearly real time, in ktime
//     order per thread, each carrying the caller's attribution key (for
//     example a cycle and phase, see Key);
//   - API records (Joiner.API): from CUPTI, late and in batches, roughly in
//     order per thread: {pid, tid, start, end, correlation id};
//   - GPU records (Joiner.GPU): from CUPTI, late and in any order, possibly
//     before their API record, possibly duplicated or lost: kernels, copies
//     and sets carrying the correlation id of the call that launched them
//     (every kernel of one graph replay carries the graph launch's id).
//
// A launch belongs to the API record of the same pid and tid whose
// [start, end] contains its ktime; the record's correlation id, which is per
// process, names the GPU records the launch caused, and they are all
// attributed to the launch's key. Per key an Agg counts kernels, GPU busy
// time (the union of kernel intervals: streams overlap, so durations are
// never summed into it), span, summed kernel time and copies.
//
// Memory is bounded by time and by count. The caller advances two
// watermarks per process: AdvanceCPU says every launch up to that ktime has
// been delivered; AdvanceGPU says CUPTI has delivered the records up to that
// time, give or take the horizon. Whatever waits on a watermark is decided
// once the watermark passes it by a horizon (Options), and hard caps shed
// the oldest pending items early (Stats.CapEvictions). Nothing is dropped
// silently: every input lands in exactly one Stats category (see Stats).
//
// A key is finalized, and OnFinal called for it exactly once, when the GPU
// watermark reaches max(its last launch, its last joined record's end) +
// Horizon, when a cap forces it (KeyStats.Evicted), or on Flush/FlushPID.
// It is then remembered for one more horizon, so that records and launches
// still arriving for it count as Late (and LateLaunches) instead of being
// misattributed; after that the key value is free to start over.
//
// A Joiner is not safe for concurrent use and its callbacks must not call
// back into it: the agent owns one per session and feeds it from one
// goroutine.
package correlate
