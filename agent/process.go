package agent

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/agent/proc"
	"github.com/specprof/specprof/agent/python"
	"github.com/specprof/specprof/bpf"
)

type process struct {
	pid     int
	rt      *python.Runtime
	sym     *python.Symbolizer
	matcher *phase.Matcher
	py310   bool
	pyErr   error
	classes map[uint64]phase.Class // published to BPF
	// forgotAt is when a reused code address last reset classes (ktime).
	forgotAt uint64
	libs     map[string]bool
	wanted   map[string]wantedLib // with probe windows: what each window attaches, by host path
	// With probe windows: the window in which the process's probes last
	// went in, and when they were all in place (probeEdge).
	readyWin int
	readyAt  uint64
	threads  map[int]*thread
	rep      *model.ProcessReport
	exited   bool
	probs    map[string]bool
	smp      *procSamples // CPU sampler state (sampler.go)
	dist     *distState   // the server's installed version (distinfo.go)
	attr     *attrState   // launches the rules did not attribute (attribution.go)
	tree     *procTree    // the call tree of those launches (calltree.go)

	// Cycle timelines (cycletrace.go).
	frames      map[siteKey]model.Frame
	cycleFrame  model.Frame    // the preset's cycle function, once seen
	capColls    *capturedColls // collectives captured into CUDA graphs (graphcoll.go)
	titleRead   bool
	title       string
	rank        int
	collectives bool // made NCCL calls
	devices     []model.Device
	// lastCycleEnd is the last call of the last cycle closed (any thread;
	// CLOCK_MONOTONIC ns): cycles run (requestWindows).
	lastCycleEnd uint64
	// recorded maps a CUDA event handle to the cycle in which it was last
	// recorded (cuEventRecord), for late waits (phase.Cycle.LatePhases);
	// only kept when the preset has late phases.
	recorded map[uint64]cycleRef
	// calls counts the process's hooked calls (Options.AutoProbes);
	// lastCall is the time of the latest (releaseIdleHolds).
	calls    int64
	lastCall uint64
}

// cycleRef names one cycle of one thread.
type cycleRef struct {
	t  *thread
	no int
}

// lateHold is how many later cycles a thread closes before a closed cycle
// is folded when the preset has late waits: servers run one or two steps
// ahead of the thread that waits for their output.
const lateHold = 4

// lateIdle is how long a process makes no hooked call before the cycles
// held for late waits are folded: a running server makes its late waits
// within a cycle or two, and an idle one waits for requests.
const lateIdle = time.Second

// releaseIdleHolds folds the held cycles of processes idle for lateIdle, so
// that a server's last cycles before a pause reach the figures. Called from
// the read loop without a.mu.
func (a *Agent) releaseIdleHolds() {
	now := monotonicNow()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.procs {
		m := a.matcherOf(p)
		if !m.HasLateWaits() || p.lastCall == 0 || now-p.lastCall < uint64(lateIdle) {
			continue
		}
		for _, t := range p.threads {
			held := false
			for _, cc := range t.closed {
				held = held || cc.holdLate
				cc.holdLate = false
			}
			if held {
				a.drain(p, t, m, false)
			}
		}
	}
}

// maxRecorded bounds process.recorded: events are created per batch by
// some servers and their destruction is not hooked.
const maxRecorded = 4096

func (p *process) problem(s string) {
	if p.probs == nil {
		p.probs = map[string]bool{}
	}
	if !p.probs[s] {
		p.probs[s] = true
		p.rep.Problems = append(p.rep.Problems, s)
	}
}

// phaseAcc is one phase inside the current cycle.
type phaseAcc struct {
	model.PhaseStats
	first, last uint64
}

type pendingSync struct {
	api   bpf.API
	ktime uint64
	phase uint16
	site  string
	frame model.Frame // with Options.OnCycle
	bytes int64
	// late, when set, is the earlier cycle this wait is for
	// (phase.Cycle.LatePhases): its time goes there.
	late *cycleRef
}

type thread struct {
	tid   int
	nsTID int // the id in the process's own pid namespace, when it differs (ThreadReport.NSTID)

	inCycle    bool
	cycleFrame uint64
	sawStart   bool
	sawAfter   bool
	// leftFn: a call made outside the cycle function kept the open cycle
	// (phase.Cycle.ContinuePhases, LatePhases): the function's next call
	// is a new call, so a new cycle.
	leftFn     bool
	cycleNo    int
	cycleFirst uint64
	cycleLast  uint64
	cur        map[uint16]*phaseAcc
	pending    []pendingSync
	lastPhase  uint16
	build      *cycleBuild // the open cycle's timeline (Options.OnCycle, collectives)

	win      map[uint16]*model.PhaseStats
	winFirst int
	winNs    int64
	winGPU   bool

	curKeys     map[uint16]bool              // phase keys of the open cycle sent to the joiner
	earlyGPU    map[uint16]*model.PhaseStats // GPU results that came before the cycle closed
	earlyGPUWin gpuWindow                    // their kernels' extent
	closed      []*closedCycle               // closed cycles waiting for their GPU side, in order
	byCycle     map[int]*closedCycle
	gpu         bool

	untraced    int  // cycles outside the GPU tracing windows (duty.go)
	unjoined    bool // the open cycle made a launch before the CUPTI connection was known
	gpuPartial  int  // cycles with launches before and after it: GPU figures left out
	preConn     int  // cycles with launches all before it: counted as partial once the library has connected
	gpuLost     int  // cycles with a launch whose API record never came: GPU figures left out
	earlyLost   bool // a GPU result that came before the cycle closed lacked a launch's API record
	winUntraced int  // of the current window
	total       map[uint16]*model.PhaseStats
	outside     map[uint16]*phaseAcc
	totalNs     int64
	cycles      int
	calls       int64
	resolved    int64

	smp threadSamples // CPU samples waiting for their cycle (sampler.go)

	gapPrev gapMark // the GPU end of the last cycle folded (hostgap.go)

	// Probe windows (probeduty.go): the window of the thread's last event,
	// whether the open cycle and the next one to begin are cut by a
	// window's edge, and how many cycles were left out for it.
	probeWin        int
	cutCur, cutNext bool
	probeCut        int
	// Records lost to a full ring buffer (lostRecords): the open cycle and
	// the next one to begin are incomplete, and how many were left out.
	lossCur, lossNext bool
	lossCut           int
	// bpfCycle is the last bpf.Py.CycleNo seen: a jump past the next
	// number is cycles lost whole.
	bpfCycle uint32
	// lostWhole counts them.
	lostWhole int
}

func (p *process) thread(tid int) *thread {
	t := p.threads[tid]
	if t == nil {
		t = &thread{tid: tid, cur: map[uint16]*phaseAcc{}, win: map[uint16]*model.PhaseStats{},
			curKeys: map[uint16]bool{}, earlyGPU: map[uint16]*model.PhaseStats{},
			total: map[uint16]*model.PhaseStats{}, outside: map[uint16]*phaseAcc{}}
		if own, err := proc.OwnNamespaceID(p.pid, tid); err == nil && own != tid {
			t.nsTID = own
		}
		p.threads[tid] = t
	}
	return t
}

func (a *Agent) matcherOf(p *process) *phase.Matcher {
	if p.matcher != nil {
		return p.matcher
	}
	return a.matchers[false]
}

// resolve returns the phase and cycle frame of an API event, classifying
// and publishing unknown code objects on the way.
func (a *Agent) resolve(p *process, e *bpf.APIEvent) (uint16, uint64) {
	py := &e.Py
	switch {
	case py.Flags&bpf.PyNoConfig != 0:
		a.rep.Loss.NoPython++
	case py.Flags&bpf.PyNoTstate != 0:
		a.rep.Loss.NoThreadState++
	}
	if py.Flags&bpf.PyReadErr != 0 {
		a.rep.Loss.ReadErrors++
	}
	if py.Flags&bpf.PyTruncated != 0 {
		a.rep.Loss.Truncated++
	}
	if py.Flags&bpf.PyStale != 0 {
		// The matched code object was freed and its address reused: drop
		// what we published and classify again.
		a.rep.Loss.Stale++
		// Calls made before the last reset were walked with the classes it
		// dropped: their frames are classified afresh below, with no new
		// reset (a burst of them would otherwise reset once each).
		if e.Ktime >= p.forgotAt {
			p.forgotAt = monotonicNow()
			a.pr.ForgetCode(p.pid)
			p.classes = map[uint64]phase.Class{}
			p.forgetPublished()
			// The reused address is among the frames: its name is
			// read again too, in the symbolizer and the timelines' sites.
			p.frames = nil
			if p.sym != nil {
				for _, code := range py.Frames {
					p.sym.Invalidate(code)
				}
			}
		}
		if len(py.Frames) == 0 || p.sym == nil {
			return 0, 0
		}
	} else if py.Flags&bpf.PyUnknown == 0 || p.sym == nil {
		return py.Phase, py.CycleFrame
	}
	// Walk the frames with per-code-object classes, exactly as BPF does
	// (the matcher guarantees Classify-walk == Resolve); symbolize only what
	// is new, so a backlog of warm-up events drains quickly.
	var ph uint16
	var cyc uint64
	marker := false
	for i, code := range py.Frames {
		cls, ok := p.classes[code]
		if !ok {
			cls = a.classify(p, code)
		}
		if ph != 0 {
			if cls.Cycle {
				a.noteCycleFrame(p, code)
				return ph, py.FrameAddrs[i]
			}
			continue
		}
		if cls.Phase != 0 {
			ph = cls.Phase
			if cls.AltPhase != 0 && marker {
				ph = cls.AltPhase
			}
			if cls.Cycle {
				a.noteCycleFrame(p, code)
				return ph, py.FrameAddrs[i]
			}
		} else if cls.Cycle {
			a.noteCycleFrame(p, code)
			cyc = py.FrameAddrs[i]
		}
		if cls.Marker {
			marker = true
		}
	}
	return ph, cyc
}

// classify symbolizes one code object, publishes its class to BPF and
// returns it. A code object that cannot be read is not published (BPF will
// report it again) and counts as matching nothing.
func (a *Agent) classify(p *process, code uint64) phase.Class {
	c, err := p.sym.Code(code)
	if err != nil {
		switch {
		case proc.Gone(err):
			// Its last events outlived the process (seen when a target
			// exits under load): a known loss, not a symbolizer failure.
			a.rep.Loss.ExitedUnread++
		case a.inSample:
			// A sample can stop the interpreter while it pushes a frame,
			// before the frame's fields are written: a torn stack, not a
			// symbolizer failure.
			a.rep.Loss.SampleTornFrames++
		default:
			a.rep.Loss.SymbolErrors++
		}
		a.log.Debug("symbolize code object", "pid", p.pid, "addr", fmt.Sprintf("%#x", code), "err", err)
		return phase.Class{}
	}
	a.noteModuleFile(p, c.Filename)
	cls := p.matcher.Classify(phase.Frame{Qualname: c.Qualname, Name: c.Name, Filename: c.Filename, FirstLine: c.FirstLine})
	p.classes[code] = cls
	bc := bpf.CodeClass{Phase: cls.Phase, AltPhase: cls.AltPhase, Marker: cls.Marker, Cycle: cls.Cycle,
		Volatile: volatileCode(c)}
	if cls.Phase != 0 || bc.Volatile {
		var b [8]byte
		if err := proc.ReadMem(p.pid, code+qualnameOffset(p.rt.Offsets), b[:]); err == nil {
			bc.Qualname = binary.LittleEndian.Uint64(b[:])
		}
	}
	if err := a.publish(p, code, bc); err != nil {
		p.problem(err.Error())
	}
	return cls
}

// volatileCode says whether code c is likely to be freed while its process
// runs, its address then taken by another code object: a module body is
// freed once the import is done, code compiled from a string (exec, eval,
// dataclass and torch.fx generated methods, "<string>" and the like) when
// its function goes. Functions of a source file live as long as their
// module. (A class body is freed too, but only counts when a class
// statement itself calls CUDA.)
func volatileCode(c python.Code) bool {
	return c.Name == "<module>" || strings.HasPrefix(c.Filename, "<")
}

// site names the innermost Python frame of a call ("qualname (file:line)").
func (a *Agent) site(p *process, e *bpf.APIEvent) string {
	if p.sym == nil || e.Py.LeafCode == 0 {
		return ""
	}
	c, err := p.sym.Code(e.Py.LeafCode)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s (%s:%d)", c.Qualname, c.Filename, c.FirstLine)
}

var dtypeSize = map[uint8]int64{0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}

func kindOf(t bpf.EventType) string {
	switch t {
	case bpf.EvLaunch:
		return "launch"
	case bpf.EvSyncEnter:
		return "sync"
	case bpf.EvColl:
		return "coll"
	case bpf.EvCapture:
		return "capture"
	}
	return "mark"
}

func (a *Agent) onAPI(e *bpf.APIEvent) {
	p := a.proc(int(e.PID))
	if p.rt == nil && p.pyErr == nil {
		_ = a.ensurePython(p)
	}
	t := p.thread(int(e.TID))
	if e.LostSeq != a.lostSeq {
		a.lostSeq = e.LostSeq
		a.lostRecords()
	}
	if a.pw != nil {
		a.probeCut(p, t, e.Ktime, a.matcherOf(p))
	}
	t.calls++
	p.calls++
	p.lastCall = e.Ktime
	if n := e.Py.CycleNo; n != 0 {
		// Numbers start at 1 for each thread: a first record with a
		// higher one follows cycles lost whole too.
		if n-t.bpfCycle > 1 && n-t.bpfCycle < 1<<31 {
			lost := n - t.bpfCycle - 1
			t.lostWhole += int(lost)
			a.rep.Loss.CyclesLostWhole += uint64(lost)
		}
		t.bpfCycle = n
	}
	if e.Py.Flags&(bpf.PyUnknown|bpf.PyStale) != 0 {
		t.resolved++
		a.learning = time.Now()
	}
	ph, cyc := a.resolve(p, e)
	m := a.matcherOf(p)
	// A frame walk that failed before it reached a cycle frame (unreadable
	// memory, too deep, a freed code object) cannot tell whether this call
	// ends the open cycle or lies inside it: that cycle, and one that the
	// thread's next call begins, are incomplete, as after lost records.
	walkFailed := cyc == 0 && (e.Py.Flags&(bpf.PyReadErr|bpf.PyTruncated) != 0 ||
		e.Py.Flags&bpf.PyStale != 0 && len(e.Py.Frames) == 0)
	if walkFailed {
		t.lossCur = t.lossCur || t.inCycle
	}
	// A late wait (phase.Cycle.LatePhases) is for the cycle that recorded
	// its event; made outside the cycle function it leaves the calling
	// thread's cycle as it is.
	var late *cycleRef
	if e.Type == bpf.EvSyncEnter && m.LateWait(ph) {
		late = p.lateCycle(e)
	}
	if late != nil && cyc == 0 {
		if t.inCycle {
			t.leftFn = true
		}
	} else {
		a.advanceCycle(p, t, ph, cyc, e.Ktime, m)
	}
	// This thread's lost records, if any, came before this call: a cycle
	// it begins later is whole.
	t.lossNext = walkFailed
	if e.API == bpf.APIEventRecord && m.HasLateWaits() {
		p.noteRecord(t, e.Handle)
	}
	if late != nil {
		if st := a.lateStats(late, ph, m); st != nil {
			a.onLateSync(p, t, e, ph, late, st, m)
			return
		}
		a.rep.Loss.LateWaitsTooLate++
	}

	acc := t.acc(ph, e.Ktime, m)
	// Before the join: a launch whose API record came first is matched
	// (correlate.Options.OnMatch) inside joinLaunch.
	a.noteCaptureChain(p, t, e)
	if e.Type == bpf.EvLaunch || e.API.IsLaunch() || e.API.IsCopy() {
		conn := a.gpu.connected(p.pid) // once per call: it takes the GPU handler's lock
		if e.Type == bpf.EvLaunch {
			a.noteLaunch(p, t, e, ph, conn) // before the join, which may hand out its GPU records at once
		}
		a.joinLaunch(p, t, e, ph, conn)
	}
	if e.Type == bpf.EvColl && e.API.IsCollective() {
		p.collectives = true
	}
	if a.tracing() {
		a.traceCall(p, t, e, ph, m)
	}
	ev := model.Event{PID: int(e.PID), TID: int(e.TID), Ktime: e.Ktime, Kind: kindOf(e.Type), API: e.API.String(),
		Phase: m.PhaseName(ph), Stream: e.Stream, Handle: e.Handle}
	if t.inCycle {
		ev.Cycle = t.cycleNo
	}
	switch e.Type {
	case bpf.EvLaunch:
		acc.Launches++
		if e.API == bpf.APIGraphLaunch {
			acc.GraphLaunch++
		}
	case bpf.EvSyncEnter:
		acc.Syncs++
		site := a.site(p, e)
		ev.Site = site
		if e.API.IsCopy() {
			ev.Bytes = int64(e.Arg0)
		}
		ps := pendingSync{api: e.API, ktime: e.Ktime, phase: ph, site: site, bytes: ev.Bytes}
		if a.tracing() {
			ps.frame = a.frameOf(p, e.Py.LeafCode, e.Py.LeafInstr)
		}
		t.pending = append(t.pending, ps)
	case bpf.EvColl:
		if e.API.IsCollective() {
			acc.Colls++
			dt, _, _ := e.NCCLArgs()
			sz, ok := dtypeSize[dt]
			if !ok {
				sz = 1
			}
			ev.Bytes = int64(e.Arg0) * sz
			acc.CollBytes += ev.Bytes
		} else {
			acc.Markers++
		}
	default:
		if e.API.IsCopy() {
			acc.Copies++
			ev.Kind = "copy"
			if !e.API.IsMemset() {
				ev.Bytes = int64(e.Arg0)
			}
		} else {
			acc.Markers++
		}
	}
	if a.opts.OnEvent != nil {
		a.opts.OnEvent(&ev)
	}
}

// lateCycle returns the cycle a late wait is for: the one that last
// recorded the event it synchronizes, if that was inside a cycle.
func (p *process) lateCycle(e *bpf.APIEvent) *cycleRef {
	if e.API != bpf.APIEventSync {
		return nil
	}
	r, ok := p.recorded[e.Handle]
	if !ok {
		return nil
	}
	return &r
}

// noteRecord remembers the cycle in which thread t recorded an event.
func (p *process) noteRecord(t *thread, handle uint64) {
	if !t.inCycle {
		delete(p.recorded, handle)
		return
	}
	if p.recorded == nil {
		p.recorded = map[uint64]cycleRef{}
	}
	if len(p.recorded) >= maxRecorded {
		// Events of cycles folded already can no longer take a wait.
		for h, r := range p.recorded {
			if !r.t.holds(r.no) {
				delete(p.recorded, h)
			}
		}
		if len(p.recorded) >= maxRecorded {
			clear(p.recorded)
		}
	}
	p.recorded[handle] = cycleRef{t: t, no: t.cycleNo}
}

// holds reports whether cycle no of the thread is open or closed and not
// yet folded into the figures.
func (t *thread) holds(no int) bool {
	return (t.inCycle && t.cycleNo == no) || t.byCycle[no] != nil
}

// lateStats returns the figures of phase ph in cycle r, which a late wait
// adds to: the open cycle's accumulator, or a closed cycle not yet folded;
// nil when the cycle was folded.
func (a *Agent) lateStats(r *cycleRef, ph uint16, m *phase.Matcher) *model.PhaseStats {
	t := r.t
	if t.inCycle && t.cycleNo == r.no {
		pa := t.cur[ph]
		if pa == nil {
			// No call of its own: its CPU span stays 0 (closeCycle).
			pa = &phaseAcc{PhaseStats: model.PhaseStats{Phase: m.PhaseName(ph)}}
			t.cur[ph] = pa
		}
		return &pa.PhaseStats
	}
	if cc := t.byCycle[r.no]; cc != nil {
		return cc.phase(ph, m)
	}
	return nil
}

// onLateSync counts a late wait's call in the cycle it waits for; its
// return adds the wait there (onSyncExit). Neither the cycle's CPU span
// nor its timeline take it: the wait runs while later cycles do.
func (a *Agent) onLateSync(p *process, t *thread, e *bpf.APIEvent, ph uint16, r *cycleRef, st *model.PhaseStats, m *phase.Matcher) {
	st.Syncs++
	site := a.site(p, e)
	t.pending = append(t.pending, pendingSync{api: e.API, ktime: e.Ktime, phase: ph, site: site, late: r})
	if a.opts.OnEvent != nil {
		ev := model.Event{PID: int(e.PID), TID: int(e.TID), Ktime: e.Ktime, Kind: kindOf(e.Type), API: e.API.String(),
			Phase: m.PhaseName(ph), Stream: e.Stream, Handle: e.Handle, Cycle: r.no, Site: site}
		if r.t != t {
			ev.CycleTID = r.t.tid
		}
		a.opts.OnEvent(&ev)
	}
}

func (a *Agent) onSyncExit(e *bpf.SyncExit) {
	p := a.proc(int(e.PID))
	t := p.thread(int(e.TID))
	if a.pw != nil {
		newWin := a.pw.index(e.Ktime) != t.probeWin
		a.probeCut(p, t, e.Ktime, a.matcherOf(p))
		if newWin {
			// The call began before this probe window opened: no entry
			// to match, and no loss.
			a.pw.exitsCut++
			return
		}
	}
	// Blocking calls do not nest across hooked APIs on one thread; match
	// the innermost pending entry of the same API.
	for i := len(t.pending) - 1; i >= 0; i-- {
		ps := t.pending[i]
		if ps.api != e.API {
			continue
		}
		t.pending = append(t.pending[:i], t.pending[i+1:]...)
		m := a.matcherOf(p)
		wait := int64(e.Ktime - ps.ktime)
		if ps.late != nil {
			a.lateSyncExit(e, ps, wait, m)
			return
		}
		acc := t.acc(ps.phase, e.Ktime, m)
		acc.SyncWaitNs += wait
		if a.tracing() {
			a.traceSync(p, t, ps, wait, m)
		}
		if ps.site != "" {
			if acc.SyncSites == nil {
				acc.SyncSites = map[string]int64{}
			}
			acc.SyncSites[ps.site] += wait
		}
		if t.inCycle && e.Ktime > t.cycleLast {
			t.cycleLast = e.Ktime
		}
		if a.opts.OnEvent != nil {
			ev := model.Event{PID: int(e.PID), TID: int(e.TID), Ktime: e.Ktime, Kind: "sync_exit", API: e.API.String(),
				Phase: m.PhaseName(ps.phase), WaitNs: wait, Site: ps.site}
			if t.inCycle {
				ev.Cycle = t.cycleNo
			}
			a.opts.OnEvent(&ev)
		}
		return
	}
	if a.pw != nil && a.probeEdge(p, e.Ktime) {
		a.pw.exitsCut++
		return
	}
	a.rep.Loss.UnmatchedExit++
}

// lateSyncExit adds a late wait's time to the cycle it waits for.
func (a *Agent) lateSyncExit(e *bpf.SyncExit, ps pendingSync, wait int64, m *phase.Matcher) {
	st := a.lateStats(ps.late, ps.phase, m)
	if st == nil {
		a.rep.Loss.LateWaitsTooLate++
		return
	}
	st.SyncWaitNs += wait
	if ps.site != "" {
		if st.SyncSites == nil {
			st.SyncSites = map[string]int64{}
		}
		st.SyncSites[ps.site] += wait
	}
	if a.opts.OnEvent != nil {
		ev := model.Event{PID: int(e.PID), TID: int(e.TID), Ktime: e.Ktime, Kind: "sync_exit", API: e.API.String(),
			Phase: m.PhaseName(ps.phase), WaitNs: wait, Site: ps.site, Cycle: ps.late.no}
		if ps.late.t.tid != int(e.TID) {
			ev.CycleTID = ps.late.t.tid
		}
		a.opts.OnEvent(&ev)
	}
}

// acc returns the accumulator of phase ph for the thread's current cycle,
// or the outside-cycle totals.
func (t *thread) acc(ph uint16, ktime uint64, m *phase.Matcher) *phaseAcc {
	if !t.inCycle {
		// Outside cycles there is no span to measure, only counts.
		pa := t.outside[ph]
		if pa == nil {
			pa = &phaseAcc{PhaseStats: model.PhaseStats{Phase: m.PhaseName(ph)}}
			t.outside[ph] = pa
		}
		return pa
	}
	pa := t.cur[ph]
	if pa == nil {
		pa = &phaseAcc{PhaseStats: model.PhaseStats{Phase: m.PhaseName(ph)}, first: ktime}
		t.cur[ph] = pa
	} else if pa.first == 0 { // made by a late wait (lateStats)
		pa.first = ktime
	}
	if ktime > pa.last {
		pa.last = ktime
	}
	if ktime > t.cycleLast {
		t.cycleLast = ktime
	}
	return pa
}

// advanceCycle applies the cycle rules before an event of phase ph:
// a cycle is one call of the preset's cycle function, told apart by its
// frame address and, for loops inside one call (HF), by the start phase
// coming back after other phases.
func (a *Agent) advanceCycle(p *process, t *thread, ph uint16, cyc uint64, ktime uint64, m *phase.Matcher) {
	start := m.CycleStartPhase()
	if cyc == 0 {
		if t.inCycle && m.ContinuesCycle(ph) {
			t.leftFn = true
			return
		}
		if t.inCycle {
			a.closeCycle(p, t, m)
		}
		return
	}
	newCycle := !t.inCycle || cyc != t.cycleFrame || t.leftFn
	if !newCycle && start != 0 && ph == start && t.sawAfter {
		newCycle = true
	}
	if newCycle && ph != start && m.CyclesAtStart() {
		// Before the call's first start phase: setup, outside cycles
		// (as BPF's count_cycle).
		if t.inCycle {
			a.closeCycle(p, t, m)
		}
		return
	}
	if newCycle {
		if t.inCycle {
			a.closeCycle(p, t, m)
		}
		t.cutCur, t.cutNext = t.cutNext, false
		t.lossCur, t.lossNext = t.lossNext, false
		if !p.titleRead {
			// While the process lives: its cycles may drain only after it
			// exits (CUPTI flushes at exit), when /proc no longer has it.
			p.rankAndTitle()
		}
		t.inCycle = true
		t.cycleFrame = cyc
		t.cycleNo++
		t.cycleFirst = ktime
		t.cycleLast = ktime
		t.sawStart, t.sawAfter, t.leftFn = false, false, false
	}
	if ph == start {
		t.sawStart = true
	} else if t.sawStart {
		t.sawAfter = true
	}
}

// closedCycle is a cycle whose CPU side is complete; its GPU side may still
// be arriving from CUPTI (gpuPending phase keys not finalized yet).
type closedCycle struct {
	no         int
	spanNs     int64
	phases     map[uint16]*model.PhaseStats
	gpuPending int
	gpu        bool
	// The timeline (Options.OnCycle): first and last call per phase, the
	// builder that GPU records still join, and the trace handed out.
	spans map[uint16][2]uint64
	build *cycleBuild
	trace *model.CycleTrace
	// first and last call, and the first and last GPU time of its kernels,
	// for duty-cycled GPU tracing (duty.go)
	first, last uint64
	gpuWin      gpuWindow
	// partial: some launches were made before the CUPTI connection was
	// known, others after: the GPU figures would be incomplete.
	partial bool
	// preConn: all its launches were made before a CUPTI connection was
	// known (thread.preConn).
	preConn bool
	// lost: some launch never got its CUPTI API record, so its GPU work
	// is not known: the GPU figures would be incomplete.
	lost bool
	// cut: a probe window's edge cut it (probeduty.go): left out.
	cut bool
	// lossCut: call records went missing while it was open (full ring
	// buffer): left out.
	lossCut bool
	// holdLate: the preset has late waits, which come while the next
	// cycle or two run: folded once the thread has closed lateHold cycles
	// after it (or the process ends).
	holdLate bool
}

// lostRecords: call or sync-exit records were lost to a full ring buffer
// since the last call record read. Whose is not known, so every thread's
// open cycle, and the next one each begins (its first calls may be the lost
// ones), are incomplete: left out of the figures and counted.
func (a *Agent) lostRecords() {
	for _, p := range a.procs {
		for _, t := range p.threads {
			t.lossCur = t.lossCur || t.inCycle
			t.lossNext = true
		}
	}
}

func (a *Agent) closeCycle(p *process, t *thread, m *phase.Matcher) {
	if !t.inCycle {
		return
	}
	t.inCycle = false
	if t.cycleLast > p.lastCycleEnd {
		p.lastCycleEnd = t.cycleLast
	}
	cc := &closedCycle{no: t.cycleNo, spanNs: int64(t.cycleLast - t.cycleFirst), phases: map[uint16]*model.PhaseStats{},
		first: t.cycleFirst, last: t.cycleLast, cut: t.cutCur, lossCut: t.lossCur, holdLate: m.HasLateWaits()}
	t.cutCur, t.lossCur = false, false
	if a.tracing() {
		cc.spans = make(map[uint16][2]uint64, len(t.cur))
	}
	for ph, pa := range t.cur {
		pa.Cycles = 1
		if pa.first != 0 {
			pa.CPUSpanNs = int64(pa.last - pa.first)
		}
		st := pa.PhaseStats
		cc.phases[ph] = &st
		if cc.spans != nil {
			cc.spans[ph] = [2]uint64{pa.first, pa.last}
		}
	}
	if a.tracing() {
		a.closeTrace(p, t, cc)
	} else {
		cc.build = t.build // collective kernels still to come
		t.build = nil
	}
	a.foldSamples(t, cc, m)
	t.cur = map[uint16]*phaseAcc{}
	// GPU work of this cycle is complete once every phase key that sent
	// launches to the joiner is finalized; some may already be.
	if len(t.curKeys) > 0 {
		cc.gpu = true
		for ph := range t.curKeys {
			if g := t.earlyGPU[ph]; g != nil {
				cc.phase(ph, m).AddGPU(g)
			} else {
				cc.gpuPending++
			}
		}
	}
	cc.partial = cc.gpu && t.unjoined
	// A cycle made wholly before the connection was known (seen under
	// load) has no GPU figures either; whether the process has a library
	// at all is known only later (report).
	cc.preConn = !cc.gpu && t.unjoined
	t.unjoined = false
	t.curKeys = map[uint16]bool{}
	cc.gpuWin = t.earlyGPUWin
	t.earlyGPUWin = gpuWindow{}
	cc.lost, t.earlyLost = t.earlyLost, false
	t.earlyGPU = map[uint16]*model.PhaseStats{}
	t.closed = append(t.closed, cc)
	if t.byCycle == nil {
		t.byCycle = map[int]*closedCycle{}
	}
	t.byCycle[cc.no] = cc
	a.drain(p, t, m, false)
}

func (cc *closedCycle) phase(ph uint16, m *phase.Matcher) *model.PhaseStats {
	s := cc.phases[ph]
	if s == nil {
		s = &model.PhaseStats{Phase: m.PhaseName(ph)}
		cc.phases[ph] = s
	}
	return s
}

// drain folds closed cycles whose GPU side is complete (all of them with
// force) into the window and the totals, in cycle order, and emits windows.
func (a *Agent) drain(p *process, t *thread, m *phase.Matcher, force bool) {
	for len(t.closed) > 0 {
		cc := t.closed[0]
		if cc.gpuPending > 0 && !force {
			return
		}
		if cc.holdLate && !force && t.cycleNo < cc.no+lateHold {
			return
		}
		// Its window's close has not come yet: whether the cycle was
		// traced whole is not known (its calls' API records can come
		// before the WINDOW record that closes the window).
		if cc.gpu && !force && a.windowOpen(p.pid, cc.gpuWin.to(cc.last)) {
			return
		}
		t.closed = t.closed[1:]
		delete(t.byCycle, cc.no)
		if cc.cut {
			t.probeCut++
			continue
		}
		if cc.lossCut {
			t.lossCut++
			continue
		}
		switch {
		case cc.partial:
			cc.stripGPU()
			t.gpuPartial++
			t.winUntraced++
		case cc.gpu && !a.traced(p.pid, cc.gpuWin.from(cc.first), cc.gpuWin.to(cc.last)):
			cc.stripGPU()
			t.untraced++
			t.winUntraced++
		case cc.lost:
			cc.stripGPU()
			t.gpuLost++
			t.winUntraced++
		case cc.preConn:
			t.preConn++
		}
		if t.cycles == 0 || t.winFirst == 0 {
			t.winFirst = cc.no
		}
		t.hostGaps(cc)
		if a.tracing() {
			a.finishTrace(p, t, cc, m)
		}
		t.cycles++
		t.totalNs += cc.spanNs
		t.winNs += cc.spanNs
		t.winGPU = t.winGPU || cc.gpu
		t.gpu = t.gpu || cc.gpu
		for ph, st := range cc.phases {
			for _, dst := range []map[uint16]*model.PhaseStats{t.win, t.total} {
				s := dst[ph]
				if s == nil {
					s = &model.PhaseStats{Phase: st.Phase}
					dst[ph] = s
				}
				s.Add(st)
			}
		}
		if a.opts.Interval > 0 && cc.no-t.winFirst+1 >= a.opts.Interval {
			w := &model.Window{PID: p.pid, TID: t.tid, FirstCycle: t.winFirst, LastCycle: cc.no, CycleNs: t.winNs, GPU: t.winGPU,
				Untraced: t.winUntraced,
				Phases:   sortedStats(t.win, func(id uint16) int { return a.phaseOrder(id, m) })}
			t.win = map[uint16]*model.PhaseStats{}
			t.winNs = 0
			t.winUntraced = 0
			t.winGPU = false
			t.winFirst = cc.no + 1
			if a.opts.OnWindow != nil {
				a.opts.OnWindow(w)
			}
		}
	}
}

// closeCycles closes every thread's open cycle when the process exits or
// execs: no late wait can come any more, so none is held for one.
func (p *process) closeCycles(a *Agent) {
	m := a.matcherOf(p)
	for _, t := range p.threads {
		a.closeCycle(p, t, m)
		for _, cc := range t.closed {
			cc.holdLate = false
		}
		a.drain(p, t, m, false)
	}
	p.recorded = nil
}

func (p *process) report(a *Agent) *model.ProcessReport {
	m := a.matcherOf(p)
	r := *p.rep
	r.Threads = nil
	var libProblem string
	r.GPU, libProblem = a.gpu.snapshot(p.pid)
	r.Version = a.versionCheck(p)
	r.Attribution = p.attr.report(a.gpu.connected(p.pid))
	if msg := libProblem; msg != "" {
		r.Problems = append(slices.Clip(r.Problems), msg)
	}
	if d := a.duty[p.pid]; d != nil {
		r.Duty = d.stats()
		a.logLost(p.pid, d)
	}
	order := func(id uint16) int { return a.phaseOrder(id, m) }
	conn := a.gpu.connected(p.pid)
	for _, t := range p.threads {
		partial := t.gpuPartial
		if conn { // its library connected after those cycles: their GPU work is unknown
			partial += t.preConn
		}
		r.Threads = append(r.Threads, &model.ThreadReport{TID: t.tid, NSTID: t.nsTID, Cycles: t.cycles, CycleNs: t.totalNs, GPU: t.gpu, Untraced: t.untraced, GPUPartial: partial, GPULost: t.gpuLost, ProbeCut: t.probeCut, LossCut: t.lossCut, LostWhole: t.lostWhole,
			Phases: sortedStats(t.total, order), Outside: sortedStats(outsideStats(t.outside), order), Calls: t.calls, Resolved: t.resolved})
	}
	sort.Slice(r.Threads, func(i, j int) bool { return r.Threads[i].TID < r.Threads[j].TID })
	return &r
}

func sortProcesses(ps []*model.ProcessReport) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].PID < ps[j].PID })
}

func outsideStats(m map[uint16]*phaseAcc) map[uint16]*model.PhaseStats {
	out := make(map[uint16]*model.PhaseStats, len(m))
	for k, v := range m {
		s := v.PhaseStats
		out[k] = &s
	}
	return out
}
