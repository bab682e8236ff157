package agent

import "sort"

// Tensor-parallel ranks traced by one session: which rank arrives last at
// each collective (the straggler the others wait for). Cycles of the ranks
// are matched by number and their collectives by order within the cycle:
// every rank runs the same loop and issues the same collectives. A rank
// arrives when its collective kernel starts on its GPU (NCCL's ranks meet
// there: the host calls do not wait for each other); when the kernel is
// not known, when it made the call.

// RankStats is one rank's part in the collectives compared across ranks.
type RankStats struct {
	Rank        int   `json:"rank"`
	PID         int   `json:"pid"`
	Cycles      int   `json:"cycles_compared"`
	Collectives int64 `json:"collectives_compared"`
	// LastArrivals counts the collectives this rank reached last.
	LastArrivals int64 `json:"last_arrivals"`
	// WaitImposedNs sums, over those, how much later it arrived than the
	// first rank: under NCCL, how long the first rank's kernel waited.
	WaitImposedNs int64 `json:"wait_imposed_ns"`
}

// rankTrack holds one rank's recent cycles' collective arrivals.
type rankTrack struct {
	stats  RankStats
	tid    int              // the thread whose cycles are compared (the first to close one)
	cycles map[int][]uint64 // cycle → arrivals in order
	newest int
}

// maxRankCycles bounds how far one rank may run ahead of another before its
// cycles are dropped uncompared.
const maxRankCycles = 256

// noteRankCycle records a drained cycle's collective arrivals and compares
// the cycles that every rank has reached.
func (a *Agent) noteRankCycle(p *process, tr *CycleTrace) {
	if tr.Rank < 0 {
		return
	}
	var arr []uint64
	for _, ph := range tr.Phases {
		for i := range ph.Collectives {
			c := &ph.Collectives[i]
			t := c.Time
			if c.GPUStart != 0 {
				t = c.GPUStart
			}
			arr = append(arr, t)
		}
	}
	if len(arr) == 0 {
		return
	}
	if a.ranks == nil {
		a.ranks = map[int]*rankTrack{}
	}
	rt := a.ranks[tr.Rank]
	if rt == nil || rt.stats.PID != tr.PID {
		rt = &rankTrack{stats: RankStats{Rank: tr.Rank, PID: tr.PID}, tid: tr.TID, cycles: map[int][]uint64{}}
		a.ranks[tr.Rank] = rt
	}
	if tr.TID != rt.tid {
		return
	}
	rt.cycles[tr.Cycle] = arr
	rt.newest = max(rt.newest, tr.Cycle)
	for c := range rt.cycles {
		if c <= rt.newest-maxRankCycles {
			delete(rt.cycles, c)
		}
	}
	if len(a.ranks) < 2 {
		return
	}
	all := make([][]uint64, 0, len(a.ranks))
	tracks := make([]*rankTrack, 0, len(a.ranks))
	for _, o := range a.ranks {
		x, ok := o.cycles[tr.Cycle]
		if !ok {
			return // a rank has not reached this cycle yet
		}
		all = append(all, x)
		tracks = append(tracks, o)
	}
	n := len(all[0])
	for _, x := range all[1:] {
		n = min(n, len(x))
	}
	for i := 0; i < n; i++ {
		first, last, li := all[0][i], all[0][i], 0
		for k := 1; k < len(all); k++ {
			t := all[k][i]
			first = min(first, t)
			if t > last {
				last, li = t, k
			}
		}
		tracks[li].stats.LastArrivals++
		tracks[li].stats.WaitImposedNs += int64(last - first)
	}
	for _, o := range tracks {
		o.stats.Cycles++
		o.stats.Collectives += int64(n)
		delete(o.cycles, tr.Cycle)
	}
}

// rankReport lists the ranks compared, by rank.
func (a *Agent) rankReport() []*RankStats {
	if len(a.ranks) < 2 {
		return nil
	}
	out := make([]*RankStats, 0, len(a.ranks))
	for _, rt := range a.ranks {
		s := rt.stats
		out = append(out, &s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}
