package model

import "strconv"

// The per-cycle timeline handed to exporters (Options.OnCycle): what one
// closed cycle of one thread looked like, CPU and GPU, on CLOCK_MONOTONIC.
// Exporters convert to wall time with Clock (clock.go).

// CycleTrace is one cycle (one call of the preset's cycle function) of one
// thread, delivered once its GPU side is final (or the session ended).
type CycleTrace struct {
	PID     int    `json:"pid"`
	TID     int    `json:"tid"`
	Rank    int    `json:"rank"`    // tensor-parallel rank from the process title, -1 when unknown
	Process string `json:"process"` // process title or command
	Cycle   int    `json:"cycle"`   // 1-based, per thread
	Start   uint64 `json:"start"`   // first call of the cycle (CLOCK_MONOTONIC ns)
	End     uint64 `json:"end"`     // last call or sync return of the cycle
	GPU     bool   `json:"gpu"`     // GPU records were joined (the CUPTI library is connected)
	// Devices are the GPUs the process has a context on (NVML; empty when
	// NVML is unavailable or Options.GPUs is nil).
	Devices []Device `json:"devices,omitempty"`
	// Phases in the order of their first call.
	Phases []*PhaseTrace `json:"phases"`
	// TP compares the cycle with the same cycle of the other
	// tensor-parallel ranks (ranks.go); nil when not compared.
	TP *CycleTP `json:"tp,omitempty"`
}

// PhaseTrace is one phase inside one cycle.
type PhaseTrace struct {
	Phase string      `json:"phase"`
	Start uint64      `json:"start"` // first call of the phase in the cycle
	End   uint64      `json:"end"`   // last call or sync return
	Stats *PhaseStats `json:"stats"` // this cycle's figures (Cycles == 1)
	// Func is the Python function that matched the phase rule (zero for
	// "other"); Cycle the preset's cycle function. Together with a site
	// they make the abridged Python stack of a launch: Cycle → Func → Site.
	Func  Frame `json:"func"`
	Cycle Frame `json:"cycle_func"`
	// GPU work joined to the phase's launches, in start order: kernels,
	// copies and sets. Only with Options.Detail.
	GPU []GPUActivity `json:"gpu,omitempty"`
	// Collective calls, in call order, with the GPU side where known.
	Collectives []Collective `json:"collectives,omitempty"`
	// Blocking calls (syncs, synchronous device-to-host copies).
	Syncs []SyncTrace `json:"syncs,omitempty"`
	// Sites of the phase's launches: the innermost Python frame that made
	// each kernel or graph launch, with the launch count (pprof stacks).
	Sites []SiteCount `json:"sites,omitempty"`
}

// GPUActivity is one GPU record joined to a phase.
type GPUActivity struct {
	Kind   string `json:"kind"` // kernel, memcpy, memset
	Name   string `json:"name,omitempty"`
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Device uint32 `json:"device"`
	Stream uint32 `json:"stream"`
	Corr   uint32 `json:"corr"`            // CUPTI correlation id (per process)
	Bytes  uint64 `json:"bytes,omitempty"` // copies and sets
	// Launch is when the launching driver call began on the CPU (the CUPTI
	// API record's start): the tail of a launch → kernel flow arrow.
	Launch  uint64 `json:"launch"`
	GraphID uint32 `json:"graph_id,omitempty"`
	// GraphNode is the executed graph node of a replayed kernel.
	GraphNode uint64 `json:"graph_node,omitempty"`
	// Site is the innermost Python frame of the launching call, when known.
	Site Frame `json:"site"`
}

// Collective is one NCCL call (or a custom all-reduce kernel recognised by
// name) with what is known of its GPU side. A collective replayed from a
// CUDA graph has the arguments and site of the call that was captured
// (Captured).
type Collective struct {
	Op       string `json:"op"`              // AllReduce, AllGather, ... (the NCCL call without "nccl")
	API      string `json:"api,omitempty"`   // the hooked call; empty for a kernel recognised by name
	Time     uint64 `json:"time"`            // the call's entry (or the kernel's launch)
	Count    uint64 `json:"count,omitempty"` // elements
	Dtype    string `json:"dtype,omitempty"`
	Reduce   string `json:"reduce,omitempty"` // sum, prod, max, min, avg
	Bytes    int64  `json:"bytes"`            // count × dtype size (0 when unknown)
	Comm     uint64 `json:"comm,omitempty"`
	Stream   uint64 `json:"stream,omitempty"`
	Peer     int    `json:"peer"` // root or peer rank, -1 when none
	Site     Frame  `json:"site"`
	Kernel   string `json:"kernel,omitempty"` // the GPU kernel that carried it
	GPUStart uint64 `json:"gpu_start,omitempty"`
	GPUEnd   uint64 `json:"gpu_end,omitempty"`
	// From the kernel name (NCCL's ncclDevKernel_<Op>_<Red>_<type>_<ALGO>_<PROTO>).
	Algorithm string `json:"algorithm,omitempty"`
	Protocol  string `json:"protocol,omitempty"`
	// Ranks in the communicator, 0 when unknown; bandwidths follow NCCL's
	// definitions (algbw = bytes / time; busbw = algbw × the op's factor).
	Ranks     int     `json:"ranks,omitempty"`
	AlgBWGBps float64 `json:"algbw_gbps,omitempty"`
	BusBWGBps float64 `json:"busbw_gbps,omitempty"`
	// Captured is set on a collective replayed from a CUDA graph whose
	// arguments come from the captured call (its Time is the replay's).
	Captured bool `json:"captured,omitempty"`
	// Arrival compares the collective across the tensor-parallel ranks,
	// nil when not compared.
	Arrival *Arrival `json:"arrival,omitempty"`
}

// GPUNs is the collective's GPU duration, 0 when its kernel is unknown.
func (c *Collective) GPUNs() int64 {
	if c.GPUEnd <= c.GPUStart {
		return 0
	}
	return int64(c.GPUEnd - c.GPUStart)
}

// SyncTrace is one blocking call.
type SyncTrace struct {
	API    string `json:"api"`
	Start  uint64 `json:"start"`
	WaitNs int64  `json:"wait_ns"` // time blocked; -1 when the return was not seen
	Site   Frame  `json:"site"`
	Bytes  int64  `json:"bytes,omitempty"` // synchronous copies
}

// SiteCount is a Python launch site with its launch count.
type SiteCount struct {
	Site     Frame `json:"site"`
	Launches int64 `json:"launches"`
	// GPU kernel ns joined to launches from this site (with Options.Detail).
	GPUNs int64 `json:"gpu_ns,omitempty"`
}

// Frame is a Python frame: qualified name, file and line (the line being
// executed where known, else the code object's first line).
type Frame struct {
	Func string `json:"func,omitempty"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// IsZero reports whether the frame is unknown.
func (f Frame) IsZero() bool { return f.Func == "" && f.File == "" }

// String formats the frame as "func (file:line)".
func (f Frame) String() string {
	if f.IsZero() {
		return ""
	}
	return f.Func + " (" + f.File + ":" + strconv.Itoa(f.Line) + ")"
}

// CPUSample is one CPU sample of a traced thread (the perf-event sampler),
// handed to Options.OnSample.
type CPUSample struct {
	PID, TID int
	Time     uint64  // CLOCK_MONOTONIC ns
	Phase    string  // the phase the thread was in ("other" outside any rule)
	Cycle    int     // the thread's cycle number, 0 outside cycles
	Stack    []Frame // Python frames, innermost first; empty when not in Python
	Native   string  // the native leaf (symbol or "[module+0xoff]"), when known
	Weight   int64   // ns of CPU this sample stands for (1e9 / frequency)
}

// Device is one GPU, as NVML names it.
type Device struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid"`
}
