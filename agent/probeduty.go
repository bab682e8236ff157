package agent

import (
	"sort"
	"time"

	"github.com/specprof/specprof/agent/phase"
)

// Probe windows (Options.ProbeOn/ProbePeriod, `--probe-duty`): the
// libraries' uprobes are attached only ON out of every PERIOD. A uprobe hit
// costs the target its trap whatever the program does (docs/overhead.md
// gives the figures), so on launch-bound loops the only way to cost less is
// to probe fewer launches. Outside the windows no uprobe is attached and the CPU
// sampler is paused; only the process tracepoints (fork, exec, exit, openat)
// stay, and they fire on those system calls alone.
//
// A cycle is measured only when it lies wholly inside a window: a window's
// first cycle on each thread may have begun before the probes were in place,
// the cycle still open when they are removed is cut short, and a cycle with a
// call made while they went in or out may lack calls (probeEdge); all are
// left out and counted (ThreadReport.ProbeCut). Windows are told apart by the
// time of each event (the open time is taken before attaching), so events
// still in the ring buffer from an earlier window are never mistaken.

// probeWindows is the schedule and the record of the probe windows.
type probeWindows struct {
	on, period time.Duration
	open       bool
	opened     time.Time // wall time the current (or last) window opened
	opens      []uint64  // CLOCK_MONOTONIC ns of each window's open, in order
	closes     []uint64  // and of the start of its probes' removal
	openNs     int64     // time the probes were in place, closed windows
	attachNs   int64     // time spent attaching, all windows
	detachNs   int64     // time spent removing, all windows
	maxDetach  time.Duration
	start      time.Time
	exitsCut   int64 // returns of blocking calls that began before their window
	// held: a window stays open while a CUPTI library traces
	// (Options.ProbeGPUWindows); heldNs is the time it did, closed spells.
	held      bool
	heldSince time.Time
	heldNs    int64
}

// ProbeWindowStats describes probe windows in the report.
type ProbeWindowStats struct {
	OnNs     int64 `json:"on_ns"`
	PeriodNs int64 `json:"period_ns"`
	Windows  int   `json:"windows"`
	// ProbedNs is the time the probes were in place; Share its part of
	// the session.
	ProbedNs int64   `json:"probed_ns"`
	Share    float64 `json:"share"`
	// Mean time to attach, mean and longest time to remove a window's
	// probes: a window really lasts ON plus the removal.
	AttachMeanNs int64 `json:"attach_mean_ns"`
	DetachMeanNs int64 `json:"detach_mean_ns"`
	DetachMaxNs  int64 `json:"detach_max_ns"`
	// UprobeMulti: the probes were uprobe_multi links (removed in tens of
	// milliseconds) rather than perf-event uprobes (about 0.1 s each).
	UprobeMulti bool `json:"uprobe_multi"`
	// SyncExitsCut counts returns of blocking calls that began before
	// their window opened or while its probes were being removed (no
	// entry to match; not a loss).
	SyncExitsCut int64 `json:"sync_exits_cut"`
	// GPUHeldNs is the time GPU records could come (a CUPTI library was
	// awaited or traced), during which the probes stayed in place whatever
	// the schedule (Options.ProbeGPUWindows).
	GPUHeldNs int64 `json:"gpu_held_ns,omitempty"`
}

// multiProber is implemented by probes that tell how they attach.
type multiProber interface{ UprobeMulti() bool }

// samplerSwitch is implemented by probes with a CPU sampler that can pause:
// with probe windows it samples only while the probes are in place.
type samplerSwitch interface{ SetSamplerEnabled(on bool) error }

func (a *Agent) switchSampler(on bool) {
	if ss, ok := a.pr.(samplerSwitch); ok {
		if err := ss.SetSamplerEnabled(on); err != nil {
			a.log.Warn("CPU sampler not switched with the probe window", "err", err)
		}
	}
}

func newProbeWindows(on, period time.Duration) *probeWindows {
	now := time.Now()
	// The first window is open from the start: the roots are attached as
	// soon as they are added.
	return &probeWindows{on: on, period: period, open: true, opened: now, start: now, opens: []uint64{monotonicNow()}}
}

// index returns the 1-based number of the window that event time k
// belongs to (the last one opened at or before it); 0 before the first.
func (w *probeWindows) index(k uint64) int {
	return sort.Search(len(w.opens), func(i int) bool { return w.opens[i] > k })
}

// edge reports whether an event of p at time k fell while p's probes were
// going in or out. The links go in and out one by one, over milliseconds
// to tens of milliseconds: meanwhile some calls are seen and others not,
// so a cycle with such an event is incomplete, and a blocking call may have
// lost its entry probe but kept its return probe.
func (a *Agent) probeEdge(p *process, k uint64) bool {
	w := a.pw
	n := w.index(k)
	if n > 0 && n <= len(w.closes) && k >= w.closes[n-1] {
		return true
	}
	return n == p.readyWin && k < p.readyAt
}

// probesIn reports whether library probes may be attached now.
func (a *Agent) probesIn() bool { return a.pw == nil || a.pw.open }

// gpuTracing reports whether GPU records may come (Options.ProbeGPUWindows):
// no library has connected yet (until a process initializes CUDA it makes
// no CUDA call, so the probes cost nothing), or a connected one still
// traces: neither detached, nor stopped, nor done with its windows. False
// without a CUPTI receiver (GPU()). Called without a.mu.
func (a *Agent) gpuTracing() bool {
	if a.opts.ProbeGPUWindows <= 0 { // checked every 64 events: no locks unless asked for
		return false
	}
	a.mu.Lock()
	h := a.gpu
	a.mu.Unlock()
	if h == nil {
		return false
	}
	var live []int
	h.mu.Lock()
	if len(h.stats) == 0 {
		h.mu.Unlock()
		return true
	}
	for c := range h.conns {
		pid := int(c.Info().Pid)
		if s := h.stats[pid]; s == nil || s.Detaches+s.DetachRefused+s.DutyStopped == 0 {
			live = append(live, pid)
		}
	}
	h.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pid := range live {
		if d := a.duty[pid]; d == nil || d.closed < int64(a.opts.ProbeGPUWindows) {
			return true
		}
	}
	return false
}

// probeDue returns when the next window opens or the open one closes (zero
// without probe windows, or while they wait on GPU tracing: the read loop's
// poll then checks again).
func (a *Agent) probeDue() time.Time {
	w := a.pw
	if w == nil || w.held {
		return time.Time{}
	}
	if w.open {
		return w.opened.Add(w.on)
	}
	next := w.opened.Add(w.period)
	if a.opts.ProbeGPUWindows > 0 {
		// A library that connects while the probes are out traces at once:
		// notice it soon (no probe event wakes the read loop meanwhile).
		if soon := time.Now().Add(gpuConnectPoll); soon.Before(next) {
			return soon
		}
	}
	return next
}

// gpuConnectPoll is how often the read loop looks for a new CUPTI library
// between probe windows (Options.ProbeGPUWindows).
const gpuConnectPoll = 10 * time.Millisecond

// probeTick opens or closes a window when it is due; it reports whether it
// did. Called from Run's loop, without a.mu.
func (a *Agent) probeTick(now time.Time) bool {
	w := a.pw
	if w == nil {
		return false
	}
	gpu := a.gpuTracing()
	if gpu != w.held {
		a.log.Debug("probe windows wait on GPU tracing", "held", gpu, "window", len(w.opens), "open", w.open)
		a.mu.Lock() // probeStats reads these
		if !gpu {
			w.heldNs += int64(now.Sub(w.heldSince))
		} else {
			w.heldSince = now
		}
		w.held = gpu
		a.mu.Unlock()
	}
	switch {
	case w.open && !gpu && !now.Before(w.opened.Add(w.on)):
		a.closeProbeWindow()
		return true
	case !w.open && gpu:
		// A library connected while the probes were out: its records need
		// the launches' probe events. Off schedule; the next ones keep it.
		a.openProbeWindow(now)
		a.mu.Lock()
		w.opened = now
		a.mu.Unlock()
		return true
	case !w.open && !now.Before(w.opened.Add(w.period)):
		a.openProbeWindow(now)
		return true
	}
	return false
}

// closeProbeWindow removes every traced process's library probes.
func (a *Agent) closeProbeWindow() {
	w := a.pw
	if w == nil || !w.open {
		return
	}
	t0 := time.Now()
	k := monotonicNow()
	a.log.Debug("probe window closing", "window", len(w.opens))
	a.stopProbes()
	a.switchSampler(false)
	d := time.Since(t0)
	a.log.Debug("probe window closed", "window", len(w.opens), "removal", d.Round(time.Microsecond))
	a.mu.Lock()
	defer a.mu.Unlock()
	w.open = false
	w.closes = append(w.closes, k)
	w.openNs += int64(t0.Add(d).Sub(w.opened)) // in place until removed
	w.detachNs += int64(d)
	w.maxDetach = max(w.maxDetach, d)
	if d > w.on/2 {
		a.log.Warn("removing the probes took long against the probe window's ON time", "took", d.Round(time.Millisecond),
			"on", w.on, "uprobe_multi", a.uprobeMulti())
	}
}

// openProbeWindow attaches the probes of every library the traced
// processes have loaded.
func (a *Agent) openProbeWindow(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.pw
	// Events at or after this time belong to the new window.
	w.opens = append(w.opens, monotonicNow())
	w.open = true
	// Windows keep their period even when one was late (a busy read loop).
	w.opened = w.opened.Add(w.period)
	if now.Sub(w.opened) > w.period {
		w.opened = now
	}
	t0 := time.Now()
	a.switchSampler(true)
	for _, p := range a.procs {
		if p.exited {
			continue
		}
		for _, host := range sortedKeys(p.wanted) {
			lw := p.wanted[host]
			if err := a.attach(p, host, lw.path, lw.lib); err != nil {
				p.problem(err.Error())
				a.log.Error("attach probes", "pid", p.pid, "err", err)
			}
		}
	}
	w.attachNs += int64(time.Since(t0))
	a.log.Debug("probe window open", "window", len(w.opens), "attach", time.Since(t0).Round(time.Microsecond))
}

// probeCut is called for every event of thread t before it is attributed:
// the first event of a new window cuts the cycle left open by the last
// window, and the window's first cycle is cut too (it may have begun before
// the probes were in place); so are cycles with an event made while the
// probes went in or out (probeEdge).
func (a *Agent) probeCut(p *process, t *thread, ktime uint64, m *phase.Matcher) {
	if a.probeEdge(p, ktime) {
		// This cycle, and one that this event begins, are incomplete.
		t.cutCur = t.cutCur || t.inCycle
		t.cutNext = true
	}
	n := a.pw.index(ktime)
	if n == t.probeWin {
		return
	}
	if t.inCycle {
		t.cutCur = true
		a.closeCycle(p, t, m)
	}
	// A blocking call in progress when the probes went keeps its entry
	// forever (its return probe went with them).
	t.pending = t.pending[:0]
	t.probeWin = n
	t.cutNext = true
}

// probeStats reports the probe windows (nil without them).
func (a *Agent) probeStats() *ProbeWindowStats {
	w := a.pw
	if w == nil {
		return nil
	}
	s := &ProbeWindowStats{OnNs: int64(w.on), PeriodNs: int64(w.period), Windows: len(w.opens),
		ProbedNs: w.openNs, DetachMaxNs: int64(w.maxDetach), UprobeMulti: a.uprobeMulti(), SyncExitsCut: w.exitsCut,
		GPUHeldNs: w.heldNs}
	if w.held {
		s.GPUHeldNs += int64(time.Since(w.heldSince))
	}
	closed := len(w.opens)
	if w.open {
		s.ProbedNs += int64(time.Since(w.opened))
		closed--
	}
	if closed > 0 {
		s.DetachMeanNs = w.detachNs / int64(closed)
	}
	if len(w.opens) > 1 {
		s.AttachMeanNs = w.attachNs / int64(len(w.opens)-1)
	}
	if total := time.Since(w.start); total > 0 {
		s.Share = float64(s.ProbedNs) / float64(total)
	}
	return s
}

func (a *Agent) uprobeMulti() bool {
	mp, ok := a.pr.(multiProber)
	return ok && mp.UprobeMulti()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
