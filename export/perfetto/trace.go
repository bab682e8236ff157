package perfetto

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/specprof/specprof/model"
)

// FileName is the trace's name in a session's output directory.
const FileName = "trace.perfetto.json"

// DefaultMaxEvents bounds the events kept (about 150 bytes of memory each).
const DefaultMaxEvents = 500_000

// Options configure a Trace.
type Options struct {
	// MaxEvents bounds the slices and flow events kept; the cycles that do
	// not fit are counted (0: DefaultMaxEvents).
	MaxEvents int
	// Clock, when set, gives the wall-clock time of the trace's origin.
	Clock *model.Clock
}

// Sub-tracks of a CPU thread.
const (
	subThread = iota // the thread's cycles, phases and syncs
	subColl          // collective calls without a known kernel
)

// Slice levels: the order of slices that start and end together (parent
// first).
const (
	levelCycle = iota
	levelPhase
	levelSync
)

const (
	levelColl = iota
	levelGPU
)

// slice is one complete event (ph X) before it is placed on a track
// (fields ordered for size: 120 bytes).
type slice struct {
	start, end uint64
	bytes      uint64 // GPU copies and sets
	name, cat  string
	args       []arg // arguments of non-GPU slices
	pid, tid   int32
	// On a GPU stream track (gpu): the device and stream.
	device, stream uint32
	corr, graph    uint32
	site           uint32 // GPU record's launch site: index in Trace.sites, 0 unknown
	lane           int16  // assigned at write time; -1: did not fit
	gpu            bool
	sub            uint8
	level          uint8
}

// flow is a launch → GPU work arrow: from ts on the launching phase's
// slice to the start of the GPU slice.
type flow struct {
	src, dst int // slice indexes
	ts       uint64
}

// arg is one argument of a slice: a string, an integer or a float.
type arg struct {
	key  string
	kind byte // 's', 'i', 'f'
	s    string
	i    int64
	f    float64
}

func sArg(k, v string) arg         { return arg{key: k, kind: 's', s: v} }
func iArg(k string, v int64) arg   { return arg{key: k, kind: 'i', i: v} }
func fArg(k string, v float64) arg { return arg{key: k, kind: 'f', f: v} }

// procInfo names a traced process and its threads.
type procInfo struct {
	title   string
	rank    int
	threads map[int]bool
}

// gpuKey is a GPU track's process: (traced process, device).
type gpuKey struct {
	pid    int
	device uint32
}

// Trace accumulates cycle timelines for one trace file. It is not safe for
// concurrent use.
type Trace struct {
	opts   Options
	slices []slice
	flows  []flow
	procs  map[int]*procInfo
	// Launch sites of GPU records, interned (index 0: unknown), bounded.
	sites   []model.Frame
	siteIdx map[model.Frame]uint32

	cycles        int64 // cycles kept
	droppedCycles int64
	droppedEvents int64
}

// New returns an empty Trace.
func New(opts Options) *Trace {
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	return &Trace{opts: opts, procs: map[int]*procInfo{}, sites: []model.Frame{{}}, siteIdx: map[model.Frame]uint32{}}
}

// events is the number of events kept (flows count two).
func (t *Trace) events() int { return len(t.slices) + 2*len(t.flows) }

// Dropped returns the cycles, and their events, that did not fit.
func (t *Trace) Dropped() (cycles, events int64) { return t.droppedCycles, t.droppedEvents }

// Cycles is the number of cycles kept.
func (t *Trace) Cycles() int64 { return t.cycles }

// AddCycle adds a closed cycle: its slices on its thread, its GPU work on
// the stream tracks, and the launch → GPU flows (GPU work needs
// agent.Options.Detail). A cycle that does not fit whole under MaxEvents
// is dropped and counted.
func (t *Trace) AddCycle(c *model.CycleTrace) {
	if n := cycleEvents(c); t.events()+n > t.opts.MaxEvents {
		t.droppedCycles++
		t.droppedEvents += int64(n)
		return
	}
	cpu := func(s slice) int {
		s.pid, s.tid = int32(c.PID), int32(c.TID)
		t.slices = append(t.slices, s)
		return len(t.slices) - 1
	}
	cargs := []arg{iArg("cycle", int64(c.Cycle)), iArg("rank", int64(c.Rank))}
	if tp := c.TP; tp != nil {
		cargs = append(cargs, iArg("straggler_rank", int64(tp.Straggler)), iArg("tp_wait_ns", tp.WaitNs),
			iArg("tp_spread_ns", tp.SpreadNs))
	}
	cpu(slice{level: levelCycle, name: "cycle " + strconv.Itoa(c.Cycle), cat: "cycle", start: c.Start, end: c.End,
		args: cargs})
	for _, ph := range c.Phases {
		pi := cpu(slice{level: levelPhase, name: ph.Phase, cat: "phase", start: ph.Start, end: max(ph.End, ph.Start),
			args: phaseArgs(ph)})
		for _, s := range ph.Syncs {
			end := s.Start
			args := []arg{sArg("site", s.Site.String())}
			if s.WaitNs >= 0 {
				end += uint64(s.WaitNs)
				args = append(args, iArg("wait_ns", s.WaitNs))
			} else {
				args = append(args, sArg("wait_ns", "unknown (return not seen)"))
			}
			if s.Bytes > 0 {
				args = append(args, iArg("bytes", s.Bytes))
			}
			cpu(slice{level: levelSync, name: s.API, cat: "sync", start: s.Start, end: end, args: args})
		}
		var onGPU map[[2]uint64]int // (kernel start, end) → slice, for collectives
		if len(ph.Collectives) > 0 {
			onGPU = map[[2]uint64]int{}
		}
		for i := range ph.GPU {
			g := &ph.GPU[i]
			name := g.Name
			switch {
			case g.Kind != "kernel":
				name = g.Kind
			case name == "":
				name = "[unnamed kernel]"
			}
			t.slices = append(t.slices, slice{pid: int32(c.PID), tid: int32(c.TID), gpu: true, device: g.Device, stream: g.Stream,
				level: levelGPU, name: name, cat: g.Kind, start: g.Start, end: max(g.End, g.Start),
				corr: g.Corr, graph: g.GraphID, bytes: g.Bytes, site: t.site(g.Site)})
			gi := len(t.slices) - 1
			if onGPU != nil && g.Kind == "kernel" {
				onGPU[[2]uint64{g.Start, g.End}] = gi
			}
			if g.Launch != 0 {
				t.flows = append(t.flows, flow{src: pi, dst: gi, ts: g.Launch})
			}
		}
		for _, co := range ph.Collectives {
			args := collArgs(&co)
			if gi, ok := onGPU[[2]uint64{co.GPUStart, co.GPUEnd}]; ok && co.GPUEnd > co.GPUStart {
				k := t.slices[gi]
				t.slices = append(t.slices, slice{pid: int32(c.PID), tid: int32(c.TID), gpu: true, device: k.device, stream: k.stream,
					level: levelColl, name: co.Op, cat: "collective", start: co.GPUStart, end: co.GPUEnd, args: args})
				continue
			}
			t.slices = append(t.slices, slice{pid: int32(c.PID), tid: int32(c.TID), sub: subColl, name: co.Op, cat: "collective",
				start: co.Time, end: co.Time, args: args})
		}
	}
	t.cycles++
	p := t.procs[c.PID]
	if p == nil {
		p = &procInfo{threads: map[int]bool{}}
		t.procs[c.PID] = p
	}
	p.title, p.rank = c.Process, c.Rank
	p.threads[c.TID] = true
}

// cycleEvents is the number of events AddCycle makes of c.
func cycleEvents(c *model.CycleTrace) int {
	n := 1
	for _, ph := range c.Phases {
		n += 1 + len(ph.Syncs) + len(ph.GPU) + len(ph.Collectives)
		for i := range ph.GPU {
			if ph.GPU[i].Launch != 0 {
				n += 2
			}
		}
	}
	return n
}

func phaseArgs(ph *model.PhaseTrace) []arg {
	var a []arg
	if !ph.Func.IsZero() {
		a = append(a, sArg("func", ph.Func.String()))
	}
	if st := ph.Stats; st != nil {
		a = append(a, iArg("launches", st.Launches), iArg("graph_launches", st.GraphLaunch), iArg("cpu_span_ns", st.CPUSpanNs))
		if st.Syncs > 0 {
			a = append(a, iArg("syncs", st.Syncs), iArg("sync_wait_ns", st.SyncWaitNs))
		}
		if st.GPUCycles > 0 {
			a = append(a, iArg("gpu_kernels", st.GPUKernels), iArg("gpu_busy_ns", st.GPUBusyNs), iArg("gpu_kernel_ns", st.GPUKernelNs),
				iArg("gpu_active_ns", st.GPUActiveNs), iArg("gpu_elapsed_ns", st.GPUElapsedNs), iArg("gpu_host_gap_ns", st.GPUHostGapNs))
		}
		if st.Colls > 0 {
			a = append(a, iArg("collectives", st.Colls), iArg("collective_bytes", st.CollBytes))
		}
	}
	return a
}

func collArgs(c *model.Collective) []arg {
	a := []arg{iArg("bytes", c.Bytes)}
	for _, kv := range [][2]string{{"api", c.API}, {"dtype", c.Dtype}, {"reduce", c.Reduce}, {"algorithm", c.Algorithm},
		{"protocol", c.Protocol}, {"kernel", c.Kernel}, {"site", c.Site.String()}} {
		if kv[1] != "" {
			a = append(a, sArg(kv[0], kv[1]))
		}
	}
	if c.Count > 0 {
		a = append(a, iArg("count", int64(c.Count)))
	}
	if c.Ranks > 0 {
		a = append(a, iArg("ranks", int64(c.Ranks)))
	}
	if c.Peer >= 0 {
		a = append(a, iArg("peer", int64(c.Peer)))
	}
	if c.GPUEnd > c.GPUStart {
		a = append(a, iArg("gpu_ns", c.GPUNs()), fArg("algbw_gbps", c.AlgBWGBps), fArg("busbw_gbps", c.BusBWGBps))
	}
	if c.Captured {
		a = append(a, iArg("captured", 1))
	}
	if ar := c.Arrival; ar != nil {
		a = append(a, iArg("last_rank", int64(ar.LastRank)), iArg("wait_ns", ar.WaitNs), iArg("spread_ns", ar.SpreadNs),
			sArg("arrival_clock", ar.Clock))
	}
	return a
}

// maxSites bounds the interned launch sites; beyond, sites are not kept.
const maxSites = 1 << 16

func (t *Trace) site(f model.Frame) uint32 {
	if f.IsZero() {
		return 0
	}
	if i, ok := t.siteIdx[f]; ok {
		return i
	}
	if len(t.sites) > maxSites {
		return 0
	}
	t.sites = append(t.sites, f)
	t.siteIdx[f] = uint32(len(t.sites) - 1)
	return uint32(len(t.sites) - 1)
}

// gpuArgs are a GPU slice's arguments.
func (t *Trace) gpuArgs(s *slice) []arg {
	a := []arg{iArg("corr", int64(s.corr))}
	if s.graph != 0 {
		a = append(a, iArg("graph_id", int64(s.graph)))
	}
	if s.bytes != 0 {
		a = append(a, iArg("bytes", int64(s.bytes)))
	}
	if s.site != 0 {
		a = append(a, sArg("site", t.sites[s.site].String()))
	}
	return a
}

// processName is a traced process's track name.
func (p *procInfo) name(pid int) string {
	title := strings.TrimSpace(p.title)
	if title == "" {
		return fmt.Sprintf("pid %d", pid)
	}
	if len(title) > 80 {
		title = title[:77] + "..."
	}
	return fmt.Sprintf("%s (pid %d)", title, pid)
}
