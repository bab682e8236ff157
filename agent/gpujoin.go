package agent

import (
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
		OnFinal: a.onGPUFinal,
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
	if a.joiner == nil || !a.gpu.connected(p.pid) {
		return
	}
	switch e.API {
	case bpf.APILaunchKernel, bpf.APILaunchKernelEx, bpf.APIGraphLaunch, bpf.APIMemcpyDtoH, bpf.APIMemcpyDtoHAsync:
	default:
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
		GPUKernelNs: int64(ks.KernelNs), GPUMemcpys: int64(ks.Memcpys), GPUMemcpyBytes: int64(ks.MemcpyBytes), GPUMemcpyNs: int64(ks.MemcpyNs)}
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
	var wm uint64
	for i := range b.APIs {
		r := &b.APIs[i]
		a.joiner.API(&correlate.APIRecord{Start: r.Start, End: r.End, PID: pid, TID: int(r.Tid), Corr: r.CorrelationID, Cbid: r.Cbid})
		wm = max(wm, r.End)
	}
	for i := range b.Kernels {
		k := &b.Kernels[i]
		a.joiner.GPU(&correlate.GPURecord{Start: k.Start, End: k.End, PID: pid, Corr: k.CorrelationID, Stream: k.Stream,
			Device: k.Device, Name: k.NameID, GraphID: k.GraphID, Kind: correlate.Kernel})
		wm = max(wm, k.End)
	}
	for i := range b.Memcpys {
		r := &b.Memcpys[i]
		a.joiner.GPU(&correlate.GPURecord{Start: r.Start, End: r.End, Bytes: r.Bytes, PID: pid, Corr: r.CorrelationID,
			Stream: r.Stream, Device: r.Device, GraphID: r.GraphID, Kind: correlate.Memcpy})
		wm = max(wm, r.End)
	}
	for i := range b.Memsets {
		r := &b.Memsets[i]
		a.joiner.GPU(&correlate.GPURecord{Start: r.Start, End: r.End, Bytes: r.Bytes, PID: pid, Corr: r.CorrelationID,
			Stream: r.Stream, Device: r.Device, GraphID: r.GraphID, Kind: correlate.Memset})
		wm = max(wm, r.End)
	}
	if b.FlushAck || b.Final {
		// Everything that completed before the flush has been delivered.
		wm = max(wm, monotonicNow())
	}
	if wm > 0 {
		a.joiner.AdvanceGPU(pid, wm)
	}
}

func (a *Agent) joinLoss() {
	if a.joiner == nil {
		return
	}
	s := a.joiner.Stats()
	l := &a.rep.Loss
	l.LaunchesWithoutAPI = s.UnmatchedLaunches
	l.GPUUnhooked = s.GPUNoLaunch
	l.GPUWithoutAPI = s.GPUNoAPI
	l.GPULate = s.Late
	l.GPUDuplicates = s.DuplicateGPU
	l.GPUPending = s.PendingGPU
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
