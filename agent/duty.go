package agent

import (
	"context"
	"log/slog"

	"github.com/specprof/specprof/agent/correlate"
	"github.com/specprof/specprof/cupti"
)

// Duty-cycled GPU tracing (SPECPROF_CUPTI_DUTY in the target, `specprof run
// --cupti-duty`): the injected library records kernels, copies, sets and
// the API and synchronization records that join them only in windows, and
// says when each opens and closes: outside the windows CUPTI does nothing
// per call. A cycle has GPU figures only when it lies wholly inside a
// window; the others keep their CPU figures (from eBPF) and are counted, and
// so are the launches made outside windows (Loss.LaunchesUntraced).

// traceWindow is one window: close 0 while it is open, and then asOf, when
// not 0, a time at which the library said it was still open.
type traceWindow struct{ open, close, asOf uint64 }

// dutyState is one process's windows, recent first-to-last.
type dutyState struct {
	windows []traceWindow
	closed  int64  // windows closed
	openNs  uint64 // total length of the closed windows
	first   uint64 // open time of the first window
	last    uint64 // close time of the latest closed window
	// Where in their window the launches without API record were made
	// (tenths of the window; debug log only): losses at the edges point at
	// the switches, losses all over at CUPTI.
	lostAt     [10]int64
	lostLogged int
}

// maxWindows bounds the windows kept per process; older ones are forgotten
// (cycles that old have been decided long before).
const maxWindows = 4096

// dutyCycled marks pid's GPU tracing as duty-cycled (its library's HELLO
// says so), before its first window arrives: until then nothing is traced.
func (a *Agent) dutyCycled(pid int) *dutyState {
	if a.duty == nil {
		a.duty = map[int]*dutyState{}
	}
	d := a.duty[pid]
	if d == nil {
		d = &dutyState{}
		a.duty[pid] = d
	}
	return d
}

// noteWindows records a batch's WINDOW records (under a.mu).
func (a *Agent) noteWindows(pid int, ws []cupti.Window) {
	if len(ws) == 0 {
		return
	}
	d := a.dutyCycled(pid)
	for _, w := range ws {
		a.log.Debug("GPU tracing window", "pid", pid, "open", w.Open, "close", w.Close, "open_as_of", w.OpenAsOf)
		if d.first == 0 || w.Open < d.first {
			d.first = w.Open
		}
		n := len(d.windows)
		if n > 0 && d.windows[n-1].open == w.Open {
			last := &d.windows[n-1]
			last.close = w.Close // the close of the open window, or 0 with its asOf
			last.asOf = max(last.asOf, w.OpenAsOf)
		} else {
			d.windows = append(d.windows, traceWindow{w.Open, w.Close, w.OpenAsOf})
		}
		if w.Close != 0 {
			d.closed++
			d.openNs += w.Close - w.Open
			d.last = max(d.last, w.Close)
		}
	}
	if len(d.windows) > maxWindows {
		d.windows = append(d.windows[:0], d.windows[len(d.windows)-maxWindows:]...)
	}
}

// traced reports whether [first, last] lies wholly inside one window of
// pid's; true when pid's GPU tracing is not duty-cycled.
func (a *Agent) traced(pid int, first, last uint64) bool {
	d := a.duty[pid]
	if d == nil {
		return true
	}
	for i := len(d.windows) - 1; i >= 0; i-- {
		w := d.windows[i]
		if w.open <= first && (w.close == 0 || last <= w.close) {
			return true
		}
		if w.close != 0 && w.close < first {
			break // windows are in time order: earlier ones end earlier still
		}
	}
	return false
}

// windowOpen reports whether the latest of pid's windows that opened at or
// before t has not closed yet, and was not said to be open still at t or
// later (as far as its records have come): whether a cycle ending at t lies
// wholly inside a window is not known yet.
func (a *Agent) windowOpen(pid int, t uint64) bool {
	d := a.duty[pid]
	if d == nil {
		return false
	}
	for i := len(d.windows) - 1; i >= 0; i-- {
		if w := d.windows[i]; w.open <= t {
			return w.close == 0 && w.asOf < t
		}
	}
	return false
}

// untraced tells the joiner whether a launch of pid at t was made outside
// the tracing windows: it gets no API record, and missing one is no loss.
func (a *Agent) untraced(pid int, t uint64) bool { return !a.traced(pid, t, t) }

// straddled tells the joiner whether pid's launch at t, made inside a window
// and left without API record, may have been in its call when the window
// closed: the window has closed and the thread's next launch (next; 0: none)
// came after the close. The library waits for the calls in progress before
// it stops the API records, but a call whose thread was preempted between
// the launch probe and CUPTI's entry callback is not in progress yet (the
// likely cause of 1 launch in 20-40 runs of 45,000 on a loaded 2-core
// machine).
func (a *Agent) straddled(pid int, t, next uint64) bool {
	d := a.duty[pid]
	if d == nil {
		return false
	}
	for i := len(d.windows) - 1; i >= 0; i-- {
		if w := d.windows[i]; w.open <= t {
			return w.close != 0 && t <= w.close && (next == 0 || next > w.close)
		}
	}
	return false
}

// logLost logs where in their windows pid's launches without API record
// were made (debug).
func (a *Agent) logLost(pid int, d *dutyState) {
	if d.lostAt != [10]int64{} {
		a.log.Debug("launches without CUPTI API record by tenth of their window", "pid", pid, "tenths", d.lostAt)
	}
}

func (a *Agent) noteLost(pid int, t uint64) {
	d := a.duty[pid]
	if d == nil || !a.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	for i := len(d.windows) - 1; i >= 0; i-- {
		w := d.windows[i]
		if w.open > t || (w.close != 0 && w.close < t) {
			continue
		}
		if w.close == 0 {
			return // still open: its length is unknown
		}
		d.lostAt[min(9, (t-w.open)*10/max(1, w.close-w.open))]++
		if d.lostLogged < 20 {
			d.lostLogged++
			a.log.Debug("launch without CUPTI API record inside a window", "pid", pid, "t", t,
				"window_open", w.open, "since_open_us", (t-w.open)/1000, "to_close_us", (w.close-t)/1000)
		}
		return
	}
}

// gpuWindow is the extent of a cycle's kernels on the GPU. A cycle counts
// as traced only when its GPU work, too, lies inside the window: kernels
// still running when CUPTI's kernel tracing is switched off can come with
// times that do not describe them (graph replays in flight at a window's
// close, on real hardware).
type gpuWindow struct{ first, last uint64 }

func (w *gpuWindow) add(ks *correlate.KeyStats) {
	if ks.Kernels+ks.Graphs == 0 {
		return
	}
	if w.first == 0 || ks.FirstStart < w.first {
		w.first = ks.FirstStart
	}
	w.last = max(w.last, ks.LastEnd)
}

// from and to widen the CPU interval [first, last] to the GPU work.
func (w gpuWindow) from(first uint64) uint64 {
	if w.first != 0 && w.first < first {
		return w.first
	}
	return first
}

func (w gpuWindow) to(last uint64) uint64 { return max(last, w.last) }

// stripGPU removes the GPU figures of a cycle outside the tracing windows:
// its launches were joined, but their GPU work was not recorded.
func (cc *closedCycle) stripGPU() {
	cc.gpu = false
	for _, st := range cc.phases {
		st.GPUCycles, st.GPUKernels, st.GPUBusyNs, st.GPUSpanNs, st.GPUKernelNs = 0, 0, 0, 0, 0
		st.GPUMemcpys, st.GPUMemcpyBytes, st.GPUMemcpyNs, st.CollGPUNs = 0, 0, 0, 0
		st.GPUMemsets, st.GPUMemsetBytes = 0, 0
		st.GPUGraphs, st.GPUGraphNs, st.GPUActiveNs, st.GPUElapsedNs = 0, 0, 0, 0
		st.GPUHostGapNs, st.gpuFirst, st.gpuLast = 0, 0, 0
	}
	if cc.build != nil {
		for _, pt := range cc.build.phases {
			pt.GPU = nil
		}
		for ph := range cc.build.collK {
			delete(cc.build.collK, ph)
		}
	}
}

// DutyStats describes duty-cycled GPU tracing of one process.
type DutyStats struct {
	Windows  int64   `json:"windows"`   // tracing windows, the one still open included
	WindowNs uint64  `json:"window_ns"` // their total length (the open one's up to the last word that it was open)
	Share    float64 `json:"share"`     // of the time from the first window's open to the last close or word
	// StillOpen: the last window had not closed when its records ended (the
	// process exited in it, or stopped making the synchronising calls at
	// which the library closes windows).
	StillOpen bool `json:"still_open,omitempty"`
}

func (d *dutyState) stats() *DutyStats {
	s := &DutyStats{Windows: d.closed, WindowNs: d.openNs}
	end := d.last
	if n := len(d.windows); n > 0 && d.windows[n-1].close == 0 {
		w := d.windows[n-1]
		s.Windows++
		s.StillOpen = true
		if w.asOf > w.open {
			s.WindowNs += w.asOf - w.open
			end = max(end, w.asOf)
		}
	}
	if end > d.first {
		s.Share = float64(s.WindowNs) / float64(end-d.first)
	}
	return s
}
