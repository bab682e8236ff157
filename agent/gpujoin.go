package agent

import (
	"sort"

	"github.com/specprof/specprof/agent/correlate"
	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/cupti"
)

// Joining eBPF launches with CUPTI records (design.md §6): the launch's
// (thread, cycle, phase) is the attribution key; the joiner finds the CUPTI
// API record of the same thread that contains the launch, and every GPU
// record carrying its correlation id lands on the key.

// outsideCycle is the key cycle of calls made outside any cycle after the
// thread's n-th cycle: negative, and new after each cycle, as the joiner
// wants keys that change over time.
func outsideCycle(n int) int { return -(n + 1) }

func (a *Agent) newJoiner() error {
	j, err := correlate.New(correlate.Options[correlate.Key]{
		Horizon: a.opts.GPUHorizon,
		Slack:   a.opts.LaunchSlack,
		// The library forwards CUPTI's buffers in order, and CUPTI writes a
		// thread's API records as its calls return.
		InOrder: true,
		// Duty-cycled tracing records no API records outside its windows:
		// launches made there are not lost records.
		Untraced:    a.untraced,
		Straddled:   a.straddled,
		OnUnmatched: a.noteLost, // where in their windows records were lost (debug)
		OnFinal:     a.onGPUFinal,
		OnJoin:      a.onGPUJoin,
	})
	if err != nil {
		return err
	}
	a.joiner = j
	return nil
}

// joinLaunch hands a call that makes GPU work to the joiner, when the
// process's CUPTI library is connected.
func (a *Agent) joinLaunch(p *process, t *thread, e *bpf.APIEvent, ph uint16) {
	// Copies and sets join as launches do: CUPTI's memcpy / memset records
	// carry their call's correlation id, as kernels carry theirs.
	if !e.API.IsLaunch() && !e.API.IsCopy() {
		return
	}
	if a.joiner == nil || !a.gpu.connected(p.pid) {
		// The library may already record this launch's work while its
		// connection is not known here yet: the cycle's GPU side would be
		// partial (closeCycle).
		t.unjoined = t.unjoined || t.inCycle
		return
	}
	k := correlate.Key{Thread: t.tid, Phase: ph}
	if t.inCycle {
		k.Cycle = t.cycleNo
		t.curKeys[ph] = true
	} else {
		k.Cycle = outsideCycle(t.cycleNo)
	}
	a.joiner.Launch(p.pid, t.tid, e.Ktime, k)
	a.joiner.AdvanceCPU(p.pid, e.Ktime)
}

// onGPUFinal receives the GPU totals of one (thread, cycle, phase).
func (a *Agent) onGPUFinal(k correlate.Key, ks *correlate.KeyStats) {
	p := a.procs[ks.PID]
	if p == nil {
		return
	}
	t := p.threads[k.Thread]
	if t == nil {
		return
	}
	m := a.matcherOf(p)
	g := &PhaseStats{GPUCycles: 1, GPUKernels: int64(ks.Kernels), GPUBusyNs: int64(ks.BusyNs), GPUSpanNs: int64(ks.SpanNs()),
		GPUKernelNs: int64(ks.KernelNs), GPUGraphs: int64(ks.Graphs), GPUGraphNs: int64(ks.GraphNs), GPUMemcpys: int64(ks.Memcpys), GPUMemcpyBytes: int64(ks.MemcpyBytes), GPUMemcpyNs: int64(ks.MemcpyNs),
		GPUMemsets: int64(ks.Memsets), GPUMemsetBytes: int64(ks.MemsetBytes),
		GPUActiveNs: int64(ks.ActiveNs), GPUElapsedNs: int64(ks.ElapsedNs()), gpuFirst: ks.ActiveFirst, gpuLast: ks.ActiveLast}
	switch {
	case k.Cycle <= 0:
		pa := t.outside[k.Phase]
		if pa == nil {
			pa = &phaseAcc{PhaseStats: PhaseStats{Phase: m.PhaseName(k.Phase)}}
			t.outside[k.Phase] = pa
		}
		pa.addGPU(g)
		t.gpu = true
	case t.inCycle && k.Cycle == t.cycleNo:
		t.earlyGPUWin.add(ks)
		t.earlyLost = t.earlyLost || ks.MatchedLaunches < ks.Launches
		// A long cycle: its phase finished on the GPU before the cycle closed.
		if prev := t.earlyGPU[k.Phase]; prev != nil {
			prev.addGPU(g)
		} else {
			t.earlyGPU[k.Phase] = g
		}
	default:
		cc := t.byCycle[k.Cycle]
		if cc == nil {
			return // already folded (forced at the end of the session)
		}
		cc.phase(k.Phase, m).addGPU(g)
		cc.gpuWin.add(ks)
		cc.lost = cc.lost || ks.MatchedLaunches < ks.Launches
		cc.gpuPending--
		a.drain(p, t, m, false)
	}
}

// connected reports whether pid's CUPTI library has connected.
func (h *GPUHandler) connected(pid int) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats[pid] != nil
}

// feedJoiner passes one CUPTI batch to the joiner (under the agent lock).
func (a *Agent) feedJoiner(c *cupti.Conn, b *cupti.Batch) {
	if a.joiner == nil {
		return
	}
	pid := int(c.Info().Pid)
	a.noteWindows(pid, b.Windows)
	defer a.drainClosed(pid, b.Windows)
	a.noteGraphNodes(pid, b.GraphNodes)
	if p := a.procs[pid]; p != nil {
		a.noteCollLaunches(p, b.APIs)
	}
	var wm uint64
	al := a.aliases(pid)
	for _, r := range outermost(b.APIs, al) {
		a.joiner.API(&correlate.APIRecord{Start: r.Start, End: r.End, PID: pid, TID: int(r.Tid), Corr: r.CorrelationID, Cbid: r.Cbid})
	}
	for i := range b.APIs {
		wm = max(wm, b.APIs[i].End)
	}
	names := a.kernelNames[pid]
	if names == nil && len(b.Kernels) > 0 {
		if a.kernelNames == nil {
			a.kernelNames = map[int]map[uint32]kernelName{}
		}
		names = map[uint32]kernelName{}
		a.kernelNames[pid] = names
	}
	recs := a.gpuBatch[:0]
	for i := range b.Kernels {
		k := &b.Kernels[i]
		if _, ok := names[k.NameID]; !ok {
			n := kernelDisplayName(c.Name(k.NameID))
			names[k.NameID] = kernelName{name: n, coll: isCollectiveKernel(n)}
		}
		recs = append(recs, correlate.GPURecord{Start: k.Start, End: k.End, PID: pid, Corr: al.of(k.CorrelationID), Stream: k.Stream,
			Device: k.Device, Name: k.NameID, GraphID: k.GraphID, GraphNode: k.GraphNodeID, Kind: correlate.Kernel})
	}
	for i := range b.GraphExecs {
		g := &b.GraphExecs[i]
		recs = append(recs, correlate.GPURecord{Start: g.Start, End: g.End, PID: pid, Corr: al.of(g.CorrelationID), Stream: g.Stream,
			Device: g.Device, GraphID: g.GraphID, Kind: correlate.Graph})
	}
	for i := range b.Memcpys {
		r := &b.Memcpys[i]
		recs = append(recs, correlate.GPURecord{Start: r.Start, End: r.End, Bytes: r.Bytes, PID: pid, Corr: al.of(r.CorrelationID),
			Stream: r.Stream, Device: r.Device, GraphID: r.GraphID, Kind: correlate.Memcpy})
	}
	for i := range b.Memsets {
		r := &b.Memsets[i]
		recs = append(recs, correlate.GPURecord{Start: r.Start, End: r.End, Bytes: r.Bytes, PID: pid, Corr: al.of(r.CorrelationID),
			Stream: r.Stream, Device: r.Device, GraphID: r.GraphID, Kind: correlate.Memset})
	}
	// Each record learns where its stream's previous work ended: the
	// hand-over gaps of queued work (KeyStats.ActiveNs).
	a.streams.Annotate(recs)
	for i := range recs {
		a.joiner.GPU(&recs[i])
		wm = max(wm, recs[i].End)
	}
	a.gpuBatch = recs[:0]
	if b.Final {
		a.streams.Forget(pid) // the library's last batch
	}
	if b.FlushAck || b.Final {
		// Everything that completed before the flush has been delivered.
		now := monotonicNow()
		a.log.Debug("flush answered", "pid", pid, "at", now, "final", b.Final, "records_wm", wm)
		wm = max(wm, now)
	}
	if wm > 0 {
		a.joiner.AdvanceGPU(pid, wm)
	}
}

// drainClosed folds the cycles of pid that waited for a window's close
// (see drain), once a batch has brought one, or word that the window is still
// open.
func (a *Agent) drainClosed(pid int, ws []cupti.Window) {
	closed := false
	for _, w := range ws {
		closed = closed || w.Close != 0 || w.OpenAsOf != 0
	}
	p := a.procs[pid]
	if !closed || p == nil {
		return
	}
	m := a.matcherOf(p)
	for _, t := range p.threads {
		a.drain(p, t, m, false)
	}
}

func (a *Agent) joinLoss() {
	if a.joiner == nil {
		return
	}
	s := a.joiner.Stats()
	l := &a.rep.Loss
	l.LaunchesWithoutAPI = s.UnmatchedLaunches
	l.LaunchesUntraced = s.UntracedLaunches
	l.LaunchesStraddled = s.StraddledLaunches
	l.GPUUnhooked = s.GPUNoLaunch
	l.GPUWithoutAPI = s.GPUNoAPI
	l.GPULate = s.Late
	l.GPUDuplicates = s.DuplicateGPU
	l.APIDuplicates = s.DuplicateAPIs
	l.GPUPending = s.PendingGPU
	l.GPUStreamInversions = a.streams.Inversions
}

func (a *Agent) flushJoiner() {
	if a.joiner != nil {
		a.joiner.Flush()
	}
	for _, p := range a.procs {
		m := a.matcherOf(p)
		for _, t := range p.threads {
			a.drain(p, t, m, true)
		}
	}
}

// CUPTI domains of API records (CUpti_CallbackDomain).
const (
	domainDriver  = 1
	domainRuntime = 2
)

// corrAliases maps the correlation ids of driver records nested in a
// runtime record to the runtime record's id: one call, one record for the
// joiner. Two generations bound it.
type corrAliases struct {
	cur, prev map[uint32]uint32
}

const maxAliases = 1 << 16

func (a *Agent) aliases(pid int) *corrAliases {
	if a.corrAlias == nil {
		a.corrAlias = map[int]*corrAliases{}
	}
	al := a.corrAlias[pid]
	if al == nil {
		al = &corrAliases{cur: map[uint32]uint32{}}
		a.corrAlias[pid] = al
	}
	return al
}

func (al *corrAliases) add(from, to uint32) {
	if len(al.cur) >= maxAliases {
		al.prev, al.cur = al.cur, make(map[uint32]uint32, maxAliases)
	}
	al.cur[from] = to
}

// of returns the id a GPU record's correlation id stands for.
func (al *corrAliases) of(corr uint32) uint32 {
	if to, ok := al.cur[corr]; ok {
		return to
	}
	if to, ok := al.prev[corr]; ok {
		return to
	}
	return corr
}

// outermost returns the batch's API records less the driver records nested
// in a runtime record of the same thread, which become aliases of it. A
// runtime call (cudaLaunchKernel) makes the driver call that the uprobe saw
// (cuLaunchKernel), and its GPU work carries the runtime call's
// correlation id; the runtime record's window also contains the uprobe's
// time even when the thread was preempted before the driver call's start
// was stamped. Records come back in start order per thread.
func outermost(recs []cupti.API, al *corrAliases) []cupti.API {
	hasRuntime := false
	for i := range recs {
		if recs[i].Domain == domainRuntime {
			hasRuntime = true
			break
		}
	}
	if !hasRuntime {
		return recs
	}
	s := append([]cupti.API(nil), recs...)
	sort.Slice(s, func(i, j int) bool {
		if s[i].Tid != s[j].Tid {
			return s[i].Tid < s[j].Tid
		}
		if s[i].Start != s[j].Start {
			return s[i].Start < s[j].Start
		}
		return s[i].Domain == domainRuntime && s[j].Domain != domainRuntime // the outer one first
	})
	out := s[:0]
	var open *cupti.API // the innermost runtime record that may contain what follows
	var openCopy cupti.API
	for i := range s {
		r := s[i]
		if open != nil && (open.Tid != r.Tid || r.Start > open.End) {
			open = nil
		}
		if open != nil && r.Domain == domainDriver && r.End <= open.End {
			al.add(r.CorrelationID, open.CorrelationID)
			continue
		}
		out = append(out, r)
		if r.Domain == domainRuntime {
			openCopy = r
			open = &openCopy
		}
	}
	return out
}
