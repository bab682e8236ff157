package correlate

import "math"

// tEnt is one timer: slab index idx (of generation gen) is due when the GPU
// watermark reaches at. Entries are validated against the slab when they
// pop, so a state change never has to search the heap.
type tEnt struct {
	at  uint64
	idx int32
	gen uint32
}

// theap is a binary min-heap of timers by at (container/heap would box
// every push).
type theap []tEnt

func (h *theap) push(e tEnt) {
	*h = append(*h, e)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if q[p].at <= q[i].at {
			break
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

func (h *theap) pop() tEnt {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	*h = q[:n]
	h.down(0)
	return top
}

func (h theap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].at < h[l].at {
			m = r
		}
		if h[i].at <= h[m].at {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// filter keeps the entries keep accepts and restores the heap order; it
// drops stale entries when they outnumber live ones.
func (h *theap) filter(keep func(tEnt) bool) {
	q := (*h)[:0]
	for _, e := range *h {
		if keep(e) {
			q = append(q, e)
		}
	}
	*h = q
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// satAdd adds without wrapping: garbage timestamps near 2^64 must not make
// a deadline wrap into the past.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// launchEnt is a pending launch; key < 0 marks a decided one (a hole).
type launchEnt struct {
	t    uint64
	next uint64 // the thread's next launch (0: none yet): this call had returned by then
	key  int32
	gen  uint32
}

// API entry states in a thread's deque.
const (
	apiPending uint8 = iota // launch undecided
	apiMatched              // kept until the CPU watermark passes, for launches sharing it
	apiDead                 // decided out of order: a hole
)

type apiEnt struct {
	start, end uint64
	corr       uint32
	state      uint8
}

// thread holds one thread's launches waiting for an API record and its API
// records waiting for a launch, each sorted by time. They are deques with a
// head index: both streams arrive mostly in order, so decisions happen at
// the front; out-of-order decisions leave holes that the front skips.
type thread struct {
	ls     []launchEnt
	lh     int
	as     []apiEnt
	ah     int
	maxDur uint64 // longest API record in as since it was last empty
	// prevEnd is the latest end of the thread's API records so far: with
	// Options.InOrder, where the thread's previous call returned.
	prevEnd uint64
	// frontEnd is the latest end of the records dropped from the front of as.
	frontEnd uint64
	// touched is set by inserts and cleared by sweeps: an empty thread is
	// dropped only after a whole sweep without traffic.
	touched bool
}

func (t *thread) empty() bool { return t.lh == len(t.ls) && t.ah == len(t.as) }

// insertLaunch keeps ls sorted by t; in-order arrival appends.
func (t *thread) insertLaunch(e launchEnt) {
	n := len(t.ls)
	if n == t.lh || t.ls[n-1].t <= e.t {
		t.ls = append(t.ls, e)
		return
	}
	i := t.upperLaunch(e.t)
	// Out of order: the launches on either side bound each other's next.
	if e.next == 0 {
		e.next = t.ls[i].t
	}
	if i > t.lh {
		if p := &t.ls[i-1]; p.next == 0 || p.next > e.t {
			p.next = e.t
		}
	}
	t.ls = append(t.ls, launchEnt{})
	copy(t.ls[i+1:], t.ls[i:n])
	t.ls[i] = e
}

// upperLaunch is the first index >= lh whose t > x.
func (t *thread) upperLaunch(x uint64) int {
	lo, hi := t.lh, len(t.ls)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.ls[m].t <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// lowerLaunch is the first index >= lh whose t >= x.
func (t *thread) lowerLaunch(x uint64) int {
	lo, hi := t.lh, len(t.ls)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.ls[m].t < x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// liveIn reports whether a launch still waiting for its record lies at
// index i or later with t <= x.
func (t *thread) liveIn(i int, x uint64) bool {
	for ; i < len(t.ls) && t.ls[i].t <= x; i++ {
		if t.ls[i].key >= 0 {
			return true
		}
	}
	return false
}

// lastLive returns the index of the latest launch still waiting for its
// record in [i, j) for which ok holds, or -1.
func (t *thread) lastLive(i, j int, ok func(t uint64) bool) int {
	for k := j - 1; k >= i; k-- {
		if t.ls[k].key >= 0 && ok(t.ls[k].t) {
			return k
		}
	}
	return -1
}

// trimLaunches drops decided entries at the front and returns how many.
func (t *thread) trimLaunches() int {
	n := 0
	for t.lh < len(t.ls) && t.ls[t.lh].key < 0 {
		t.lh++
		n++
	}
	t.compactLaunches()
	return n
}

func (t *thread) compactLaunches() {
	switch {
	case t.lh == len(t.ls):
		t.ls, t.lh = t.ls[:0], 0
	case t.lh > 32 && t.lh >= len(t.ls)/2:
		n := copy(t.ls, t.ls[t.lh:])
		t.ls, t.lh = t.ls[:n], 0
	}
}

// insertAPI keeps as sorted by start.
func (t *thread) insertAPI(e apiEnt) {
	if d := satSub(e.end, e.start); d > t.maxDur {
		t.maxDur = d
	}
	n := len(t.as)
	if n == t.ah || t.as[n-1].start <= e.start {
		t.as = append(t.as, e)
		return
	}
	i := t.upperAPI(e.start)
	t.as = append(t.as, apiEnt{})
	copy(t.as[i+1:], t.as[i:n])
	t.as[i] = e
}

// upperAPI is the first index >= ah whose start > x.
func (t *thread) upperAPI(x uint64) int {
	lo, hi := t.ah, len(t.as)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.as[m].start <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// findAPI returns the index of the live API record a launch at x belongs
// to, or -1: the containing record with the latest start, else the record
// starting soonest after x within slack.
func (t *thread) findAPI(x, slack uint64) int {
	best := -1
	for i := t.upperAPI(satAdd(x, slack)) - 1; i >= t.ah; i-- {
		e := &t.as[i]
		if satAdd(e.start, t.maxDur) < x {
			break // sorted by start: no earlier record reaches x
		}
		if e.state == apiDead || e.end < x {
			continue
		}
		if e.start <= x {
			return i
		}
		best = i
	}
	return best
}

// nextAPI is findAPI's InOrder counterpart for a launch that arrives after
// its record (see Options.InOrder): the first record starting after x, if
// it is still waiting for a launch and the record before it ended before x.
func (t *thread) nextAPI(x uint64) int {
	i := t.upperAPI(x)
	if i >= len(t.as) || t.as[i].state != apiPending {
		return -1
	}
	prevEnd := t.frontEnd
	if i > t.ah {
		prevEnd = t.as[i-1].end
	}
	if prevEnd >= x {
		return -1
	}
	return i
}

// findAPIEnt returns the index of the entry for corr starting at start, or -1.
func (t *thread) findAPIEnt(start uint64, corr uint32) int {
	for i := t.upperAPI(start) - 1; i >= t.ah && t.as[i].start == start; i-- {
		if t.as[i].corr == corr && t.as[i].state != apiDead {
			return i
		}
	}
	return -1
}

func (t *thread) compactAPIs() {
	switch {
	case t.ah == len(t.as):
		t.as, t.ah, t.maxDur = t.as[:0], 0, 0
	case t.ah > 32 && t.ah >= len(t.as)/2:
		n := copy(t.as, t.as[t.ah:])
		t.as, t.ah = t.as[:n], 0
	}
}
