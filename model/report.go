package model

import "time"

// PhaseStats aggregates one phase over a set of cycles (or, for events
// outside any cycle, over the whole run).
type PhaseStats struct {
	Phase       string `json:"phase"`
	Cycles      int    `json:"cycles"`   // cycles in which the phase issued at least one call
	Launches    int64  `json:"launches"` // kernel and graph launches
	GraphLaunch int64  `json:"graph_launches"`
	// Copies counts the device-side copies and sets (cuMemcpyDtoD*,
	// cuMemset*): calls that never block, whose GPU work joins the phase like
	// a launch's. Copies with host memory on one side count in Syncs.
	Copies int64 `json:"copies"`
	// Syncs counts blocking calls: the stream, event and context
	// synchronisations, and the copies with host memory on one side
	// (cuMemcpy, cuMemcpyAsync, cuMemcpy{HtoD,DtoH}{,Async}), which block the
	// CPU when that memory is pageable; their GPU work joins the phase too.
	Syncs      int64 `json:"syncs"`
	SyncWaitNs int64 `json:"sync_wait_ns"` // CPU time inside those calls
	CPUSpanNs  int64 `json:"cpu_span_ns"`  // sum over cycles of first-to-last call (incl. sync returns)
	// Collective calls, plus (with Options.OnCycle) the collectives
	// replayed from CUDA graphs whose captured call is known.
	Colls     int64 `json:"collectives"`
	CollBytes int64 `json:"collective_bytes"`
	Markers   int64 `json:"markers"` // event records, stream waits, captures
	// CPU time from the CPU sampler: the samples taken in the phase and the
	// time they stand for (samples × period).
	CPUSamples int64 `json:"cpu_samples,omitempty"`
	CPUNs      int64 `json:"cpu_ns,omitempty"`
	// CollGPUNs is the GPU time of the phase's collective kernels (NCCL and
	// custom all-reduce, recognised by name): the allreduce share of a phase.
	CollGPUNs int64 `json:"collective_gpu_ns,omitempty"`
	// GPU side (from CUPTI records joined to this phase's launches).
	GPUCycles   int   `json:"gpu_cycles,omitempty"`    // cycles whose GPU work of this phase is known
	GPUKernels  int64 `json:"gpu_kernels,omitempty"`   // kernels launched by the phase
	GPUBusyNs   int64 `json:"gpu_busy_ns,omitempty"`   // union of their intervals (streams overlap: never summed)
	GPUSpanNs   int64 `json:"gpu_span_ns,omitempty"`   // first kernel start to last kernel end
	GPUKernelNs int64 `json:"gpu_kernel_ns,omitempty"` // sum of kernel durations
	// Whole CUDA graph executions (graph-level tracing, --cupti-graphs
	// graph): their kernels are not counted one by one; each graph's first
	// node start to last node end counts toward busy time and span instead.
	GPUGraphs      int64 `json:"gpu_graphs,omitempty"`
	GPUGraphNs     int64 `json:"gpu_graph_ns,omitempty"`
	GPUMemcpys     int64 `json:"gpu_memcpys,omitempty"`      // copies
	GPUMemcpyBytes int64 `json:"gpu_memcpy_bytes,omitempty"` //
	GPUMemcpyNs    int64 `json:"gpu_memcpy_ns,omitempty"`    //
	GPUMemsets     int64 `json:"gpu_memsets,omitempty"`      // memory sets
	GPUMemsetBytes int64 `json:"gpu_memset_bytes,omitempty"` //
	// GPUActiveNs is GPU busy time with copies and sets, plus the GPU's
	// hand-over gaps between work that was queued before its predecessor
	// on the stream ended; time a stream waited for the CPU to launch is
	// left out. On a GPU-bound phase it is what CUDA events around the
	// phase measure, and it does not grow when the CPU slows down.
	GPUActiveNs int64 `json:"gpu_active_ns,omitempty"`
	// GPUElapsedNs is the stream time from the phase's first to its last
	// GPU work, every gap included (idle waits for the CPU too): what CUDA
	// events around the phase measure in the same run, less the launch
	// latency of a first launch that found the GPU idle.
	GPUElapsedNs int64 `json:"gpu_elapsed_ns,omitempty"`
	// GPUHostGapNs is the time the GPU sat idle before the phase's first
	// GPU work, since the thread's previous GPU work ended (an earlier phase
	// of the cycle, or the previous cycle): the GPU waited for the host —
	// Python, launch overhead, a host sync and the work after it. CUDA
	// events around a phase count the part of it that falls inside the
	// phase; the phases' elapsed times plus these gaps make up the cycle's
	// GPU timeline.
	GPUHostGapNs int64 `json:"gpu_host_gap_ns,omitempty"`
	// GPUFirst and GPULast bound this phase's GPU work in one cycle
	// (CLOCK_MONOTONIC ns), from which the engine derives GPUHostGapNs;
	// not reported.
	GPUFirst uint64 `json:"-"`
	GPULast  uint64 `json:"-"`
	// SyncSites counts blocked time by the innermost Python frame that blocked.
	SyncSites map[string]int64 `json:"sync_sites_ns,omitempty"`
}

func (s *PhaseStats) Add(o *PhaseStats) {
	s.Cycles += o.Cycles
	s.Launches += o.Launches
	s.GraphLaunch += o.GraphLaunch
	s.Copies += o.Copies
	s.Syncs += o.Syncs
	s.SyncWaitNs += o.SyncWaitNs
	s.CPUSpanNs += o.CPUSpanNs
	s.Colls += o.Colls
	s.CollBytes += o.CollBytes
	s.Markers += o.Markers
	s.CPUSamples += o.CPUSamples
	s.CPUNs += o.CPUNs
	s.CollGPUNs += o.CollGPUNs
	s.AddGPU(o)
	for k, v := range o.SyncSites {
		if s.SyncSites == nil {
			s.SyncSites = map[string]int64{}
		}
		s.SyncSites[k] += v
	}
}

// Window is the aggregate of a run of consecutive cycles of one thread.
type Window struct {
	PID        int           `json:"pid"`
	TID        int           `json:"tid"`
	FirstCycle int           `json:"first_cycle"` // 1-based
	LastCycle  int           `json:"last_cycle"`
	CycleNs    int64         `json:"cycle_ns"` // sum of cycle wall spans (first to last call)
	GPU        bool          `json:"gpu"`      // GPU columns are known (CUPTI records joined)
	Phases     []*PhaseStats `json:"phases"`
	// Untraced cycles of the window have no GPU figures: they lie outside
	// the GPU tracing windows (duty-cycled tracing), began before the
	// CUPTI connection (ThreadReport.GPUPartial), or lost a launch's API
	// record (ThreadReport.GPULost). GPU figures are per traced cycle.
	Untraced int `json:"cycles_outside_gpu_windows,omitempty"`
}

// Cycles is the number of cycles in the window.
func (w *Window) Cycles() int { return w.LastCycle - w.FirstCycle + 1 }

// ThreadReport is the whole-run aggregate of one thread.
type ThreadReport struct {
	// TID is the thread's id on the host (in the agent's pid namespace), as
	// in the events, the traces and the profiles; NSTID is its id in the
	// process's own pid namespace (a container's), what the process's logs
	// and tools inside the container show, when that differs (0 otherwise).
	TID      int           `json:"tid"`
	NSTID    int           `json:"tid_in_namespace,omitempty"`
	Cycles   int           `json:"cycles"`
	CycleNs  int64         `json:"cycle_ns"`
	GPU      bool          `json:"gpu"`     // GPU fields are filled
	Phases   []*PhaseStats `json:"phases"`  // inside cycles
	Outside  []*PhaseStats `json:"outside"` // calls made outside any cycle
	Calls    int64         `json:"calls"`
	Resolved int64         `json:"resolved_in_user_space"` // events whose phase user space resolved (warm-up, call-tree windows)
	// Untraced counts cycles outside the GPU tracing windows (duty-cycled
	// tracing): they have CPU figures only.
	Untraced int `json:"cycles_outside_gpu_windows,omitempty"`
	// GPUPartial counts cycles that made launches before the process's
	// CUPTI library connection was known (some of them after it too):
	// their GPU figures would be incomplete and are left out.
	GPUPartial int `json:"cycles_gpu_partial,omitempty"`
	// GPULost counts cycles with a launch whose CUPTI API record never came
	// (Loss.LaunchesWithoutAPI): the GPU work of that launch is unknown, so
	// the cycle's GPU figures are left out rather than understated.
	GPULost int `json:"cycles_gpu_incomplete,omitempty"`
	// ProbeCut counts cycles left out because a probe window's edge cut
	// them (Report.ProbeWindows): begun before the probes went in, or
	// still open when they were removed. Not in Cycles.
	ProbeCut int `json:"cycles_cut_by_probe_windows,omitempty"`
	// LossCut counts cycles left out because call records went missing
	// while they were open (Loss.RingBuf: the ring buffer was full, e.g.
	// while the agent learnt the code objects), or a call's frame walk
	// failed before it found the cycle (Loss.ReadErrors, Truncated,
	// Stale); not in Cycles.
	LossCut int `json:"cycles_with_lost_records,omitempty"`
	// LostWhole counts cycles none of whose records reached user space (a
	// full ring buffer; Loss.CyclesLostWhole); not in Cycles.
	LostWhole int `json:"cycles_lost_whole,omitempty"`
}

// ProcessReport describes one traced process.
type ProcessReport struct {
	// PID is the host's id of the process (the agent's pid namespace), as
	// in the events, traces and profiles; NSPID the id it has in its own
	// pid namespace (inside a container, often 1), when that differs.
	PID       int             `json:"pid"`
	NSPID     int             `json:"pid_in_namespace,omitempty"`
	Cmdline   string          `json:"cmdline"`
	Python    string          `json:"python,omitempty"`
	Libraries []string        `json:"libraries"`
	Threads   []*ThreadReport `json:"threads"`
	Problems  []string        `json:"problems,omitempty"`
	Start     time.Time       `json:"start"`
	ExitCode  *int            `json:"exit_code,omitempty"`
	GPU       *GPUStats       `json:"gpu,omitempty"` // from the injected CUPTI library
	// Duty describes duty-cycled GPU tracing, when it was on.
	Duty *DutyStats `json:"gpu_duty,omitempty"`
	// Version compares the server version installed for this process
	// with the versions the preset was checked against, when the preset
	// names them (checked_against) and the process ran Python code.
	Version *VersionCheck `json:"server_version,omitempty"`
	// Attribution says how many of the process's launches, and how much
	// of their GPU kernel time, the phase rules left in phase "other" or
	// outside every cycle, and from which Python frames.
	Attribution *Attribution `json:"attribution,omitempty"`
}

// Loss counts everything that was dropped or could not be attributed.
type Loss struct {
	RingBuf       uint64 `json:"ringbuf_full"`
	Scratch       uint64 `json:"bpf_scratch"`
	OpenAt        uint64 `json:"openat_map_full"`
	DecodeErrors  uint64 `json:"decode_errors"`
	NoPython      uint64 `json:"events_without_python"` // interpreter not (yet) known
	NoThreadState uint64 `json:"events_without_thread_state"`
	ReadErrors    uint64 `json:"frame_read_errors"`
	Truncated     uint64 `json:"stacks_truncated"`
	Stale         uint64 `json:"stale_code_objects"` // a classified code object's address reused
	SymbolErrors  uint64 `json:"symbolize_errors"`
	// ExitedUnread counts code objects seen first in a process's last
	// events that could not be read because the process had exited by
	// then: those calls match no phase.
	ExitedUnread  uint64 `json:"code_objects_unread_after_exit"`
	UnmatchedExit uint64 `json:"sync_exits_without_entry"`
	SamplesLost   uint64 `json:"cpu_samples_ringbuf_full"` // CPU samples dropped (ring buffer full)
	// LibOpenLost counts library-open records lost to a full ring buffer:
	// the process was not stopped, and its probes went in late, when the
	// agent found the library in its maps.
	LibOpenLost uint64 `json:"library_opens_ringbuf_full"`
	// ProcessesFoundLate counts processes whose fork record was lost and
	// that the agent found among the kernel side's tracked processes.
	ProcessesFoundLate uint64 `json:"processes_found_after_lost_fork"`
	// GateLate counts processes the gate watchdog resumed before the agent
	// had their probes in place (the agent stalled or was too slow).
	GateLate uint64 `json:"gate_released_by_watchdog"`
	// CyclesLostWhole counts cycles none of whose records reached user
	// space (a full ring buffer), from the per-thread cycle count BPF keeps
	// (bpf.Py.CycleNo).
	CyclesLostWhole uint64 `json:"cycles_lost_whole"`
	// LateWaitsTooLate counts late waits (phase.Cycle.LatePhases) whose
	// cycle had been folded into the figures before the wait began or
	// ended: a cycle is held until its thread has closed four cycles
	// after it. Their wait time is in no cycle.
	LateWaitsTooLate uint64 `json:"late_waits_too_late"`
	// SampleTornFrames counts frames of CPU samples that were not code
	// objects: the sample stopped the interpreter while it pushed a frame.
	SampleTornFrames uint64 `json:"cpu_sample_torn_frames"`
	// Joining launches with CUPTI records (see correlate.Stats).
	LaunchesWithoutAPI uint64 `json:"launches_without_cupti_api_record"`
	// LaunchesUntraced are launches made outside the duty-cycled tracing
	// windows (--cupti-duty), when the library records no API records: not
	// a loss, counted so that every launch is accounted for.
	LaunchesUntraced uint64 `json:"launches_outside_gpu_windows,omitempty"`
	// LaunchesStraddled are launches made just before a window closed that
	// got no record because their call may have returned after the
	// window's API records went off (the thread's next launch came after
	// the close), most likely because their thread was preempted between
	// the launch probe and CUPTI's entry callback. Not counted as lost;
	// their cycles still lose their GPU figures.
	LaunchesStraddled uint64 `json:"launches_across_gpu_window_close,omitempty"`
	GPUUnhooked       uint64 `json:"gpu_records_of_unhooked_calls"`
	GPUWithoutAPI     uint64 `json:"gpu_records_without_api_record"`
	GPULate           uint64 `json:"gpu_records_late"`
	GPUDuplicates     uint64 `json:"gpu_records_duplicated"`
	GPUPending        uint64 `json:"gpu_records_pending"`
	// GPUStreamInversions counts GPU records that came after a later record
	// of their stream: their hand-over gap is left out of GPU active time.
	GPUStreamInversions uint64 `json:"gpu_records_out_of_stream_order"`
	// APIDuplicates counts CUPTI API records whose correlation id an earlier
	// record of the process already had: ignored, as the GPU work carrying
	// that id cannot be told apart. CUPTI 13.0 gives every later call one id
	// after its API kinds have been switched by duty windows
	// (docs/overhead.md, known hazards).
	APIDuplicates uint64 `json:"api_records_duplicated"`
}

// Report is the result of a session.
type Report struct {
	Preset    string           `json:"preset"`
	Phases    []string         `json:"phase_order"`
	Start     time.Time        `json:"start"`
	End       time.Time        `json:"end"`
	Processes []*ProcessReport `json:"processes"`
	Loss      Loss             `json:"loss"`
	Events    int64            `json:"events"`
	CPU       SamplerStats     `json:"cpu_sampler,omitzero"`   // the CPU sampler (zero when it was off)
	Spec      *SpecMetrics     `json:"spec_metrics,omitempty"` // the server's own numbers, when a source was given
	// Ranks compares the collectives of the tensor-parallel ranks traced
	// (two or more processes with a TP rank): who arrived last, how late.
	Ranks []*RankStats `json:"ranks,omitempty"`
	// ProbeWindows describes the probe windows (--probe-duty, or chosen by
	// --mode auto), when there were any.
	ProbeWindows *ProbeWindowStats `json:"probe_windows,omitempty"`
	// Tracing is the tracing mode and what it chose.
	Tracing *Tracing `json:"tracing,omitempty"`
	// GPUReceiver accounts for the connections to the CUPTI socket, when
	// GPU records were on (filled in by the session, which owns it).
	GPUReceiver *ReceiverStats `json:"gpu_receiver,omitempty"`
	// Exports lists what each exporter lost on the way out (filled in by
	// the session once its exporters have finished).
	Exports []*ExportStats `json:"exports,omitempty"`
}

// SpecMetrics are the server's speculative-decoding figures over the
// session (from its log lines or its Prometheus endpoint). Absent values
// are nil.
type SpecMetrics struct {
	Source    string   `json:"source"`
	Samples   int      `json:"samples"`
	AcceptLen *float64 `json:"accept_len_mean,omitempty"`
	TokPerSec *float64 `json:"gen_tok_per_s_mean,omitempty"`
	// LogLinesDropped and LogBytesDropped count the target's output lines
	// (source log) that specprof did not read for these figures: its copy
	// of the output is dropped rather than holding the target back when
	// specprof falls behind or is stopped. The output itself still reaches
	// the terminal whole.
	LogLinesDropped uint64 `json:"log_lines_dropped,omitempty"`
	LogBytesDropped uint64 `json:"log_bytes_dropped,omitempty"`
}

func (s *PhaseStats) AddGPU(o *PhaseStats) {
	s.GPUCycles += o.GPUCycles
	s.GPUKernels += o.GPUKernels
	s.GPUBusyNs += o.GPUBusyNs
	s.GPUSpanNs += o.GPUSpanNs
	s.GPUKernelNs += o.GPUKernelNs
	s.GPUGraphs += o.GPUGraphs
	s.GPUGraphNs += o.GPUGraphNs
	s.GPUMemcpys += o.GPUMemcpys
	s.GPUMemcpyBytes += o.GPUMemcpyBytes
	s.GPUMemcpyNs += o.GPUMemcpyNs
	s.GPUMemsets += o.GPUMemsets
	s.GPUMemsetBytes += o.GPUMemsetBytes
	s.GPUActiveNs += o.GPUActiveNs
	s.GPUElapsedNs += o.GPUElapsedNs
	s.GPUHostGapNs += o.GPUHostGapNs
	if o.GPUFirst != 0 && (s.GPUFirst == 0 || o.GPUFirst < s.GPUFirst) {
		s.GPUFirst = o.GPUFirst
	}
	s.GPULast = max(s.GPULast, o.GPULast)
}

// CallTreeFile is the name of the call tree of unattributed launches in a
// session's output directory (agent/calltree), which `specprof rules
// suggest` reads.
const CallTreeFile = "calltree.json"

// AutoProbes is what `--mode auto` chose for the launch probes: always in
// place, or in windows because some process's calls would make them cost
// more than the budget.
type AutoProbes struct {
	// Budget is the share of a process's time the probes may cost.
	Budget float64 `json:"budget"`
	// InWindows: the probes went into windows of Window (ON/PERIOD).
	InWindows bool   `json:"in_windows"`
	Window    string `json:"window,omitempty"`
	// Worst is the process whose probes would cost the most, as measured.
	Worst AutoProbeProcess `json:"worst"`
	// Why says it in words.
	Why string `json:"why"`
}

// AutoProbeProcess is one process's measured rate of hooked calls while
// it ran decode cycles, and the share of its time the probes would cost
// it if always in place.
type AutoProbeProcess struct {
	PID         int     `json:"pid"`
	CallsPerSec float64 `json:"calls_per_s"`
	ProbeCost   float64 `json:"probe_cost"`
}

// Tracing says how the session chose to trace.
type Tracing struct {
	// Mode is the tracing mode (auto, cpu, sampled, snapshot, full, custom)
	// and Plan what it records, in words.
	Mode string `json:"mode"`
	Plan string `json:"plan"`
	// AutoProbes is auto's choice for the launch probes.
	AutoProbes *AutoProbes `json:"auto_probes,omitempty"`
}
