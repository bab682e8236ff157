package correlate

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The property test builds a synthetic workload with known ground truth,
// damages the CUPTI side the way reality does (lost, duplicated, delayed and
// shuffled records), delivers the three streams interleaved at random while
// honouring the watermark contract, and demands exact results.

type pcfg struct {
	name       string
	cpuLag     uint64 // launches delivered up to this late (per thread in order)
	cuptiLag   uint64 // CUPTI records delivered up to this late...
	flushEvery uint64 // ...and then only at flush boundaries (0: none)
	cpuHorizon time.Duration
	endByFlush bool // finish with Flush instead of passing watermarks
	// aggressive drives the watermarks as far ahead as the contract allows,
	// so that every horizon is used nearly to its end.
	aggressive bool
	slack      time.Duration // below the 100 ns minimum gap between calls: no effect on results
	pDropAPI   float64
	pDropGPU   float64
	pDup       float64
}

const (
	pQueue   = 300_000 // a kernel starts within this of its API call's start
	pKDur    = 100_000
	pHorizon = 3_000_000
	// pReach bounds how far a CUPTI record's time (its end) lies after its
	// launch or its API record's start: queue + kernel + API call.
	pReach = pQueue + pKDur + 15_200
)

type sCall struct {
	pid, tid   int
	start, end uint64
	corr       uint32
	launch     int // index into launches, -1 for an unhooked call
	dropped    bool
}

type sLaunch struct {
	pid, tid int
	t        uint64
	key      Key
	call     int
}

type sGPU struct {
	r       GPURecord
	call    int
	dropped bool
}

type scenario struct {
	calls    []sCall
	launches []sLaunch
	gpus     []sGPU
}

func genScenario(rng *rand.Rand) *scenario {
	sc := &scenario{}
	for _, pid := range []int{100, 200} {
		first := len(sc.calls)
		for ti := range 1 + rng.IntN(3) {
			tid := pid*10 + ti
			cur := rng.Uint64N(10_000)
			call := func(launch int) int {
				start := cur + 100 + rng.Uint64N(3000)
				end := start + 200 + rng.Uint64N(15_000)
				cur = end
				sc.calls = append(sc.calls, sCall{pid: pid, tid: tid, start: start, end: end, launch: launch})
				return len(sc.calls) - 1
			}
			for cyc := range 10 + rng.IntN(30) {
				for ph := range 3 {
					if rng.IntN(10) == 0 {
						continue
					}
					for range 1 + rng.IntN(6) {
						if rng.IntN(10) < 3 {
							call(-1) // unhooked: cuMemcpyHtoDAsync, cuEventRecord...
						}
						li := len(sc.launches)
						ci := call(li)
						c := &sc.calls[ci]
						sc.launches = append(sc.launches, sLaunch{pid: pid, tid: tid, key: Key{Thread: tid, Cycle: cyc, Phase: uint16(ph)},
							t: c.start + rng.Uint64N(c.end-c.start+1), call: ci})
					}
				}
				cur += rng.Uint64N(50_000) // between cycles
			}
		}
		// CUPTI hands out correlation ids in call order across threads.
		calls := sc.calls[first:]
		order := make([]int, len(calls))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(calls[a].start, calls[b].start) })
		base := uint32(1 + rng.IntN(1000))
		for n, i := range order {
			calls[i].corr = base + uint32(n)
		}
	}
	// GPU work.
	for ci := range sc.calls {
		c := &sc.calls[ci]
		seen := map[dedupKey]bool{}
		add := func(kind Kind) {
			for {
				s := c.start + rng.Uint64N(pQueue)
				e := s + rng.Uint64N(pKDur)
				if rng.IntN(50) == 0 {
					e = s
				}
				r := GPURecord{PID: c.pid, Corr: c.corr, Start: s, End: e, Stream: 1 + uint32(rng.IntN(3)), Kind: kind,
					Name: uint32(rng.IntN(5))}
				if kind != Kernel {
					r.Bytes = 1 + rng.Uint64N(1<<20)
				}
				d := dedupKey{start: s, end: e, corr: r.Corr, stream: r.Stream, kind: kind}
				if seen[d] {
					continue // a true duplicate is the test's to make
				}
				seen[d] = true
				sc.gpus = append(sc.gpus, sGPU{r: r, call: ci})
				return
			}
		}
		switch {
		case c.launch < 0:
			if rng.IntN(2) == 0 {
				for range 1 + rng.IntN(2) {
					add(Memcpy)
				}
			}
		case rng.IntN(100) < 15: // graph replay: many records, one corr
			for range 4 + rng.IntN(40) {
				switch rng.IntN(20) {
				case 0:
					add(Memcpy)
				case 1:
					add(Memset)
				default:
					add(Kernel)
				}
			}
		case rng.IntN(20) == 0:
			add(Memcpy) // a hooked synchronous copy
		default:
			for range 1 + rng.IntN(3) {
				add(Kernel)
			}
		}
	}
	return sc
}

// truth is what the joiner must report, computed from the surviving data
// only, by a different route (per-call bookkeeping and a sweep union).
type truth struct {
	keys    map[Key]*KeyStats
	corrKey map[[2]int]Key // (pid, corr) → key, for surviving launch calls
	st      Stats
	reasons map[Reason]int
}

func (sc *scenario) truth() *truth {
	tr := &truth{keys: map[Key]*KeyStats{}, corrKey: map[[2]int]Key{}, reasons: map[Reason]int{}}
	ivs := map[Key][][2]uint64{}
	act := map[Key][][2]uint64{}
	for _, l := range sc.launches {
		ks := tr.keys[l.key]
		if ks == nil {
			ks = &KeyStats{PID: l.pid}
			tr.keys[l.key] = ks
		}
		ks.Launches++
		tr.st.Launches++
		c := sc.calls[l.call]
		if c.dropped {
			tr.st.UnmatchedLaunches++
			continue
		}
		ks.MatchedLaunches++
		tr.st.MatchedLaunches++
		tr.corrKey[[2]int{c.pid, int(c.corr)}] = l.key
	}
	for _, c := range sc.calls {
		switch {
		case c.dropped:
		case c.launch >= 0:
			tr.st.MatchedAPIs++
		default:
			tr.st.APINoLaunch++
		}
	}
	for _, g := range sc.gpus {
		if g.dropped {
			continue
		}
		c := sc.calls[g.call]
		switch {
		case c.dropped:
			tr.st.GPUNoAPI++
			tr.reasons[NoAPI]++
		case c.launch < 0:
			tr.st.GPUNoLaunch++
			tr.reasons[NoLaunch]++
		default:
			tr.st.Joined++
			k := sc.launches[c.launch].key
			ks := tr.keys[k]
			r := g.r
			d := r.End - r.Start
			// No stream predecessors here (PrevEnd 0): active time is the
			// union of every record's own interval.
			if r.End > r.Start {
				if ks.ActiveLast == 0 || r.Start < ks.ActiveFirst {
					ks.ActiveFirst = r.Start
				}
				ks.ActiveLast = max(ks.ActiveLast, r.End)
				act[k] = append(act[k], [2]uint64{r.Start, r.End})
			}
			switch r.Kind {
			case Kernel:
				if ks.Kernels == 0 || r.Start < ks.FirstStart {
					ks.FirstStart = r.Start
				}
				ks.LastEnd = max(ks.LastEnd, r.End)
				ks.Kernels++
				ks.KernelNs += d
				ivs[k] = append(ivs[k], [2]uint64{r.Start, r.End})
			case Memcpy:
				ks.Memcpys++
				ks.MemcpyBytes += r.Bytes
				ks.MemcpyNs += d
			case Memset:
				ks.Memsets++
				ks.MemsetBytes += r.Bytes
				ks.MemsetNs += d
			}
		}
	}
	for k, iv := range ivs {
		tr.keys[k].BusyNs = bruteUnion(iv)
	}
	for k, iv := range act {
		tr.keys[k].ActiveNs = bruteUnion(iv)
	}
	tr.st.KeysFinalized = uint64(len(tr.keys))
	return tr
}

type event struct {
	at   uint64
	tie  uint64
	kind int // 0 launch, 1 API, 2 GPU, 3 watermarks
	i    int
}

func runScenario(t *testing.T, seed uint64, c pcfg) {
	rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
	sc := genScenario(rng)

	// Damage: losses, then duplicates of what survived.
	var evs []event
	for i := range sc.calls {
		sc.calls[i].dropped = rng.Float64() < c.pDropAPI
	}
	for i := range sc.gpus {
		sc.gpus[i].dropped = rng.Float64() < c.pDropGPU
	}
	tr := sc.truth()
	cuptiAt := func(ref uint64) uint64 {
		at := ref + rng.Uint64N(c.cuptiLag+1)
		if c.flushEvery > 0 {
			at = (at/c.flushEvery + 1) * c.flushEvery
		}
		return at
	}
	var maxT uint64
	for i, cl := range sc.calls {
		maxT = max(maxT, cl.end)
		if cl.dropped {
			continue
		}
		tr.st.APIs++
		evs = append(evs, event{at: cuptiAt(cl.end), kind: 1, i: i})
		if rng.Float64() < c.pDup {
			tr.st.APIs++
			tr.st.DuplicateAPIs++
			evs = append(evs, event{at: cuptiAt(cl.end), kind: 1, i: i})
		}
	}
	for i, g := range sc.gpus {
		maxT = max(maxT, g.r.End)
		if g.dropped {
			continue
		}
		tr.st.GPURecords++
		evs = append(evs, event{at: cuptiAt(g.r.End), kind: 2, i: i})
		if rng.Float64() < c.pDup {
			tr.st.GPURecords++
			tr.st.DuplicateGPU++
			evs = append(evs, event{at: cuptiAt(g.r.End), kind: 2, i: i})
		}
	}
	lastAt := map[int]uint64{}
	for i, l := range sc.launches {
		at := max(lastAt[l.tid], l.t+rng.Uint64N(c.cpuLag+1))
		lastAt[l.tid] = at
		evs = append(evs, event{at: at, kind: 0, i: i})
	}
	for at := uint64(0); at < maxT+10*pHorizon; at += 1 + rng.Uint64N(200_000) {
		evs = append(evs, event{at: at, kind: 3})
	}
	for i := range evs {
		evs[i].tie = rng.Uint64()
	}
	slices.SortFunc(evs, func(a, b event) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		if (a.kind == 3) != (b.kind == 3) { // watermarks after what they cover
			if a.kind == 3 {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.tie, b.tie)
	})
	if c.endByFlush {
		// Stop short of the horizon so that Flush has work to do.
		cut := slices.IndexFunc(evs, func(e event) bool { return e.kind == 3 && e.at > maxT })
		keep := evs[:cut]
		for _, e := range evs[cut:] {
			if e.kind != 3 {
				keep = append(keep, e)
			}
		}
		evs = keep
	}

	r := newRec()
	j, err := New(r.opts(Options[Key]{Horizon: pHorizon, CPUHorizon: c.cpuHorizon, Slack: c.slack}))
	if err != nil {
		t.Fatal(err)
	}
	// Contract: every launch with ktime <= cpuWM-CPUHorizon has been
	// delivered; every CUPTI record has been delivered before the GPU
	// watermark passes its launch (or its API record's start) + Horizon.
	// Conservatively, gpuWM trails the CUPTI delivery lag; aggressively it
	// leads by what the horizon leaves after pReach.
	gpuBehind := c.cuptiLag + c.flushEvery
	var cpuLead, gpuLead uint64
	if c.aggressive {
		gpuLead = pHorizon - pReach - 1
		cpuLead = uint64(max(c.cpuHorizon, 0))
	}
	for n, e := range evs {
		switch e.kind {
		case 0:
			l := sc.launches[e.i]
			j.Launch(l.pid, l.tid, l.t, l.key)
		case 1:
			cl := sc.calls[e.i]
			j.API(&APIRecord{PID: cl.pid, TID: cl.tid, Start: cl.start, End: cl.end, Corr: cl.corr, Cbid: 7})
		case 2:
			g := sc.gpus[e.i].r
			j.GPU(&g)
		case 3:
			pids := []int{100, 200}
			if rng.IntN(2) == 0 {
				pids[0], pids[1] = 200, 100
			}
			for _, pid := range pids {
				j.AdvanceCPU(pid, satSub(e.at+cpuLead, c.cpuLag))
				j.AdvanceGPU(pid, satSub(e.at+gpuLead, gpuBehind))
			}
		}
		if n%97 == 0 {
			checkIdentities(t, j.Stats())
		}
	}
	if c.endByFlush {
		j.Flush()
	}
	got := j.Stats()
	checkIdentities(t, got)
	want := tr.st
	if got != want {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
	for why, n := range tr.reasons {
		if len(r.unjoined[why]) != n {
			t.Errorf("%v: %d records, want %d", why, len(r.unjoined[why]), n)
		}
	}
	if len(r.unjoined[Late]) != 0 {
		t.Errorf("%d late records", len(r.unjoined[Late]))
	}
	// Per key: exactly once, exactly the truth.
	if len(r.finals) != len(tr.keys) {
		t.Fatalf("%d keys finalized, want %d", len(r.finals), len(tr.keys))
	}
	for k, w := range tr.keys {
		if r.nFinal[k] != 1 {
			t.Fatalf("key %+v finalized %d times", k, r.nFinal[k])
		}
		g := r.finals[k]
		g.Names = nil
		if !reflect.DeepEqual(g, *w) {
			t.Fatalf("key %+v\n got %+v\nwant %+v", k, g, *w)
		}
	}
	// Every joined record went to its own launch's key.
	for k, recs := range r.joined {
		for _, g := range recs {
			if want := tr.corrKey[[2]int{g.PID, int(g.Corr)}]; want != k {
				t.Fatalf("record %+v joined to %+v, want %+v", g, k, want)
			}
		}
		if len(recs) != r.finals[k].Kernels+r.finals[k].Memcpys+r.finals[k].Memsets {
			t.Fatalf("key %+v: %d joined records, stats count %+v", k, len(recs), r.finals[k])
		}
	}
}

func TestPropertyRandomized(t *testing.T) {
	cfgs := []pcfg{
		{name: "cupti-late", cuptiLag: 1_000_000, flushEvery: 100_000},
		{name: "cupti-late-aggressive", cuptiLag: 1_000_000, flushEvery: 100_000, aggressive: true},
		{name: "cpu-late", cpuLag: 1_000_000, cuptiLag: 200_000},
		{name: "cpu-late-slack", cpuLag: 1_000_000, cuptiLag: 200_000, slack: 99},
		{name: "both-late-cpuhorizon-aggressive", cpuLag: 500_000, cuptiLag: 500_000, cpuHorizon: 20_000, aggressive: true},
		{name: "flush-at-end-aggressive", cuptiLag: 800_000, flushEvery: 50_000, endByFlush: true, aggressive: true},
		{name: "cpu-late-flush", cpuLag: 900_000, cuptiLag: 100_000, endByFlush: true},
	}
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for _, c := range cfgs {
		if c.cpuHorizon == 0 {
			c.cpuHorizon = -1
		}
		c.pDropAPI, c.pDropGPU, c.pDup = 0.02, 0.02, 0.05
		for s := range seeds {
			t.Run(fmt.Sprintf("%s/%d", c.name, s), func(t *testing.T) {
				runScenario(t, uint64(s)+1, c)
			})
		}
	}
	// Heavier damage, to exercise every path more often.
	for s := range seeds {
		c := pcfg{name: "heavy", cpuLag: 600_000, cuptiLag: 700_000, flushEvery: 30_000, cpuHorizon: -1, aggressive: true,
			pDropAPI: 0.25, pDropGPU: 0.2, pDup: 0.3}
		t.Run(fmt.Sprintf("%s/%d", c.name, s), func(t *testing.T) { runScenario(t, uint64(s)+100, c) })
	}
}
