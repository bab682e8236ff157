// Package exporttest builds hand-made cycle timelines and CPU samples, shaped
// like the agent's output for the SGLang EAGLE workload, for the exporters'
// tests.
package exporttest

import (
	"github.com/specprof/specprof/model"
)

// Python frames of the SGLang-shaped workload.
var (
	CycleFunc  = model.Frame{Func: "EAGLEWorker.forward_batch_speculative_generation", File: "sglang/srt/speculative/eagle_worker.py", Line: 250}
	DraftFunc  = model.Frame{Func: "EAGLEWorker.draft", File: "sglang/srt/speculative/eagle_worker.py", Line: 400}
	VerifyFunc = model.Frame{Func: "EAGLEWorker.verify", File: "sglang/srt/speculative/eagle_worker.py", Line: 600}
	AcceptFunc = model.Frame{Func: "EAGLEWorker._accept", File: "sglang/srt/speculative/eagle_worker.py", Line: 700}
	DraftSite  = model.Frame{Func: "LlamaForCausalLMEagle3.forward", File: "sglang/srt/models/llama_eagle3.py", Line: 121}
	VerifySite = model.Frame{Func: "LlamaForCausalLM.forward", File: "sglang/srt/models/llama.py", Line: 433}
	CollSite   = model.Frame{Func: "GroupCoordinator.all_reduce", File: "sglang/srt/distributed/parallel_state.py", Line: 510}
	// AcceptSite is inside the phase function itself (the same function as
	// AcceptFunc, at a later line).
	AcceptSite = model.Frame{Func: "EAGLEWorker._accept", File: "sglang/srt/speculative/eagle_worker.py", Line: 712}
	OtherSite  = model.Frame{Func: "Scheduler.process_batch_result", File: "sglang/srt/managers/scheduler.py", Line: 90}
)

// Kernel names.
const (
	DraftKernel  = "draft_gemm"
	AttnKernel   = "attn_fwd"
	GemmKernel   = "sm90_gemm_bf16"
	NCCLKernel   = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
	SyncAPI      = "cuStreamSynchronize"
	CopyAPI      = "cuMemcpyDtoH_v2"
	CycleNs      = 1_000_000 // each cycle's span
	DraftKernels = 3
)

func kernel(name string, launch, start, dur uint64, stream uint32, corr uint32, site model.Frame) model.GPUActivity {
	return model.GPUActivity{Kind: "kernel", Name: name, Start: start, End: start + dur, Device: 0, Stream: stream,
		Corr: corr, Launch: launch, Site: site}
}

// Cycle returns cycle n (1-based) of thread tid of process pid, starting at
// start (CLOCK_MONOTONIC ns) and lasting CycleNs. Its phases: spec.draft
// (3 kernels on stream 7), spec.verify (2 kernels on stream 7 and an
// all-reduce on stream 9 that overlaps them, with its collective),
// spec.accept (a copy, a 150 µs sync and a sync whose return was not seen)
// and "other", whose span overlaps the others partially (its calls come
// before and after them). Stats are consistent with the records.
func Cycle(pid, tid, n int, start uint64) *model.CycleTrace {
	s := start
	corr := uint32(n * 100)
	c := &model.CycleTrace{PID: pid, TID: tid, Rank: 0, Process: "sglang::scheduler_TP0", Cycle: n, Start: s, End: s + CycleNs, GPU: true}

	draft := &model.PhaseTrace{Phase: "spec.draft", Start: s, End: s + 300_000, Func: DraftFunc, Cycle: CycleFunc}
	for i := uint64(0); i < DraftKernels; i++ {
		draft.GPU = append(draft.GPU, kernel(DraftKernel, s+10_000*(i+1), s+50_000+20_000*i, 20_000, 7, corr+uint32(i), DraftSite))
	}
	draft.Sites = []model.SiteCount{{Site: DraftSite, Launches: DraftKernels, GPUNs: 60_000}}

	verify := &model.PhaseTrace{Phase: "spec.verify", Start: s + 300_000, End: s + 800_000, Func: VerifyFunc, Cycle: CycleFunc}
	verify.GPU = []model.GPUActivity{
		kernel(AttnKernel, s+310_000, s+350_000, 40_000, 7, corr+10, VerifySite),
		kernel(NCCLKernel, s+320_000, s+360_000, 100_000, 9, corr+11, CollSite),
		kernel(GemmKernel, s+330_000, s+390_000, 60_000, 7, corr+12, VerifySite),
	}
	verify.Collectives = []model.Collective{{Op: "AllReduce", API: "ncclAllReduce", Time: s + 320_000, Count: 4096, Dtype: "bf16",
		Reduce: "sum", Bytes: 8192, Peer: -1, Site: CollSite, Kernel: NCCLKernel, GPUStart: s + 360_000, GPUEnd: s + 460_000,
		Algorithm: "RING", Protocol: "LL", Ranks: 2, AlgBWGBps: 0.08192, BusBWGBps: 0.08192}}
	verify.Sites = []model.SiteCount{{Site: VerifySite, Launches: 2, GPUNs: 100_000}, {Site: CollSite, Launches: 1, GPUNs: 100_000}}

	accept := &model.PhaseTrace{Phase: "spec.accept", Start: s + 800_000, End: s + 990_000, Func: AcceptFunc, Cycle: CycleFunc}
	accept.GPU = []model.GPUActivity{{Kind: "memcpy", Start: s + 810_000, End: s + 815_000, Stream: 7, Corr: corr + 20,
		Bytes: 64, Launch: s + 805_000, Site: AcceptSite}}
	accept.Syncs = []model.SyncTrace{
		{API: SyncAPI, Start: s + 820_000, WaitNs: 150_000, Site: AcceptSite},
		{API: SyncAPI, Start: s + 985_000, WaitNs: -1, Site: AcceptSite},
	}

	other := &model.PhaseTrace{Phase: "other", Start: s + 100_000, End: s + 1_000_000, Cycle: CycleFunc}
	other.Syncs = []model.SyncTrace{{API: CopyAPI, Start: s + 995_000, WaitNs: 5_000, Site: OtherSite, Bytes: 8}}

	c.Phases = []*model.PhaseTrace{draft, other, verify, accept}
	for _, ph := range c.Phases {
		ph.Stats = stats(ph)
	}
	return c
}

// stats computes a phase's one-cycle figures from its records, the way the
// agent defines them.
func stats(ph *model.PhaseTrace) *model.PhaseStats {
	st := &model.PhaseStats{Phase: ph.Phase, Cycles: 1, CPUSpanNs: int64(ph.End - ph.Start)}
	var iv [][2]uint64
	for _, g := range ph.GPU {
		switch g.Kind {
		case "kernel":
			st.Launches++
			st.GPUKernels++
			st.GPUKernelNs += int64(g.End - g.Start)
			iv = append(iv, [2]uint64{g.Start, g.End})
		case "memcpy":
			st.GPUMemcpys++
			st.GPUMemcpyBytes += int64(g.Bytes)
			st.GPUMemcpyNs += int64(g.End - g.Start)
		}
	}
	if len(iv) > 0 {
		st.GPUCycles = 1
		st.GPUBusyNs = Union(iv)
		lo, hi := iv[0][0], iv[0][1]
		for _, x := range iv {
			lo, hi = min(lo, x[0]), max(hi, x[1])
		}
		st.GPUSpanNs = int64(hi - lo)
		// Active and elapsed need stream predecessors (agent/correlate):
		// distinct stand-in values, so that exporters are seen to copy them.
		st.GPUActiveNs = st.GPUBusyNs + 7
		st.GPUElapsedNs = st.GPUSpanNs + 11
		st.GPUHostGapNs = 13
	}
	for _, sy := range ph.Syncs {
		st.Syncs++
		if sy.WaitNs > 0 {
			st.SyncWaitNs += sy.WaitNs
		}
	}
	for _, co := range ph.Collectives {
		st.Colls++
		st.CollBytes += co.Bytes
	}
	return st
}

// Union is the total length of the union of intervals.
func Union(iv [][2]uint64) int64 {
	xs := append([][2]uint64(nil), iv...)
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j][0] < xs[j-1][0]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	var tot int64
	var cs, ce uint64
	for i, x := range xs {
		if i == 0 || x[0] > ce {
			tot += int64(ce - cs)
			cs, ce = x[0], x[1]
		} else if x[1] > ce {
			ce = x[1]
		}
	}
	return tot + int64(ce-cs)
}

// Sample returns a CPU sample of thread tid at time t (99 Hz weight) in
// EAGLEWorker.verify under the cycle function, with a native leaf.
func Sample(pid, tid int, t uint64) *model.CPUSample {
	return &model.CPUSample{PID: pid, TID: tid, Time: t, Phase: "spec.verify", Cycle: 1,
		Stack: []model.Frame{VerifySite, VerifyFunc, CycleFunc}, Native: "cuLaunchKernel", Weight: 1_000_000_000 / 99}
}
