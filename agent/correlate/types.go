package correlate

import (
	"errors"
	"fmt"
	"time"
)

// Kind says what a GPU record is.
type Kind uint8

const (
	// Kernel is a kernel execution: it counts toward busy time and span.
	Kernel Kind = iota
	// Memcpy is a memory copy.
	Memcpy
	// Memset is a memory set.
	Memset
	// Graph is one execution of a CUDA graph as a whole (graph-level
	// tracing): its kernels have no records of their own, so its interval
	// counts toward busy time and span in their place.
	Graph
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Kernel:
		return "kernel"
	case Memcpy:
		return "memcpy"
	case Memset:
		return "memset"
	case Graph:
		return "graph"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// GPURecord is one GPU activity record from CUPTI. Times are CLOCK_MONOTONIC
// ns. The Joiner copies what it keeps, so the caller may reuse the record.
type GPURecord struct {
	Start, End uint64
	Bytes      uint64 // copies and sets
	PID        int
	Corr       uint32 // correlation id of the launching API call (per process)
	Stream     uint32
	Device     uint32
	Name       uint32 // the caller's interned kernel name id (per-name totals)
	GraphID    uint32
	// GraphNode is the executed graph node (graph replays; 0 otherwise).
	GraphNode uint64
	Kind      Kind
	// APIStart is set by the Joiner on the records it joins (aggregated and
	// handed to OnJoin): the start of the API record (the launching call).
	APIStart uint64
	// Launch is set by the Joiner on the records it joins, like APIStart:
	// the ktime of the launch (Joiner.Launch) whose key they joined, which
	// tells the launch apart from the thread's others (its Python site).
	Launch uint64
	// PrevEnd is the latest end of the work that ran before this record on
	// its stream (StreamOrder.Annotate; 0 when unknown). A record launched
	// before PrevEnd waited in the stream's queue: the gap from PrevEnd to
	// its start is the GPU's own hand-over between queued work, which CUDA
	// events around the work count (KeyStats.ActiveNs).
	PrevEnd uint64
}

// APIRecord is one driver-API record from CUPTI: the CPU side of a call and
// the correlation id its GPU work carries.
type APIRecord struct {
	Start, End uint64
	PID, TID   int
	Corr       uint32
	Cbid       uint32 // informational: the Joiner does not look at it
}

// Key is a ready-made attribution key: one phase of one cycle on one thread.
// Any comparable type works as a Joiner's key; this one is small and cheap
// to hash.
type Key struct {
	Thread int
	Cycle  int
	Phase  uint16
}

// Reason says why a GPU record was not joined to a live key.
type Reason uint8

const (
	// NoLaunch: its API record had no launch, i.e. a driver call specprof
	// does not hook (cuMemcpyHtoD, ...), or its launch event was lost.
	NoLaunch Reason = iota + 1
	// NoAPI: its API record never came within the horizon (CUPTI lost it).
	NoAPI
	// Late: its key had already been finalized, so its stats went out
	// without it.
	Late
)

// String names the reason.
func (r Reason) String() string {
	switch r {
	case NoLaunch:
		return "no-launch"
	case NoAPI:
		return "no-api"
	case Late:
		return "late"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// ErrOptions is wrapped by every error New returns for invalid Options.
var ErrOptions = errors.New("correlate: invalid options")

// Default values of Options fields left zero.
const (
	DefaultHorizon     = 2 * time.Second
	DefaultCPUHorizon  = 10 * time.Millisecond
	DefaultMaxLaunches = 1 << 17
	DefaultMaxAPIs     = 1 << 17
	DefaultMaxGPU      = 1 << 18
	DefaultMaxCorrs    = 1 << 19
	DefaultMaxKeys     = 1 << 14
	DefaultMaxDedup    = 1 << 20
)

// Options configures a Joiner. Zero fields take the defaults above. Caps
// apply per process.
type Options[K comparable] struct {
	// Horizon is how far the GPU watermark must pass an item before it is
	// decided: a launch without API record is unmatched at ktime+Horizon, a
	// GPU record without API record is orphaned at max(start, watermark on
	// arrival)+Horizon, a key is finalized at max(last launch, last joined
	// GPU end)+Horizon, and what was decided is forgotten a Horizon later.
	// It must cover CUPTI's delivery lag plus how long the GPU queue may run
	// behind the CPU (a kernel's end after its launch).
	Horizon time.Duration
	// CPUHorizon is how far the CPU watermark must pass an API record's end
	// before it is declared launch-less (an unhooked call). It covers the
	// reordering of the eBPF ring buffer. Negative means none (the CPU
	// watermark is exact).
	CPUHorizon time.Duration
	// Slack widens each API record to [start-Slack, end] when matching: the
	// uprobe fires at the function's first instruction, possibly a little
	// before CUPTI stamps the call's start (to be measured on real CUDA).
	// A record containing the launch wins over one only within Slack of it
	// when both are known; keep Slack below the shortest gap between two
	// driver calls of one thread, or the result depends on arrival order.
	// Zero matches exactly.
	Slack time.Duration

	// InOrder says that each thread's API records arrive in the order the
	// calls returned (CUPTI writes them at exit, so a thread's records come
	// in order unless some are lost). A record that contains no launch then
	// takes the thread's latest pending launch made after the previous
	// record ended: the uprobe fired, and the thread was preempted for more
	// than Slack before CUPTI stamped the call's start. Without InOrder such
	// a launch stays unmatched (counted).
	InOrder bool

	// Untraced, when set, says whether a launch of pid at ktime t was made
	// while the CUPTI library recorded no API records (duty-cycled tracing,
	// outside a window): such a launch, left without an API record, is
	// counted UntracedLaunches instead of UnmatchedLaunches, and it takes no
	// API record (those of the next window are not its). A pure predicate,
	// called under the Joiner's caller's lock, possibly more than once per
	// launch.
	Untraced func(pid int, t uint64) bool
	// Straddled, when set, says whether a launch of pid at ktime t, made
	// inside a duty window, may still have been in its call when the
	// window's API records went off: next is the thread's next launch (its
	// call had returned by then), 0 if none came. A thread preempted
	// between the launch's uprobe and CUPTI's entry callback for longer
	// than the library's grace at a window's close returns with no record
	// made; such a launch is counted StraddledLaunches, not lost. Called
	// like Untraced.
	Straddled func(pid int, t, next uint64) bool
	// OnUnmatched, when set, is called for each launch counted
	// UnmatchedLaunches (its record was lost), under the same lock.
	OnUnmatched func(pid int, t uint64)

	MaxLaunches int // pending launches (deque entries)
	MaxAPIs     int // API records waiting on the CPU watermark
	MaxGPU      int // GPU records buffered while their API record is missing or undecided
	MaxCorrs    int // correlation ids remembered, joined ones included
	MaxKeys     int // keys held, open or finalized (kept a Horizon to catch late records)
	MaxDedup    int // GPU records remembered for duplicate detection

	// PerName keeps per-kernel-name totals in every KeyStats.
	PerName bool

	// OnJoin receives each GPU record joined to a live key. r is valid
	// only during the call.
	OnJoin func(key K, r *GPURecord)
	// OnFinal receives each key's final stats exactly once. s is valid only
	// during the call, except s.Names, which the callee then owns.
	OnFinal func(key K, s *KeyStats)
	// OnUnjoined receives each GPU record that could not be joined to a
	// live key (duplicates excluded). r is valid only during the call.
	OnUnjoined func(r *GPURecord, why Reason)
}

// NameTotal is the kernel count and summed duration of one kernel name.
type NameTotal struct {
	Count int
	Ns    uint64
}

// KeyStats is what one key's GPU work amounts to. Busy time and span count
// kernels and whole-graph executions only; copies and sets have their own
// counters.
type KeyStats struct {
	PID             int
	Launches        int // launches that carried the key, up to finalization
	MatchedLaunches int // of those, launches joined to an API record

	Kernels    int
	BusyNs     uint64 // length of the union of the kernels' [Start, End]
	FirstStart uint64 // earliest kernel start (0 when no kernel)
	LastEnd    uint64 // latest kernel end
	KernelNs   uint64 // sum of kernel durations (> BusyNs when streams overlap)
	// Graphs are whole-graph executions (graph-level tracing), GraphNs the
	// sum of their first-node-start to last-node-end intervals.
	Graphs  int
	GraphNs uint64

	Memcpys     int
	MemcpyBytes uint64
	MemcpyNs    uint64
	Memsets     int
	MemsetBytes uint64
	MemsetNs    uint64

	// ActiveNs is the length of the union of every record's (kernels,
	// graphs, copies, sets) [a, End], where a is PrevEnd when the record was
	// launched before PrevEnd (it waited in its stream's queue) and its
	// Start otherwise: busy time plus the GPU's hand-over gaps between
	// queued work, without the time a stream sat idle waiting for the CPU
	// to launch. [ActiveFirst, ActiveLast] spans those intervals
	// (ElapsedNs).
	ActiveNs    uint64
	ActiveFirst uint64
	ActiveLast  uint64

	// Names holds per-name totals when Options.PerName is set.
	Names map[uint32]NameTotal
	// Evicted is set when the key was finalized before its horizon because
	// Options.MaxKeys or MaxCorrs was reached.
	Evicted bool
}

// SpanNs is the time from the first kernel start to the last kernel end.
// ElapsedNs is the stream time from the first to the last of the key's
// work, gaps included: what CUDA events recorded on the stream around the
// work measure, less the launch latency of a first record that found its
// stream idle.
func (s *KeyStats) ElapsedNs() uint64 {
	if s.ActiveLast <= s.ActiveFirst {
		return 0
	}
	return s.ActiveLast - s.ActiveFirst
}

func (s *KeyStats) SpanNs() uint64 {
	if s.Kernels+s.Graphs == 0 || s.LastEnd < s.FirstStart {
		return 0
	}
	return s.LastEnd - s.FirstStart
}

// Stats counts what a Joiner saw. Every input lands in exactly one
// category, so at any time:
//
//	Launches   == MatchedLaunches + UnmatchedLaunches + UntracedLaunches + StraddledLaunches + PendingLaunches
//	APIs       == MatchedAPIs + APINoLaunch + DuplicateAPIs + PendingAPIs
//	GPURecords == Joined + GPUNoLaunch + GPUNoAPI + DuplicateGPU + Late + PendingGPU
//
// LateLaunches, SharedAPI and CapEvictions overlap those categories.
type Stats struct {
	Launches   uint64 // Launch calls
	APIs       uint64 // API calls
	GPURecords uint64 // GPU calls

	MatchedLaunches   uint64 // launches joined to an API record
	UnmatchedLaunches uint64 // launches whose API record never came (CUPTI lost it)
	UntracedLaunches  uint64 // launches without API record made while none were recorded (Options.Untraced)
	StraddledLaunches uint64 // launches without API record whose call may have run past a window's close (Options.Straddled)
	LateLaunches      uint64 // launches whose key was already finalized (their records count as Late)
	SharedAPI         uint64 // launches inside an API record another launch had already matched
	// PrefixSkipped counts API records whose slack before their start held
	// launches that were left to their own (lost) records, as a launch lay
	// inside the record or a later one closer before it.
	PrefixSkipped     uint64
	PreemptedLaunches uint64 // of MatchedLaunches, matched by the InOrder rule (before the record's start - Slack)

	MatchedAPIs   uint64 // API records with a launch
	APINoLaunch   uint64 // API records without launch: calls not hooked
	DuplicateAPIs uint64 // API records whose (pid, corr) had already been seen

	Joined       uint64 // GPU records joined to a live key
	GPUNoLaunch  uint64 // GPU records whose API record had no launch
	GPUNoAPI     uint64 // GPU records whose API record never came
	DuplicateGPU uint64 // GPU records seen before (same pid, corr, kind, start, end, stream)
	Late         uint64 // GPU records for an already finalized key

	KeysFinalized  uint64 // OnFinal calls
	CapEvictions   uint64 // items decided or forgotten early because a cap was reached
	DedupForgotten uint64 // duplicate-detection entries dropped early (MaxDedup)

	PendingLaunches uint64 // launches waiting for their API record
	PendingAPIs     uint64 // API records waiting for the CPU watermark
	PendingGPU      uint64 // GPU records waiting for their API record or its launch
	OpenKeys        uint64 // keys not finalized yet
}
