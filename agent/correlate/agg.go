package correlate

import "slices"

type ival struct{ s, e uint64 }

// Intervals accumulates closed intervals [start, end] in any order and
// reports the length of their union. It merges as it goes, so its memory is
// bounded by the number of disjoint busy periods, not by the number of
// intervals added. The zero value is ready to use.
type Intervals struct {
	iv        []ival
	compactAt int
}

// minCompact is the size below which merging waits: sorting a handful of
// intervals on every Add would cost more than it saves.
const minCompact = 64

// Add adds [start, end]. An interval with end <= start is empty.
func (s *Intervals) Add(start, end uint64) {
	if end <= start {
		return
	}
	// Fast path: streams deliver kernels mostly in order, so most intervals
	// touch the last one and merge in place.
	if n := len(s.iv); n > 0 {
		l := &s.iv[n-1]
		if start <= l.e && end >= l.s {
			l.s = min(l.s, start)
			l.e = max(l.e, end)
			return
		}
	}
	s.iv = append(s.iv, ival{start, end})
	if len(s.iv) >= max(s.compactAt, minCompact) {
		s.compact()
	}
}

// compact sorts and merges in place; the next compaction waits until the
// set has doubled, which keeps Add amortized O(log n).
func (s *Intervals) compact() {
	slices.SortFunc(s.iv, func(a, b ival) int {
		switch {
		case a.s < b.s:
			return -1
		case a.s > b.s:
			return 1
		}
		return 0
	})
	w := 0
	for _, x := range s.iv {
		if w > 0 && x.s <= s.iv[w-1].e {
			s.iv[w-1].e = max(s.iv[w-1].e, x.e)
			continue
		}
		s.iv[w] = x
		w++
	}
	s.iv = s.iv[:w]
	s.compactAt = 2 * w
}

// Union returns the total length covered by the intervals added so far.
func (s *Intervals) Union() uint64 {
	s.compact()
	var n uint64
	for _, x := range s.iv {
		n += x.e - x.s
	}
	return n
}

// Len is the number of intervals currently held (after merging so far).
func (s *Intervals) Len() int { return len(s.iv) }

// Reset empties the set and keeps its storage.
func (s *Intervals) Reset() {
	s.iv = s.iv[:0]
	s.compactAt = 0
}

// Agg aggregates the GPU records of one key into KeyStats. Records may come
// in any order. The zero value is ready to use; set PerName before the first
// Add to keep per-name totals.
type Agg struct {
	PerName bool

	busy   Intervals
	active Intervals
	s      KeyStats
	names  map[uint32]NameTotal
}

// Add accounts one record.
func (a *Agg) Add(r *GPURecord) {
	var d uint64
	if r.End > r.Start {
		d = r.End - r.Start
	}
	a.activeAdd(r)
	switch r.Kind {
	case Graph:
		a.window(r)
		a.s.Graphs++
		a.s.GraphNs += d
		a.busy.Add(r.Start, r.End)
	case Kernel:
		a.window(r)
		a.s.Kernels++
		a.s.KernelNs += d
		a.busy.Add(r.Start, r.End)
		if a.PerName {
			if a.names == nil {
				a.names = make(map[uint32]NameTotal)
			}
			t := a.names[r.Name]
			t.Count++
			t.Ns += d
			a.names[r.Name] = t
		}
	case Memcpy:
		a.s.Memcpys++
		a.s.MemcpyBytes += r.Bytes
		a.s.MemcpyNs += d
	case Memset:
		a.s.Memsets++
		a.s.MemsetBytes += r.Bytes
		a.s.MemsetNs += d
	}
}

// activeAdd accounts r's interval, from the end of its stream predecessor
// when it was queued behind it (KeyStats.ActiveNs).
func (a *Agg) activeAdd(r *GPURecord) {
	if r.End <= r.Start {
		return
	}
	from := r.Start
	// Launched before its predecessor ended: it waited in the queue.
	// PrevEnd > Start happens only with work that overlaps on one stream
	// id (parallel branches of a graph): no gap then.
	if r.PrevEnd != 0 && r.APIStart != 0 && r.APIStart < r.PrevEnd && r.PrevEnd <= r.Start {
		from = r.PrevEnd
	}
	a.active.Add(from, r.End)
	if a.s.ActiveLast == 0 || from < a.s.ActiveFirst {
		a.s.ActiveFirst = from
	}
	a.s.ActiveLast = max(a.s.ActiveLast, r.End)
}

// window widens the span to r (kernels and graphs).
func (a *Agg) window(r *GPURecord) {
	first := a.s.Kernels+a.s.Graphs == 0
	if first || r.Start < a.s.FirstStart {
		a.s.FirstStart = r.Start
	}
	if first || r.End > a.s.LastEnd {
		a.s.LastEnd = r.End
	}
}

// Result fills the GPU fields of s (everything but PID, Launches,
// MatchedLaunches and Evicted). s.Names is handed over: the Agg starts a new
// map afterwards.
func (a *Agg) Result(s *KeyStats) {
	s.Kernels = a.s.Kernels
	s.BusyNs = a.busy.Union()
	s.FirstStart, s.LastEnd = a.s.FirstStart, a.s.LastEnd
	s.KernelNs = a.s.KernelNs
	s.Graphs, s.GraphNs = a.s.Graphs, a.s.GraphNs
	s.Memcpys, s.MemcpyBytes, s.MemcpyNs = a.s.Memcpys, a.s.MemcpyBytes, a.s.MemcpyNs
	s.Memsets, s.MemsetBytes, s.MemsetNs = a.s.Memsets, a.s.MemsetBytes, a.s.MemsetNs
	s.ActiveNs = a.active.Union()
	s.ActiveFirst, s.ActiveLast = a.s.ActiveFirst, a.s.ActiveLast
	s.Names = a.names
	a.names = nil
}

// Reset empties the Agg and keeps its storage and PerName.
func (a *Agg) Reset() {
	a.busy.Reset()
	a.active.Reset()
	a.s = KeyStats{}
	a.names = nil
}
