package agent

import (
	"fmt"
	"path/filepath"
	"reflect"
	"time"

	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/agent/proc"
	"github.com/specprof/specprof/agent/python"
	"github.com/specprof/specprof/bpf"
)

// CPU samples (bpf.Sample, from the perf-event sampler): each one is
// attributed to its thread's phase (found by the BPF walk, or here for code
// objects BPF has not been told about yet) and cycle, counted into the
// phase statistics (PhaseStats.CPUSamples, CPUNs), and, with
// Options.OnSample, symbolized into a CPUSample.
//
// Which cycle a sample belongs to: the thread's open cycle when the sample
// is inside the same call of the cycle function; the next cycle when it is
// inside the cycle function but the thread has no open cycle yet (the CPU
// work before a cycle's first driver call, e.g. draft preparation), or a
// different call of it, or the cycle's start phase after other phases (the
// rules of advanceCycle). A sample outside the cycle function in one of
// the preset's continue phases belongs to the open cycle. Such samples are kept with the thread's calls
// outside cycles until that cycle closes, so none is lost when it never
// does. Samples outside the cycle function count outside cycles. Samples
// between a cycle's last call and the next cycle's first call that cannot be
// told apart by these rules stay in the earlier cycle.

// SamplerStats counts the CPU sampler's samples over the session.
type SamplerStats struct {
	Samples int64 `json:"samples"`
	CPUNs   int64 `json:"cpu_ns"` // CPU time they stand for
	Python  int64 `json:"in_python"`
	Kernel  int64 `json:"in_kernel"` // taken in a system call or fault (the native leaf is the call site)
	// Samples without a Python stack: threads without Python state (native
	// threads), processes whose interpreter is not known (yet), and walks
	// that failed or were cut short.
	NoThreadState int64 `json:"no_thread_state"`
	NoPython      int64 `json:"no_python"`
	ReadErrors    int64 `json:"frame_read_errors"`
	Truncated     int64 `json:"stacks_truncated"`
}

// procSamples is a process's sampler state.
type procSamples struct {
	lastDiscover time.Time // last attempt to learn the interpreter from a sample
	native       nativeSyms
}

// threadSamples holds a thread's samples that wait for their cycle to
// close, by cycle number.
type threadSamples map[int]*cycleSamples

// cycleSamples are the samples of one cycle, per phase.
type cycleSamples struct {
	in    map[uint16]*PhaseStats // taken while the cycle was open
	early map[uint16]*PhaseStats // taken before it opened (also counted outside cycles until it closes)
}

// discoverEvery bounds how often samples of a process whose interpreter is
// unknown retry discovering it (a process may exec Python later).
const discoverEvery = time.Second

// onSample counts one CPU sample, attributes it to its thread's phase and
// cycle, and hands it to Options.OnSample.
func (a *Agent) onSample(s *bpf.Sample) {
	st := &a.rep.CPU
	w := int64(s.PeriodNs)
	st.Samples++
	st.CPUNs += w
	if s.Kernel {
		st.Kernel++
	}
	p := a.proc(int(s.PID))
	if p.smp == nil {
		p.smp = &procSamples{}
	}
	if p.rt == nil && time.Since(p.smp.lastDiscover) >= discoverEvery {
		// The interpreter is learned when a CUDA library is opened, or at
		// the first call; a process that only computes is learned here.
		// A failure here (a process that is not Python yet) must not stop
		// those from trying: its error is not kept.
		p.smp.lastDiscover = time.Now()
		prev := p.pyErr
		if err := a.ensurePython(p); err != nil {
			p.pyErr = prev
		}
	}
	py := s.Py
	switch {
	case py.Flags&bpf.PyNoConfig != 0:
		st.NoPython++
	case py.Flags&bpf.PyNoTstate != 0:
		st.NoThreadState++
	}
	if py.Flags&bpf.PyReadErr != 0 {
		st.ReadErrors++
	}
	if py.Flags&bpf.PyTruncated != 0 {
		st.Truncated++
	}
	var (
		ph  uint16
		cyc uint64
		t   *thread
	)
	m := a.matcherOf(p)
	if py.Flags&bpf.PyWalked != 0 && py.Flags&bpf.PyNoTstate == 0 && len(py.Frames) > 0 {
		st.Python++
		// The sampler's losses are counted above, not with the calls'.
		ev := bpf.APIEvent{Header: s.Header, Py: py}
		ev.Py.Flags &^= bpf.PyReadErr | bpf.PyTruncated
		a.inSample = true
		ph, cyc = a.resolve(p, &ev)
		a.inSample = false
		t = p.thread(int(s.TID))
	}
	cycle := 0
	if t != nil {
		cycle = a.countSample(t, ph, cyc, w, m)
	}
	if a.opts.OnSample == nil {
		return
	}
	cs := &CPUSample{PID: int(s.PID), TID: int(s.TID), Time: s.Ktime, Phase: m.PhaseName(ph), Cycle: cycle, Weight: w}
	if t != nil {
		cs.Stack = a.sampleStack(p, &py)
	}
	if s.UserIP != 0 {
		cs.Native = p.smp.native.name(p, s.UserIP)
	}
	a.opts.OnSample(cs)
}

// countSample adds a sample of phase ph, inside the cycle function's frame
// cyc (0: outside it), to thread t and returns the cycle it belongs to (0
// outside cycles).
func (a *Agent) countSample(t *thread, ph uint16, cyc uint64, w int64, m *phase.Matcher) int {
	add := func(cycle int, early bool) {
		if t.smp == nil {
			t.smp = threadSamples{}
		}
		cs := t.smp[cycle]
		if cs == nil {
			cs = &cycleSamples{in: map[uint16]*PhaseStats{}, early: map[uint16]*PhaseStats{}}
			t.smp[cycle] = cs
		}
		dst := cs.in
		if early {
			dst = cs.early
		}
		s := dst[ph]
		if s == nil {
			s = &PhaseStats{Phase: m.PhaseName(ph)}
			dst[ph] = s
		}
		s.CPUSamples++
		s.CPUNs += w
	}
	outside := func() {
		pa := t.outside[ph]
		if pa == nil {
			pa = &phaseAcc{PhaseStats: PhaseStats{Phase: m.PhaseName(ph)}}
			t.outside[ph] = pa
		}
		pa.CPUSamples++
		pa.CPUNs += w
	}
	if cyc == 0 {
		if t.inCycle && m.ContinuesCycle(ph) {
			add(t.cycleNo, false)
			return t.cycleNo
		}
		outside()
		return 0
	}
	start := m.CycleStartPhase()
	if t.inCycle && cyc == t.cycleFrame && !t.leftFn && !(start != 0 && ph == start && t.sawAfter) {
		add(t.cycleNo, false)
		return t.cycleNo
	}
	if ph != start && m.CyclesAtStart() {
		outside() // setup before the call's first start phase
		return 0
	}
	add(t.cycleNo+1, true)
	outside()
	return t.cycleNo + 1
}

// foldSamples moves the samples of the cycle that is closing into its
// phase statistics: the open cycle's, and those taken before the cycle's
// first call (which move out of the outside-cycle counts).
func (a *Agent) foldSamples(t *thread, cc *closedCycle, m *phase.Matcher) {
	cs := t.smp[cc.no]
	for no := range t.smp {
		if no <= cc.no {
			delete(t.smp, no) // older ones: their cycle never opened; they stay outside
		}
	}
	if cs == nil {
		return
	}
	for ph, s := range cs.in {
		st := cc.phase(ph, m)
		st.CPUSamples += s.CPUSamples
		st.CPUNs += s.CPUNs
	}
	for ph, s := range cs.early {
		st := cc.phase(ph, m)
		st.CPUSamples += s.CPUSamples
		st.CPUNs += s.CPUNs
		if pa := t.outside[ph]; pa != nil {
			pa.CPUSamples -= s.CPUSamples
			pa.CPUNs -= s.CPUNs
			if reflect.DeepEqual(pa.PhaseStats, PhaseStats{Phase: pa.Phase}) {
				delete(t.outside, ph)
			}
		}
	}
}

// sampleStack symbolizes a sample's Python frames, innermost first; the
// innermost carries the line being executed, the others their function's
// first line.
func (a *Agent) sampleStack(p *process, py *bpf.Py) []Frame {
	if p.sym == nil {
		return nil
	}
	out := make([]Frame, len(py.Frames))
	for i, code := range py.Frames {
		c, err := p.sym.Code(code)
		if err != nil {
			out[i] = Frame{Func: fmt.Sprintf("[code object %#x]", code)}
			continue
		}
		out[i] = Frame{Func: c.Qualname, File: c.Filename, Line: c.FirstLine}
		if i == 0 && code == py.LeafCode {
			if l := p.sym.Line(c, py.LeafInstr); l > 0 {
				out[i].Line = l
			}
		}
	}
	return out
}

// nativeSyms names native instruction pointers of one process: the module
// that maps them and, when its ELF file has function symbols, the function.
type nativeSyms struct {
	rt     *python.Runtime // the interpreter the module list was read under (exec changes it)
	mods   []proc.Module
	read   time.Time
	tables map[string]*proc.SymTable // by Module.HostPath; nil entry: unreadable
}

// name returns "function" or "[module+0xoffset]" (offset: the link-time
// address) for ip, or "" when no module maps it.
func (n *nativeSyms) name(p *process, ip uint64) string {
	if n.rt != p.rt {
		*n = nativeSyms{rt: p.rt}
	}
	mod := n.find(ip)
	if mod == nil && time.Since(n.read) >= discoverEvery {
		n.read = time.Now()
		if mods, err := proc.Modules(p.pid); err == nil {
			n.mods = mods
		}
		mod = n.find(ip)
	}
	if mod == nil {
		return ""
	}
	vaddr := ip - mod.Base
	if n.tables == nil {
		n.tables = map[string]*proc.SymTable{}
	}
	tab, ok := n.tables[mod.HostPath]
	if !ok {
		tab, _ = proc.FuncSymbols(mod.HostPath)
		n.tables[mod.HostPath] = tab
	}
	if tab != nil {
		if fn, ok := tab.Lookup(vaddr); ok {
			return fn
		}
	}
	return fmt.Sprintf("[%s+%#x]", filepath.Base(mod.Path), vaddr)
}

func (n *nativeSyms) find(ip uint64) *proc.Module {
	for i := range n.mods {
		if n.mods[i].Contains(ip) {
			return &n.mods[i]
		}
	}
	return nil
}
