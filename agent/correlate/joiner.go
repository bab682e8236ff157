package correlate

import "fmt"

// Correlation-id states.
const (
	csFree     uint8 = iota
	csWaiting        // GPU records buffered, API record not seen yet
	csPending        // API record seen, launch undecided; GPU records buffered
	csJoined         // attributed to key (key, keyGen)
	csNoLaunch       // API record had no launch: its GPU records are unhooked work
	csKeyGone        // its launch's key was no longer held: its GPU records are Late
)

// corrState is what one (pid, correlation id) is known to be. It outlives
// the decision so that GPU records arriving later still find their key (or
// are recognized as Late or unhooked) for one more horizon.
type corrState struct {
	head, tail int32 // buffered records (csWaiting, csPending): a list in proc.buf
	nrec       int32
	start, end uint64 // the API record's window
	launch     uint64 // the ktime of the launch that named its key (joined)
	key        int32
	keyGen     uint32
	corr       uint32
	gen        uint32 // bumped on free: invalidates timers naming this slot
	state      uint8
}

// Key states.
const (
	ksFree uint8 = iota
	ksOpen
	ksFinal // stats delivered; kept a horizon so late records count as Late
)

type keyState[K comparable] struct {
	key        K
	agg        Agg
	corrs      []uint32 // joined correlation ids, forgotten with the key
	lastLaunch uint64
	lastGPU    uint64
	launches   int
	matched    int
	gen        uint32
	state      uint8
}

// deadline is when the GPU watermark finalizes the key. Joined records
// extend it: a key whose kernels are seen running late has a backlogged
// GPU queue, and its remaining kernels are later still.
func (k *keyState[K]) deadline(h uint64) uint64 {
	return satAdd(max(k.lastLaunch, k.lastGPU), h)
}

type dedupKey struct {
	start, end   uint64
	corr, stream uint32
	kind         Kind
}

// proc is the state of one process: correlation ids are per process.
type proc[K comparable] struct {
	j            *Joiner[K]
	pid          int
	cpuWM, gpuWM uint64

	threads map[int]*thread
	thrFree []*thread // dropped threads, reused with their storage
	lastTID int
	lastThr *thread

	// Slabs with free lists instead of pointers: the hot path allocates
	// nothing once warm, and the maps hold no pointers for the GC to scan.
	corrs  map[uint32]int32
	cs     []corrState
	csFree []int32

	keys   map[K]int32
	ks     []keyState[K]
	ksFree []int32
	lastK  K // one-entry cache: launches come in runs of one key
	lastKI int32
	lastKG uint32

	openQ  theap // open keys by a lower bound of their deadline
	waitQ  theap // csWaiting corrs by eviction time
	corrQ  theap // csNoLaunch and csKeyGone corrs by expiry
	finalQ theap // finalized keys by expiry

	// Two generations of seen GPU records, swapped every horizon: a record
	// is remembered for at least one horizon of watermark after it arrives.
	dCur, dPrev map[dedupKey]struct{}
	dRotate     uint64

	// Buffered GPU records of all corrs, one pool with a free list: memory
	// follows the peak of buffered records, not the number of corr slots.
	buf     []bufRec
	bufFree int32

	liveL, entL int // pending launches; launch deque entries (holes included)
	pendA, entA int // undecided API records; API deque entries
	nGPU        int // buffered GPU records
	nWait       int // csWaiting corrs
	nOpen       int // open keys
}

// Joiner joins launches, API records and GPU records and aggregates the
// joined GPU work per key K. Create one with New.
type Joiner[K comparable] struct {
	o                      Options[K]
	h, ch, slack           uint64
	maxL, maxA, maxG, maxC int
	maxK, maxD             int
	procs                  map[int]*proc[K]
	last                   *proc[K]
	lastPID                int
	st                     Stats
	fin                    KeyStats  // scratch for OnFinal
	rec                    GPURecord // scratch: callbacks never see the caller's pointer, so it does not escape
}

// New returns a Joiner configured by o.
func New[K comparable](o Options[K]) (*Joiner[K], error) {
	if o.Horizon < 0 || o.Slack < 0 {
		return nil, fmt.Errorf("%w: Horizon %v and Slack %v must not be negative", ErrOptions, o.Horizon, o.Slack)
	}
	for _, c := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxLaunches", &o.MaxLaunches, DefaultMaxLaunches},
		{"MaxAPIs", &o.MaxAPIs, DefaultMaxAPIs},
		{"MaxGPU", &o.MaxGPU, DefaultMaxGPU},
		{"MaxCorrs", &o.MaxCorrs, DefaultMaxCorrs},
		{"MaxKeys", &o.MaxKeys, DefaultMaxKeys},
		{"MaxDedup", &o.MaxDedup, DefaultMaxDedup},
	} {
		switch {
		case *c.v < 0:
			return nil, fmt.Errorf("%w: %s is %d", ErrOptions, c.name, *c.v)
		case *c.v == 0:
			*c.v = c.def
		}
	}
	if o.Horizon == 0 {
		o.Horizon = DefaultHorizon
	}
	switch {
	case o.CPUHorizon == 0:
		o.CPUHorizon = DefaultCPUHorizon
	case o.CPUHorizon < 0:
		o.CPUHorizon = 0
	}
	return &Joiner[K]{
		o: o, h: uint64(o.Horizon), ch: uint64(o.CPUHorizon), slack: uint64(o.Slack),
		maxL: o.MaxLaunches, maxA: o.MaxAPIs, maxG: o.MaxGPU, maxC: o.MaxCorrs,
		maxK: o.MaxKeys, maxD: max(2, o.MaxDedup),
		procs: make(map[int]*proc[K]),
	}, nil
}

// Launch reports a hooked driver call (a kernel or graph launch) of thread
// tid of process pid at ktime, attributed to key. Launches of one thread
// should come in ktime order; others are accepted at a small cost.
func (j *Joiner[K]) Launch(pid, tid int, ktime uint64, key K) {
	j.st.Launches++
	p := j.proc(pid)
	ki, kg := p.keyFor(key, ktime)
	th := p.thread(tid)
	if n := len(th.ls); n > th.lh && th.ls[n-1].next == 0 && th.ls[n-1].t < ktime {
		th.ls[n-1].next = ktime // the previous call returned before this one
	}
	// A launch made outside a duty window gets no record. Its event can come
	// after the first records of the next window, which are not its: it
	// takes none (it is counted untraced).
	if th.ah < len(th.as) && !j.untraced(pid, ktime) {
		i := th.findAPI(ktime, j.slack)
		if i < 0 && j.o.InOrder {
			i = th.nextAPI(ktime)
			if i >= 0 {
				j.st.PreemptedLaunches++
			}
		}
		if i >= 0 && ktime < th.as[i].start && th.as[i].state == apiMatched {
			// Before the record's start and the record has its launch
			// already: this launch's own record was lost (see API).
			i = -1
		}
		if i >= 0 {
			p.matchLaunch(ki, kg)
			e := &th.as[i]
			if e.state == apiMatched {
				j.st.SharedAPI++
			} else {
				e.state = apiMatched
				p.pendA--
				j.st.MatchedAPIs++
				if ci, ok := p.corrs[e.corr]; ok && p.cs[ci].state == csPending {
					p.attribute(ci, ki, kg, ktime)
				}
			}
			p.caps(th)
			return
		}
	}
	th.insertLaunch(launchEnt{t: ktime, key: ki, gen: kg})
	th.touched = true
	p.liveL++
	p.entL++
	p.caps(th)
}

// API reports a CUPTI driver-API record. A second record with the same
// (pid, corr) within the horizon counts as DuplicateAPIs and is ignored.
func (j *Joiner[K]) API(r *APIRecord) {
	j.st.APIs++
	p := j.proc(r.PID)
	ci, ok := p.corrs[r.Corr]
	if ok {
		if p.cs[ci].state != csWaiting {
			j.st.DuplicateAPIs++
			return
		}
		p.nWait-- // its waitQ timer goes stale
	} else {
		ci = p.newCorr(r.Corr)
	}
	end := max(r.End, r.Start)
	c := &p.cs[ci]
	c.start, c.end, c.state = r.Start, end, csPending
	th := p.thread(r.TID)

	// Launches inside the window: the first one names the key. Those in
	// the slack before the record's start (a uprobe fires before CUPTI's
	// entry callback takes the start) belong to it only when no launch
	// lies inside it, and then only the latest of them: the others are
	// earlier calls whose own records were lost (or never made, outside a
	// duty window), and claiming them would hide that loss and put their
	// launch's key on this record's GPU work.
	var ki int32 = -1
	var kg uint32
	var lt uint64 // the launch that names the key
	if th.lh < len(th.ls) {
		from := th.lowerLaunch(satSub(r.Start, j.slack))
		if in := th.lowerLaunch(r.Start); in > from && th.liveIn(in, end) {
			if th.liveIn(from, r.Start-1) {
				j.st.PrefixSkipped++
			}
			from = in
		} else if in > from {
			// Launches made outside a duty window never get a record: none
			// of this record's.
			last := th.lastLive(from, in, func(t uint64) bool { return !j.untraced(r.PID, t) })
			switch {
			case last < 0:
				from = in
			case last > from && th.liveIn(from, th.ls[last].t-1):
				j.st.PrefixSkipped++
				from = last
			}
		}
		for i := from; i < len(th.ls) && th.ls[i].t <= end; i++ {
			e := &th.ls[i]
			if e.key < 0 || j.untraced(r.PID, e.t) {
				continue
			}
			if ki < 0 {
				ki, kg, lt = e.key, e.gen, e.t
			} else {
				j.st.SharedAPI++
			}
			p.matchLaunch(e.key, e.gen)
			e.key = -1
			p.liveL--
		}
		if ki < 0 && j.o.InOrder {
			// The InOrder rule (Options.InOrder): the latest pending
			// launch before the window, made after the thread's previous
			// call returned.
			if i := th.lowerLaunch(satSub(r.Start, j.slack)) - 1; i >= th.lh {
				if e := &th.ls[i]; e.key >= 0 && e.t > th.prevEnd && !j.untraced(r.PID, e.t) {
					ki, kg, lt = e.key, e.gen, e.t
					j.st.PreemptedLaunches++
					p.matchLaunch(e.key, e.gen)
					e.key = -1
					p.liveL--
				}
			}
		}
	}
	if end > th.prevEnd {
		th.prevEnd = end
	}
	// Until the CPU watermark passes the record, a launch inside it may still
	// come: keep it findable.
	open := satAdd(end, j.ch) > p.cpuWM
	switch {
	case ki >= 0:
		p.entL -= th.trimLaunches()
		j.st.MatchedAPIs++
		p.attribute(ci, ki, kg, lt)
		if open {
			th.insertAPI(apiEnt{start: r.Start, end: end, corr: r.Corr, state: apiMatched})
			th.touched = true
			p.entA++
		}
	case !open:
		p.noLaunch(ci)
	default:
		th.insertAPI(apiEnt{start: r.Start, end: end, corr: r.Corr, state: apiPending})
		th.touched = true
		p.entA++
		p.pendA++
	}
	p.caps(th)
}

// GPU reports a CUPTI GPU record (kernel, copy, set). The Joiner copies it.
func (j *Joiner[K]) GPU(r *GPURecord) {
	j.st.GPURecords++
	p := j.proc(r.PID)
	if p.seen(r) {
		j.st.DuplicateGPU++
		return
	}
	ci, ok := p.corrs[r.Corr]
	if !ok {
		ci = p.newCorr(r.Corr)
		c := &p.cs[ci]
		c.state = csWaiting
		p.nWait++
		p.waitQ.push(tEnt{at: satAdd(max(p.gpuWM, r.Start), j.h), idx: ci, gen: c.gen})
		if len(p.waitQ) > 2*p.nWait+1024 {
			p.waitQ.filter(p.validWait)
		}
	}
	c := &p.cs[ci]
	if c.state == csWaiting || c.state == csPending {
		p.buffer(c, r)
		p.caps(nil)
		return
	}
	j.rec = *r
	p.deliver(c, &j.rec)
}

// AdvanceCPU says every launch of pid with ktime <= ns-CPUHorizon has been
// reported (typically: the latest ktime read from the ring buffer). API
// records that end at or before ns-CPUHorizon and matched no launch are
// decided launch-less (NoLaunch). Watermarks never move back.
func (j *Joiner[K]) AdvanceCPU(pid int, ns uint64) {
	p := j.proc(pid)
	if ns <= p.cpuWM {
		return
	}
	p.cpuWM = ns
	for tid, th := range p.threads {
		for th.ah < len(th.as) {
			e := &th.as[th.ah]
			if e.state != apiDead && satAdd(e.end, j.ch) > ns {
				break
			}
			if e.state == apiPending {
				p.pendA--
				if ci, ok := p.corrs[e.corr]; ok && p.cs[ci].state == csPending {
					p.noLaunch(ci)
				}
			}
			th.frontEnd = max(th.frontEnd, e.end)
			th.ah++
			p.entA--
		}
		th.compactAPIs()
		p.sweepThread(tid, th)
	}
}

// AdvanceGPU moves pid's GPU watermark to ns: the latest CUPTI time known
// delivered (a record's time, or the time of an acknowledged flush). The
// contract is that every CUPTI record arrives before the watermark passes
// its launch (or its API record's start) by Horizon. In order, it decides
// launches with ktime <= ns-Horizon unmatched, GPU records waiting since
// before ns-Horizon orphaned (NoAPI), finalizes the keys whose deadline
// (see Options.Horizon) is <= ns, and forgets what was decided more than a
// horizon ago. Watermarks never move back.
//
// A process whose GPU watermark never moves (no CUPTI library) keeps its
// launches and keys until the caps shed them: do not report its launches,
// or advance its GPU watermark from CPU time.
func (j *Joiner[K]) AdvanceGPU(pid int, ns uint64) {
	p := j.proc(pid)
	if ns <= p.gpuWM {
		return
	}
	p.gpuWM = ns
	for tid, th := range p.threads {
		for th.lh < len(th.ls) {
			e := &th.ls[th.lh]
			if e.key >= 0 {
				if satAdd(e.t, j.h) > ns {
					break
				}
				p.unmatched(pid, e.t, e.next)
			}
			th.lh++
			p.entL--
		}
		th.compactLaunches()
		p.sweepThread(tid, th)
	}
	for len(p.waitQ) > 0 && p.waitQ[0].at <= ns {
		if e := p.waitQ.pop(); p.validWait(e) {
			p.evictWaiting(e.idx)
		}
	}
	for len(p.openQ) > 0 && p.openQ[0].at <= ns {
		e := p.openQ[0]
		k := &p.ks[e.idx]
		if k.gen != e.gen || k.state != ksOpen {
			p.openQ.pop()
			continue
		}
		if d := k.deadline(j.h); d > ns {
			p.openQ[0].at = d
			p.openQ.down(0)
			continue
		}
		p.openQ.pop()
		p.finalize(e.idx, false)
	}
	for len(p.corrQ) > 0 && p.corrQ[0].at <= ns {
		if e := p.corrQ.pop(); p.validCorrExp(e) {
			p.freeCorr(e.idx)
		}
	}
	for len(p.finalQ) > 0 && p.finalQ[0].at <= ns {
		if e := p.finalQ.pop(); p.validFinal(e) {
			p.expireKey(e.idx)
		}
	}
	if ns >= p.dRotate {
		p.rotate()
	}
}

// FlushPID decides everything pending for pid as if both watermarks had
// passed it by the horizon (the process is gone, or the session ends):
// undecided API records become launch-less, pending launches unmatched,
// waiting GPU records orphaned, and every open key is finalized. The
// process's state is then dropped.
func (j *Joiner[K]) FlushPID(pid int) {
	p := j.procs[pid]
	if p == nil {
		return
	}
	p.flush()
	delete(j.procs, pid)
	if j.last == p {
		j.last = nil
	}
}

// Flush is FlushPID for every process: the end of a session.
func (j *Joiner[K]) Flush() {
	for pid := range j.procs {
		j.FlushPID(pid)
	}
}

// Stats returns the counters, with the pending gauges as of now.
func (j *Joiner[K]) Stats() Stats {
	s := j.st
	for _, p := range j.procs {
		s.PendingLaunches += uint64(p.liveL)
		s.PendingAPIs += uint64(p.pendA)
		s.PendingGPU += uint64(p.nGPU)
		s.OpenKeys += uint64(p.nOpen)
	}
	return s
}

func (j *Joiner[K]) proc(pid int) *proc[K] {
	if j.last != nil && j.lastPID == pid {
		return j.last
	}
	p := j.procs[pid]
	if p == nil {
		p = &proc[K]{
			j: j, pid: pid, lastKI: -1, bufFree: -1,
			threads: make(map[int]*thread),
			corrs:   make(map[uint32]int32),
			keys:    make(map[K]int32),
			dCur:    make(map[dedupKey]struct{}),
			dPrev:   make(map[dedupKey]struct{}),
		}
		j.procs[pid] = p
	}
	j.last, j.lastPID = p, pid
	return p
}

func (p *proc[K]) thread(tid int) *thread {
	if p.lastThr != nil && p.lastTID == tid {
		return p.lastThr
	}
	th := p.threads[tid]
	if th == nil {
		if n := len(p.thrFree); n > 0 {
			th = p.thrFree[n-1]
			p.thrFree = p.thrFree[:n-1]
			th.prevEnd, th.frontEnd = 0, 0
		} else {
			th = &thread{}
		}
		p.threads[tid] = th
	}
	p.lastTID, p.lastThr = tid, th
	return th
}

// sweepThread drops a thread that stayed empty and idle for a whole sweep;
// dropping it at the first empty moment would reallocate it on the next
// launch, in the steady state of every live thread.
func (p *proc[K]) sweepThread(tid int, th *thread) {
	if !th.empty() {
		return
	}
	if th.touched {
		th.touched = false
		return
	}
	delete(p.threads, tid)
	if p.lastThr == th {
		p.lastThr = nil
	}
	if len(p.thrFree) < 64 {
		p.thrFree = append(p.thrFree, th)
	}
}

// keyFor returns the slot of key (creating an open one) and counts the
// launch in it.
func (p *proc[K]) keyFor(k K, t uint64) (int32, uint32) {
	ki := int32(-1)
	if p.lastKI >= 0 && p.lastK == k && p.ks[p.lastKI].gen == p.lastKG {
		ki = p.lastKI
	} else if i, ok := p.keys[k]; ok {
		ki = i
	} else {
		ki = p.newKey(k, t)
	}
	ks := &p.ks[ki]
	ks.launches++
	ks.lastLaunch = max(ks.lastLaunch, t)
	if ks.state == ksFinal {
		p.j.st.LateLaunches++
	}
	p.lastK, p.lastKI, p.lastKG = k, ki, ks.gen
	return ki, ks.gen
}

func (p *proc[K]) newKey(k K, t uint64) int32 {
	var ki int32
	if n := len(p.ksFree); n > 0 {
		ki = p.ksFree[n-1]
		p.ksFree = p.ksFree[:n-1]
	} else {
		p.ks = append(p.ks, keyState[K]{})
		ki = int32(len(p.ks) - 1)
	}
	ks := &p.ks[ki]
	ks.key, ks.state = k, ksOpen
	ks.agg.PerName = p.j.o.PerName
	p.keys[k] = ki
	p.nOpen++
	p.openQ.push(tEnt{at: satAdd(t, p.j.h), idx: ki, gen: ks.gen})
	return ki
}

func (p *proc[K]) matchLaunch(ki int32, kg uint32) {
	p.j.st.MatchedLaunches++
	if k := &p.ks[ki]; k.gen == kg {
		k.matched++
	}
}

func (p *proc[K]) newCorr(corr uint32) int32 {
	var ci int32
	if n := len(p.csFree); n > 0 {
		ci = p.csFree[n-1]
		p.csFree = p.csFree[:n-1]
	} else {
		p.cs = append(p.cs, corrState{})
		ci = int32(len(p.cs) - 1)
	}
	p.cs[ci].corr = corr
	p.cs[ci].head, p.cs[ci].tail = -1, -1
	p.corrs[corr] = ci
	return ci
}

func (p *proc[K]) freeCorr(ci int32) {
	c := &p.cs[ci]
	if cur, ok := p.corrs[c.corr]; ok && cur == ci {
		delete(p.corrs, c.corr)
	}
	c.state = csFree
	c.gen++
	p.release(c)
	p.csFree = append(p.csFree, ci)
}

// attribute joins corr ci to key (ki, kg), named by the launch at ktime
// launch, and delivers what it buffered.
func (p *proc[K]) attribute(ci, ki int32, kg uint32, launch uint64) {
	c := &p.cs[ci]
	c.launch = launch
	if k := &p.ks[ki]; k.gen == kg && k.state != ksFree {
		c.state, c.key, c.keyGen = csJoined, ki, kg
		k.corrs = append(k.corrs, c.corr)
	} else {
		c.state = csKeyGone
		p.corrQ.push(tEnt{at: satAdd(max(p.gpuWM, c.end), p.j.h), idx: ci, gen: c.gen})
	}
	p.drain(c)
}

// noLaunch decides API record ci launch-less.
func (p *proc[K]) noLaunch(ci int32) {
	c := &p.cs[ci]
	c.state = csNoLaunch
	p.j.st.APINoLaunch++
	p.corrQ.push(tEnt{at: satAdd(max(p.gpuWM, c.end), p.j.h), idx: ci, gen: c.gen})
	p.drain(c)
}

func (p *proc[K]) drain(c *corrState) {
	for i := c.head; i >= 0; i = p.buf[i].next {
		p.deliver(c, &p.buf[i].r)
	}
	p.release(c)
}

// deliver routes one GPU record of a decided corr.
func (p *proc[K]) deliver(c *corrState, r *GPURecord) {
	j := p.j
	switch c.state {
	case csJoined:
		k := &p.ks[c.key]
		if k.gen == c.keyGen && k.state == ksOpen {
			r.APIStart = c.start // before Add: active time wants it
			r.Launch = c.launch
			k.agg.Add(r)
			k.lastGPU = max(k.lastGPU, r.End)
			j.st.Joined++
			if j.o.OnJoin != nil {
				j.o.OnJoin(k.key, r)
			}
			return
		}
	case csNoLaunch:
		j.st.GPUNoLaunch++
		if j.o.OnUnjoined != nil {
			j.o.OnUnjoined(r, NoLaunch)
		}
		return
	}
	j.st.Late++
	if j.o.OnUnjoined != nil {
		j.o.OnUnjoined(r, Late)
	}
}

type bufRec struct {
	r    GPURecord
	next int32
}

func (p *proc[K]) buffer(c *corrState, r *GPURecord) {
	i := p.bufFree
	if i >= 0 {
		p.bufFree = p.buf[i].next
		p.buf[i] = bufRec{r: *r, next: -1}
	} else {
		p.buf = append(p.buf, bufRec{r: *r, next: -1})
		i = int32(len(p.buf) - 1)
	}
	if c.tail >= 0 {
		p.buf[c.tail].next = i
	} else {
		c.head = i
	}
	c.tail = i
	c.nrec++
	p.nGPU++
}

// release returns c's buffered records to the pool.
func (p *proc[K]) release(c *corrState) {
	if c.head >= 0 {
		p.buf[c.tail].next = p.bufFree
		p.bufFree = c.head
	}
	p.nGPU -= int(c.nrec)
	c.head, c.tail, c.nrec = -1, -1, 0
}

func (p *proc[K]) validWait(e tEnt) bool {
	c := &p.cs[e.idx]
	return c.gen == e.gen && c.state == csWaiting
}

func (p *proc[K]) validCorrExp(e tEnt) bool {
	c := &p.cs[e.idx]
	return c.gen == e.gen && (c.state == csNoLaunch || c.state == csKeyGone)
}

func (p *proc[K]) validOpen(e tEnt) bool {
	k := &p.ks[e.idx]
	return k.gen == e.gen && k.state == ksOpen
}

func (p *proc[K]) validFinal(e tEnt) bool {
	k := &p.ks[e.idx]
	return k.gen == e.gen && k.state == ksFinal
}

// evictWaiting gives up on corr ci's API record: its records are orphans.
func (p *proc[K]) evictWaiting(ci int32) {
	c := &p.cs[ci]
	p.nWait--
	for i := c.head; i >= 0; i = p.buf[i].next {
		p.j.st.GPUNoAPI++
		if p.j.o.OnUnjoined != nil {
			p.j.o.OnUnjoined(&p.buf[i].r, NoAPI)
		}
	}
	p.freeCorr(ci)
}

func (p *proc[K]) finalize(ki int32, forced bool) {
	j := p.j
	k := &p.ks[ki]
	k.state = ksFinal
	p.nOpen--
	s := &j.fin
	*s = KeyStats{}
	k.agg.Result(s)
	k.agg.Reset()
	s.PID, s.Launches, s.MatchedLaunches, s.Evicted = p.pid, k.launches, k.matched, forced
	j.st.KeysFinalized++
	p.finalQ.push(tEnt{at: satAdd(p.gpuWM, j.h), idx: ki, gen: k.gen})
	if j.o.OnFinal != nil {
		j.o.OnFinal(k.key, s)
	}
}

// expireKey forgets finalized key ki and its correlation ids: records for
// them arriving later look like orphans.
func (p *proc[K]) expireKey(ki int32) {
	k := &p.ks[ki]
	for _, corr := range k.corrs {
		if ci, ok := p.corrs[corr]; ok {
			if c := &p.cs[ci]; c.state == csJoined && c.key == ki && c.keyGen == k.gen {
				p.freeCorr(ci)
			}
		}
	}
	if cap(k.corrs) > 1024 {
		k.corrs = nil
	} else {
		k.corrs = k.corrs[:0]
	}
	if cur, ok := p.keys[k.key]; ok && cur == ki {
		delete(p.keys, k.key)
	}
	var zero K
	k.key, k.state = zero, ksFree
	k.gen++
	k.launches, k.matched, k.lastLaunch, k.lastGPU = 0, 0, 0, 0
	p.ksFree = append(p.ksFree, ki)
}

// seen reports whether r was seen before, remembering it otherwise.
func (p *proc[K]) seen(r *GPURecord) bool {
	d := dedupKey{start: r.Start, end: r.End, corr: r.Corr, stream: r.Stream, kind: r.Kind}
	if _, ok := p.dCur[d]; ok {
		return true
	}
	if _, ok := p.dPrev[d]; ok {
		return true
	}
	if len(p.dCur) >= p.j.maxD/2 {
		p.j.st.DedupForgotten += uint64(len(p.dPrev))
		p.rotate()
	}
	p.dCur[d] = struct{}{}
	return false
}

func (p *proc[K]) rotate() {
	p.dPrev, p.dCur = p.dCur, p.dPrev
	clear(p.dCur)
	p.dRotate = satAdd(p.gpuWM, p.j.h)
}

// caps sheds the oldest items until every cap holds. th is the thread of
// the current call, whose deques are shed first.
func (p *proc[K]) caps(th *thread) {
	j := p.j
	for p.entL > j.maxL && p.evictLaunch(th) {
	}
	for p.entA > j.maxA && p.evictAPI(th) {
	}
	for p.nGPU > j.maxG && p.shedGPU() {
	}
	for len(p.corrs) > j.maxC && p.shedCorr() {
	}
	for len(p.keys) > j.maxK && p.shedKey() {
	}
}

// nonEmpty returns th if it has entries of the wanted kind, else any
// thread that has.
func (p *proc[K]) nonEmpty(th *thread, launches bool) *thread {
	has := func(t *thread) bool {
		if launches {
			return t.lh < len(t.ls)
		}
		return t.ah < len(t.as)
	}
	if th != nil && has(th) {
		return th
	}
	for _, t := range p.threads {
		if has(t) {
			return t
		}
	}
	return nil
}

// untraced reports whether pid's launch at t was made while no API records
// were recorded (Options.Untraced).
func (j *Joiner[K]) untraced(pid int, t uint64) bool {
	return j.o.Untraced != nil && j.o.Untraced(pid, t)
}

// unmatched decides a live launch at ktime t that never got an API record;
// next is the thread's next launch, 0 if none came.
func (p *proc[K]) unmatched(pid int, t, next uint64) {
	switch {
	case p.j.untraced(pid, t):
		p.j.st.UntracedLaunches++
	case p.j.o.Straddled != nil && p.j.o.Straddled(pid, t, next):
		p.j.st.StraddledLaunches++
	default:
		p.j.st.UnmatchedLaunches++
		if f := p.j.o.OnUnmatched; f != nil {
			f(pid, t)
		}
	}
	p.liveL--
}

func (p *proc[K]) evictLaunch(th *thread) bool {
	if th = p.nonEmpty(th, true); th == nil {
		return false
	}
	if e := &th.ls[th.lh]; e.key >= 0 {
		p.unmatched(p.pid, e.t, e.next)
	}
	p.j.st.CapEvictions++
	th.lh++
	p.entL--
	p.entL -= th.trimLaunches()
	return true
}

func (p *proc[K]) evictAPI(th *thread) bool {
	if th = p.nonEmpty(th, false); th == nil {
		return false
	}
	e := th.as[th.ah]
	th.frontEnd = max(th.frontEnd, e.end)
	th.ah++
	p.entA--
	p.j.st.CapEvictions++
	if e.state == apiPending {
		p.pendA--
		if ci, ok := p.corrs[e.corr]; ok && p.cs[ci].state == csPending {
			p.noLaunch(ci)
		}
	}
	th.compactAPIs()
	return true
}

// shedGPU frees buffered GPU records: the oldest orphan group first, else
// decides launch-less an undecided API record that holds some.
func (p *proc[K]) shedGPU() bool {
	for len(p.waitQ) > 0 {
		if e := p.waitQ.pop(); p.validWait(e) {
			p.j.st.CapEvictions += uint64(p.cs[e.idx].nrec)
			p.evictWaiting(e.idx)
			return true
		}
	}
	for _, th := range p.threads {
		for i := th.ah; i < len(th.as); i++ {
			e := &th.as[i]
			if e.state != apiPending {
				continue
			}
			if ci, ok := p.corrs[e.corr]; ok && p.cs[ci].state == csPending && p.cs[ci].nrec > 0 {
				e.state = apiDead
				p.pendA--
				p.j.st.CapEvictions++
				p.noLaunch(ci)
				return true
			}
		}
	}
	return false
}

// shedCorr forgets one correlation id early, cheapest loss first: decided
// launch-less ids, then finalized keys, then orphans, then open keys (which
// are finalized early), then undecided API records.
func (p *proc[K]) shedCorr() bool {
	j := p.j
	if e, ok := popValid(&p.corrQ, p.validCorrExp); ok {
		j.st.CapEvictions++
		p.freeCorr(e.idx)
		return true
	}
	if p.shedKey() {
		return true
	}
	if e, ok := popValid(&p.waitQ, p.validWait); ok {
		j.st.CapEvictions += uint64(p.cs[e.idx].nrec)
		p.evictWaiting(e.idx)
		return true
	}
	if th := p.nonEmpty(nil, false); th != nil {
		return p.evictAPI(th)
	}
	return false
}

// shedKey forgets the finalized key closest to expiry, else finalizes the
// open key closest to its deadline.
func (p *proc[K]) shedKey() bool {
	if e, ok := popValid(&p.finalQ, p.validFinal); ok {
		p.j.st.CapEvictions++
		p.expireKey(e.idx)
		return true
	}
	if e, ok := popValid(&p.openQ, p.validOpen); ok {
		p.j.st.CapEvictions++
		p.finalize(e.idx, true)
		return true
	}
	return false
}

func popValid(h *theap, valid func(tEnt) bool) (tEnt, bool) {
	for len(*h) > 0 {
		if e := h.pop(); valid(e) {
			return e, true
		}
	}
	return tEnt{}, false
}

// flush decides everything: the process is gone or the session ended, so
// no launch or record is still to come.
func (p *proc[K]) flush() {
	for _, th := range p.threads {
		for i := th.ah; i < len(th.as); i++ {
			if e := &th.as[i]; e.state == apiPending {
				e.state = apiDead
				p.pendA--
				if ci, ok := p.corrs[e.corr]; ok && p.cs[ci].state == csPending {
					p.noLaunch(ci)
				}
			}
		}
		for i := th.lh; i < len(th.ls); i++ {
			if th.ls[i].key >= 0 {
				th.ls[i].key = -1
				p.unmatched(p.pid, th.ls[i].t, th.ls[i].next)
			}
		}
	}
	for len(p.waitQ) > 0 {
		if e := p.waitQ.pop(); p.validWait(e) {
			p.evictWaiting(e.idx)
		}
	}
	for len(p.openQ) > 0 {
		if e := p.openQ.pop(); p.validOpen(e) {
			p.finalize(e.idx, false)
		}
	}
}
