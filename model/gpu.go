package model

// RecordsPerSecond is the delivery rate over the span of the GPU records.
func (g *GPUStats) RecordsPerSecond() float64 {
	if g.LastNs <= g.FirstNs {
		return 0
	}
	n := g.Kernels + g.Memcpys + g.Memsets + g.APIs + g.Syncs + g.GraphNodes + g.Overheads
	return float64(n) / (float64(g.LastNs-g.FirstNs) / 1e9)
}

// KernelRecord is one GPU kernel as handed to Options.OnKernel.
type KernelRecord struct {
	PID           int
	Name          string
	Start, End    uint64
	Stream        uint32
	Device        uint32
	CorrelationID uint32
	GraphID       uint32
	GraphNodeID   uint64
}

// APIRecord is one driver-API record from CUPTI (the CPU side of a call,
// with the correlation id its GPU work carries), as handed to Options.OnAPI.
type APIRecord struct {
	PID, TID      int
	Cbid          uint32
	Start, End    uint64
	CorrelationID uint32
}

// ReceiverStats accounts for every connection made to the session's CUPTI
// socket: those accepted, those rejected by reason (cupti.Config says what
// each check is), and what the accepted ones sent that could not be decoded.
type ReceiverStats struct {
	Accepted uint64 `json:"connections_accepted"`
	Rejected uint64 `json:"connections_rejected"`
	// Rejections by reason: the peer is no process this session traces;
	// its HELLO claimed another pid than its own; a connection limit was
	// reached; no complete HELLO came in time; the first record was no
	// valid HELLO; the peer's credentials or pid could not be read.
	NotTraced   uint64 `json:"rejected_not_traced"`
	PidMismatch uint64 `json:"rejected_pid_mismatch"`
	OverLimit   uint64 `json:"rejected_over_limit"`
	NoHello     uint64 `json:"rejected_no_hello_in_time"`
	BadHello    uint64 `json:"rejected_bad_hello"`
	PeerUnknown uint64 `json:"rejected_peer_unknown"`
	// PeakOpen is the most connections held at once (accepted, or being
	// checked).
	PeakOpen int `json:"connections_peak"`
	// Malformed counts the records of accepted connections that could not
	// be decoded, by class (cupti.DecodeErrors): an unframeable length
	// (which ends its connection), an unknown type, a payload too short, a
	// partial record at the end, a bad NAME, a second HELLO.
	Malformed   uint64 `json:"malformed_records"`
	BadLength   uint64 `json:"malformed_bad_length"`
	UnknownType uint64 `json:"malformed_unknown_type"`
	Short       uint64 `json:"malformed_short"`
	Truncated   uint64 `json:"malformed_truncated"`
	BadName     uint64 `json:"malformed_bad_name"`
	ExtraHello  uint64 `json:"malformed_extra_hello"`
	// NamesNotKept counts kernel names beyond the receiver's table
	// (cupti.MaxNames, cupti.MaxNameBytes): those kernels go unnamed.
	NamesNotKept uint64 `json:"kernel_names_not_kept"`
	// TidsUnmapped counts thread ids in the API and graph node records of
	// processes in their own pid namespace (containers) that could not be
	// translated to host ids, because the thread had exited first
	// (cupti.ConnStats.TidsUnmapped): those records join no launch.
	TidsUnmapped uint64 `json:"tids_unmapped,omitempty"`
}

// ExportStats accounts for what one exporter (otlp, perfetto, pprof) was
// given and did not deliver, in its own unit (spans, events, samples).
type ExportStats struct {
	Exporter string `json:"exporter"`
	Unit     string `json:"unit"`
	// Dropped were never sent or written (a queue or a cap was full),
	// Failed were in exports the endpoint refused or that failed, Unsent
	// were still queued when the session ended. Detail says the same in
	// words, with the first error.
	Dropped uint64 `json:"dropped"`
	Failed  uint64 `json:"failed,omitempty"`
	Unsent  uint64 `json:"unsent,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// OwnLine: the exporter prints its own account on the terminal (OTLP's
	// "otlp: N of M spans exported" line), which the summary does not
	// repeat.
	OwnLine bool `json:"-"`
}

// GPUStats counts what the injected CUPTI library delivered for one process.
type GPUStats struct {
	Connections int    `json:"connections"`
	CUPTI       uint32 `json:"cupti_version"`
	Kernels     int64  `json:"kernels"`
	GraphKernel int64  `json:"graph_kernels"`
	KernelNs    int64  `json:"kernel_ns"` // sum of kernel durations (streams overlap: not busy time)
	Memcpys     int64  `json:"memcpys"`
	MemcpyBytes int64  `json:"memcpy_bytes"`
	Memsets     int64  `json:"memsets"`
	APIs        int64  `json:"api_records"`
	Syncs       int64  `json:"syncs"`
	GraphNodes  int64  `json:"graph_nodes"`
	Overheads   int64  `json:"overhead_records"`
	FirstNs     uint64 `json:"first_ns"` // CLOCK_MONOTONIC of the earliest GPU record
	LastNs      uint64 `json:"last_ns"`
	// Counters reported by the library itself (its latest STATS record),
	// cumulative over the process's connections. Nil (null in JSON) when
	// they are unknown: no STATS came, or the process's last connection
	// ended without the library's final counters (FinalStats false), so
	// that the last ones it sent would understate what was lost after them.
	Delivered           *uint64 `json:"lib_records_delivered"`
	DroppedCUPTI        *uint64 `json:"lib_dropped_by_cupti"`
	DroppedNoAgent      *uint64 `json:"lib_dropped_no_agent"`
	DroppedBackpressure *uint64 `json:"lib_dropped_backpressure"`
	DroppedDisconnect   *uint64 `json:"lib_dropped_disconnect"`
	// BuffersRefused counts CUPTI's requests for an activity buffer that
	// the library answered with none (its pool exhausted, an allocation
	// failed, or no agent connected): CUPTI drops the records it then
	// cannot store, counted in DroppedCUPTI.
	BuffersRefused *uint64 `json:"lib_buffers_refused"`
	// DroppedGraphNodes counts graph-node events beyond the library's
	// table, NamesDropped kernels sent without a name (its name table full).
	DroppedGraphNodes *uint64 `json:"lib_dropped_graph_nodes"`
	NamesDropped      *uint64 `json:"lib_kernel_names_dropped"`
	// FinalStats is true when the counters above are final: the process's
	// last connection carried the library's final STATS record (sent at
	// the process's exit) or answered the session's last flush. False at
	// the end of a session means the process was killed or its connection
	// cut: the counters are unknown (nil) and a problem line says so.
	FinalStats bool `json:"lib_final_stats"`
	// DecodeErrors counts malformed records on this process's connections
	// (cupti.DecodeErrors.Total), NameTableFull the kernel names the
	// receiver did not keep (its table full).
	DecodeErrors  uint64 `json:"malformed_records,omitempty"`
	NameTableFull uint64 `json:"kernel_names_not_kept,omitempty"`
	// CUPTI detached once nothing more was to be traced (--cupti-detach; final): 0 or 1,
	// and the time the application thread that ran the detach waited.
	Detaches      uint64 `json:"lib_cupti_detaches,omitempty"`
	DetachStallNs uint64 `json:"lib_detach_stall_ns,omitempty"`
	// DetachRefused is 1 when a detach was due but the process had built
	// CUDA graphs under CUPTI, whose launches fail after cuptiFinalize: it
	// was not finalized. DetachQuiet says what was done instead: 1 every
	// CUPTI callback turned off, 2 and unsubscribed
	// (SPECPROF_CUPTI_GRAPH_DETACH=unsubscribe); 0 CUPTI stayed attached as
	// it was.
	DetachRefused uint64 `json:"lib_cupti_detach_refused,omitempty"`
	DetachQuiet   uint64 `json:"lib_cupti_detach_quiet,omitempty"`
	// GPUSwitches counts the switches of CUPTI's GPU activity kinds (on at
	// a connection or a window, off after it), each made by an application
	// thread in a CUDA call's exit callback, and the time those threads
	// spent in them: in all and the longest.
	GPUSwitches    uint64 `json:"lib_gpu_switches,omitempty"`
	GPUSwitchNs    uint64 `json:"lib_gpu_switch_ns,omitempty"`
	GPUSwitchMaxNs uint64 `json:"lib_gpu_switch_max_ns,omitempty"`
	// DutyStopped is 1 when duty-cycled windows stopped opening because the
	// process had built CUDA graphs (only with SPECPROF_CUPTI_DUTY_GRAPHS=0,
	// the guard kept from before switches waited for the GPU).
	DutyStopped uint64 `json:"lib_duty_stopped_graphs,omitempty"`
}
