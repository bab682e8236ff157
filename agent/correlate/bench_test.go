package correlate

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// workload is a steady synthetic stream shaped like an eager decoding loop:
// per launch one API record and three kernels on two streams (overlapping),
// keys of 64 launches (16 per phase), CUPTI records delivered one batch
// late with a quarter of the kernels ahead of their API records and all of
// them shuffled. It reuses its buffers, so the feeding costs nothing.
type workload struct {
	pids, threads int
	spacing       uint64 // target ns between launches of one thread
	horizon       uint64
	batch         int // launches per thread per CUPTI batch
	n             uint64
	corr          []uint32
	cur, prev     []wbatch
	perm          []int
	perStep       int // records (launch + API + kernels) per step
	// streams, when set, annotates each CUPTI batch with its stream
	// predecessors first, as the agent does (StreamOrder.Annotate).
	streams *StreamOrder
}

type wbatch struct {
	apis []APIRecord
	gpus []GPURecord
}

func newWorkload(pids, threads int) *workload {
	w := &workload{pids: pids, threads: threads, spacing: 100_000, horizon: uint64(DefaultHorizon), batch: 64,
		corr: make([]uint32, pids), cur: make([]wbatch, pids), prev: make([]wbatch, pids)}
	w.perm = rand.New(rand.NewPCG(7, 8)).Perm(w.batch * threads * 3)
	w.perStep = w.batch * threads * pids * 5
	return w
}

func (w *workload) step(j *Joiner[Key]) {
	span := uint64(w.batch) * w.spacing
	base := w.n * span
	for p := range w.pids {
		pid := 1000 + p
		b := &w.cur[p]
		b.apis, b.gpus = b.apis[:0], b.gpus[:0]
		for i := range w.batch {
			l := w.n*uint64(w.batch) + uint64(i)
			for th := range w.threads {
				tid := pid*10 + th
				t := base + uint64(i)*w.spacing + uint64(th)*(w.spacing/uint64(w.threads)) + 1000
				j.Launch(pid, tid, t, Key{Thread: tid, Cycle: int(l / 64), Phase: uint16(l / 16 % 4)})
				corr := w.corr[p]
				w.corr[p]++
				b.apis = append(b.apis, APIRecord{PID: pid, TID: tid, Start: t - 500, End: t + 1500, Corr: corr})
				ks := t + 3000
				b.gpus = append(b.gpus,
					GPURecord{PID: pid, Corr: corr, Start: ks, End: ks + 4000, Stream: 1, Kind: Kernel},
					GPURecord{PID: pid, Corr: corr, Start: ks + 2000, End: ks + 9000, Stream: 2, Kind: Kernel},
					GPURecord{PID: pid, Corr: corr, Start: ks + 4000, End: ks + 6000, Stream: 1, Kind: Kernel})
			}
		}
		j.AdvanceCPU(pid, base+span)
		if pb := &w.prev[p]; len(pb.apis) > 0 {
			if w.streams != nil {
				w.streams.Annotate(pb.gpus)
			}
			q := len(pb.gpus) / 4
			for _, k := range w.perm[:q] {
				j.GPU(&pb.gpus[k])
			}
			for i := range pb.apis {
				j.API(&pb.apis[i])
			}
			for _, k := range w.perm[q:] {
				j.GPU(&pb.gpus[k])
			}
			j.AdvanceGPU(pid, base)
		}
		w.cur[p], w.prev[p] = w.prev[p], w.cur[p]
	}
	w.n++
}

func benchJoiner(b *testing.B, w *workload) *Joiner[Key] {
	var sink uint64
	j, err := New(Options[Key]{Horizon: time.Duration(w.horizon),
		OnJoin:  func(k Key, r *GPURecord) { sink += r.End },
		OnFinal: func(k Key, s *KeyStats) { sink += s.BusyNs }})
	if err != nil {
		b.Fatal(err)
	}
	return j
}

// BenchmarkJoin: one op is one record (launch, API or GPU record) in the
// 1 launch : 1 API : 3 kernels mix.
func BenchmarkJoin(b *testing.B) {
	benchJoin(b, newWorkload(2, 2))
}

// BenchmarkJoinStreamOrder: BenchmarkJoin with every CUPTI batch annotated
// with its stream predecessors (sorted per stream) before the join, as the
// agent feeds it.
func BenchmarkJoinStreamOrder(b *testing.B) {
	w := newWorkload(2, 2)
	w.streams = &StreamOrder{}
	benchJoin(b, w)
	if w.streams.Inversions != 0 {
		b.Fatalf("%d stream-order inversions in an in-order workload", w.streams.Inversions)
	}
}

func benchJoin(b *testing.B, w *workload) {
	j := benchJoiner(b, w)
	for range 1000 { // past two horizons: steady state, tombstones expiring
		w.step(j)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	n := 0
	for n < b.N {
		w.step(j)
		n += w.perStep
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "records/s")
	checkBench(b, j)
}

func checkBench(b *testing.B, j *Joiner[Key]) {
	s := j.Stats()
	checkIdentities(b, s)
	if s.CapEvictions != 0 || s.DedupForgotten != 0 || s.UnmatchedLaunches != 0 || s.GPUNoAPI != 0 || s.Late != 0 || s.Joined == 0 {
		b.Fatalf("workload is not clean: %+v", s)
	}
}

// BenchmarkLongRun10M feeds 10 M records with watermarks advancing and
// reports the live heap after a GC at 1 M, 5 M and 10 M: it must not grow
// with N.
func BenchmarkLongRun10M(b *testing.B) {
	for range b.N {
		w := newWorkload(2, 2)
		j := benchJoiner(b, w)
		marks := []struct {
			at   int
			unit string
		}{{1_000_000, "heapMB@1M"}, {5_000_000, "heapMB@5M"}, {10_000_000, "heapMB@10M"}}
		n, m := 0, 0
		start := time.Now()
		for m < len(marks) {
			w.step(j)
			n += w.perStep
			if n >= marks[m].at {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(ms.HeapInuse)/(1<<20), marks[m].unit)
				m++
			}
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "records/s")
		b.ReportMetric(float64(w.n*uint64(w.batch)*w.spacing)/1e9, "target-s")
		checkBench(b, j)
	}
}
