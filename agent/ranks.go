package agent

import (
	"slices"
	"sort"

	"github.com/specprof/specprof/model"
)

// Tensor-parallel ranks traced by one session: which rank arrives last at
// each collective (the straggler the others wait for). Cycles of the ranks
// are matched by number and their collectives by order within the cycle:
// every rank runs the same loop and issues the same collectives. A rank
// arrives when its collective kernel starts on its GPU (NCCL's ranks meet
// there: the host calls do not wait for each other); when the kernel is
// not known, when it made the call.
//
// A cycle with collectives over two or more ranks is held until every rank
// has closed the same cycle, then annotated (CycleTrace.TP,
// Collective.Arrival) and handed on, all ranks' together: exporters can put
// one cycle of every rank in one view. A cycle another rank never reaches
// is handed on unannotated once its rank is maxHeldCycles ahead, or when
// the session ends.
//
// One tensor-parallel group per session: ranks are told apart by their TP
// rank alone (data-parallel replicas, each with its own TP0, would be
// taken for restarts of one another: trace one replica per session).

// heldCycle is a rank's cycle waiting for the other ranks' same cycle.
type heldCycle struct {
	tr       *model.CycleTrace
	cpu, gpu []uint64 // collective call times and kernel starts (0: unknown), in order
	col      []*model.Collective
}

// rankTrack holds one rank's cycles not yet compared.
type rankTrack struct {
	stats   model.RankStats
	tid     int // the thread whose cycles are compared (the first to close one)
	pending map[int]*heldCycle
	newest  int
}

// maxHeldCycles bounds how far one rank may run ahead of another before its
// cycles are handed on uncompared (and the memory held for them). Ranks
// drain cycles as their GPU records arrive, and the injected library
// flushes them in buffers: one rank's cycles can trail another's by a
// few hundred milliseconds, i.e. hundreds of short cycles.
const maxHeldCycles = 2048

// deliverCycle hands a finished cycle to Options.OnCycle, through the
// cross-rank comparison.
func (a *Agent) deliverCycle(tr *model.CycleTrace) {
	for _, t := range a.rankCycle(tr) {
		a.opts.OnCycle(t)
	}
}

// arrivals lists the cycle's collectives in order with their call times and
// kernel starts, and the largest communicator among them.
func arrivals(tr *model.CycleTrace) (cpu, gpu []uint64, cols []*model.Collective, ranks int) {
	for _, ph := range tr.Phases {
		for i := range ph.Collectives {
			c := &ph.Collectives[i]
			cpu = append(cpu, c.Time)
			gpu = append(gpu, c.GPUStart)
			cols = append(cols, c)
			ranks = max(ranks, c.Ranks)
		}
	}
	return cpu, gpu, cols, ranks
}

// rankCycle records a drained cycle and returns the cycles to hand on now,
// in order: tr itself when it is not compared across ranks, else every
// rank's cycle once all have it, and cycles given up on.
func (a *Agent) rankCycle(tr *model.CycleTrace) []*model.CycleTrace {
	if tr.Rank < 0 {
		return []*model.CycleTrace{tr}
	}
	cpu, gpu, cols, want := arrivals(tr)
	if len(cpu) == 0 || want < 2 {
		return []*model.CycleTrace{tr}
	}
	if a.ranks == nil {
		a.ranks = map[int]*rankTrack{}
	}
	var out []*model.CycleTrace
	rt := a.ranks[tr.Rank]
	if rt == nil || rt.stats.PID != tr.PID {
		if rt != nil { // the rank restarted: what its old process left is final
			out = rt.release(out, func(int) bool { return true })
		}
		rt = &rankTrack{stats: model.RankStats{Rank: tr.Rank, PID: tr.PID}, tid: tr.TID, pending: map[int]*heldCycle{}}
		a.ranks[tr.Rank] = rt
	}
	if tr.TID != rt.tid {
		return append(out, tr)
	}
	rt.pending[tr.Cycle] = &heldCycle{tr: tr, cpu: cpu, gpu: gpu, col: cols}
	rt.newest = max(rt.newest, tr.Cycle)
	// A rank hands its cycles on in order: a cycle that another rank went
	// past without holding it will not be compared any more.
	tracks := a.rankTracks()
	for _, o := range tracks {
		out = o.release(out, func(c int) bool {
			if c <= o.newest-maxHeldCycles {
				return true
			}
			for _, q := range tracks {
				if q != o && q.newest > c && q.pending[c] == nil {
					return true
				}
			}
			return false
		})
	}
	if len(a.ranks) < want {
		return out
	}
	held := make([]*heldCycle, 0, len(tracks))
	for _, o := range tracks {
		h := o.pending[tr.Cycle]
		if h == nil {
			return out // a rank has not reached this cycle yet
		}
		held = append(held, h)
	}
	compareCycle(tracks, held)
	for i, o := range tracks {
		// Earlier cycles of this rank that the others skipped stay uncompared.
		out = o.release(out, func(c int) bool { return c < tr.Cycle })
		delete(o.pending, tr.Cycle)
		out = append(out, held[i].tr)
	}
	return out
}

// compareCycle annotates one cycle of every rank (tracks and held in the
// same order) and adds it to the ranks' statistics.
func compareCycle(tracks []*rankTrack, held []*heldCycle) {
	n := len(held[0].cpu)
	for _, h := range held[1:] {
		n = min(n, len(h.cpu))
	}
	at := make([]uint64, len(held))
	lastN := make([]int, len(held))
	lateNs := make([]int64, len(held))
	waits := make([]int64, len(held))
	var spread int64
	for i := 0; i < n; i++ {
		// Kernel starts where every rank has one, else call times.
		clock := "gpu"
		for k, h := range held {
			if at[k] = h.gpu[i]; at[k] == 0 {
				clock = "cpu"
			}
		}
		if clock == "cpu" {
			for k, h := range held {
				at[k] = h.cpu[i]
			}
		}
		first, last, li := at[0], at[0], 0
		for k := 1; k < len(held); k++ {
			t := at[k]
			first = min(first, t)
			if t > last {
				last, li = t, k
			}
		}
		d := int64(last - first)
		spread += d
		lastN[li]++
		lateNs[li] += d
		tracks[li].stats.LastArrivals++
		tracks[li].stats.WaitImposedNs += d
		for k, h := range held {
			w := int64(last - at[k])
			waits[k] += w
			h.col[i].Arrival = &model.Arrival{LastRank: tracks[li].stats.Rank, WaitNs: w, SpreadNs: d, Clock: clock}
		}
	}
	s := 0
	for k := 1; k < len(held); k++ {
		if lastN[k] > lastN[s] || (lastN[k] == lastN[s] && lateNs[k] > lateNs[s]) {
			s = k
		}
	}
	tracks[s].stats.StragglerCycles++
	for k, o := range tracks {
		o.stats.Cycles++
		o.stats.Collectives += int64(n)
		held[k].tr.TP = &model.CycleTP{Ranks: len(held), Collectives: n, Straggler: tracks[s].stats.Rank,
			SpreadNs: spread, WaitNs: waits[k]}
	}
}

// release appends the held cycles that drop says to give up on, in cycle
// order, counting them uncompared.
func (rt *rankTrack) release(out []*model.CycleTrace, drop func(cycle int) bool) []*model.CycleTrace {
	var cs []int
	for c := range rt.pending {
		if drop(c) {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	for _, c := range cs {
		out = append(out, rt.pending[c].tr)
		delete(rt.pending, c)
		rt.stats.Uncompared++
	}
	return out
}

// rankTracks lists the tracked ranks by rank.
func (a *Agent) rankTracks() []*rankTrack {
	out := make([]*rankTrack, 0, len(a.ranks))
	for _, rt := range a.ranks {
		out = append(out, rt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].stats.Rank < out[j].stats.Rank })
	return out
}

// flushRanks hands on every cycle still held (at the end of a session), by
// cycle then rank.
func (a *Agent) flushRanks() {
	var held []*model.CycleTrace
	for _, rt := range a.rankTracks() {
		held = rt.release(held, func(int) bool { return true })
	}
	sort.SliceStable(held, func(i, j int) bool { return held[i].Cycle < held[j].Cycle })
	for _, t := range held {
		a.opts.OnCycle(t)
	}
}

// rankReport lists the ranks compared, by rank.
func (a *Agent) rankReport() []*model.RankStats {
	if len(a.ranks) < 2 {
		return nil
	}
	out := make([]*model.RankStats, 0, len(a.ranks))
	for _, rt := range a.rankTracks() {
		s := rt.stats
		out = append(out, &s)
	}
	return out
}
