package agent

import (
	"log/slog"
	"testing"

	"github.com/specprof/specprof/agent/correlate"
	"github.com/specprof/specprof/cupti"
)

// TestTraced: a cycle has GPU figures only when it lies wholly inside one
// tracing window; an open window extends to now; a process without windows
// is traced all the time; the window share is over the windowed time.
func TestTraced(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	if !a.traced(1, 10, 20) {
		t.Fatal("no windows: traced")
	}
	a.noteWindows(1, []cupti.Window{{Open: 100, Close: 0}})
	a.noteWindows(1, []cupti.Window{{Open: 100, Close: 200}, {Open: 400, Close: 0}})
	cases := []struct {
		first, last uint64
		want        bool
	}{
		{100, 200, true}, {120, 150, true}, {90, 150, false}, {150, 250, false}, {250, 300, false},
		{400, 10_000, true}, // the open window
		{350, 450, false},
	}
	for _, c := range cases {
		if got := a.traced(1, c.first, c.last); got != c.want {
			t.Errorf("[%d, %d]: traced %v, want %v", c.first, c.last, got, c.want)
		}
	}
	a.noteWindows(1, []cupti.Window{{Open: 400, Close: 500}})
	d := a.duty[1]
	if len(d.windows) != 2 || d.windows[1].close != 500 {
		t.Fatalf("windows %+v", d.windows)
	}
	if s := d.stats(); s.Windows != 2 || s.WindowNs != 200 || s.Share != 0.5 {
		t.Errorf("stats %+v", s)
	}
	if !a.traced(2, 1, 2) {
		t.Error("another process without windows: traced")
	}
}

// TestGPUWindow: a cycle's extent for the window check covers its kernels
// (and whole-graph executions) on the GPU as well as its calls; copies-only
// keys do not move it.
func TestGPUWindow(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	a.noteWindows(1, []cupti.Window{{Open: 100, Close: 200}})
	var w gpuWindow
	w.add(&correlate.KeyStats{Memcpys: 1})
	if w.from(120) != 120 || w.to(150) != 150 {
		t.Fatalf("no kernels: %+v", w)
	}
	w.add(&correlate.KeyStats{Kernels: 2, FirstStart: 130, LastEnd: 180})
	if !a.traced(1, w.from(120), w.to(150)) {
		t.Error("GPU work inside the window: not traced")
	}
	w.add(&correlate.KeyStats{Graphs: 1, FirstStart: 160, LastEnd: 260})
	if a.traced(1, w.from(120), w.to(150)) {
		t.Error("a graph still running after the window closed: traced")
	}
	var early gpuWindow
	early.add(&correlate.KeyStats{Kernels: 1, FirstStart: 90, LastEnd: 110})
	if a.traced(1, early.from(120), early.to(150)) {
		t.Error("a kernel that started before the window opened: traced")
	}
}

// TestWindowOpenAsOf: a cycle inside an open window waits for its close,
// unless the library has said the window was still open after the cycle's
// end; word of an older time changes nothing, and a window's close settles it.
func TestWindowOpenAsOf(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	if a.windowOpen(1, 50) {
		t.Fatal("no windows: nothing to wait for")
	}
	a.noteWindows(1, []cupti.Window{{Open: 100}})
	if !a.windowOpen(1, 150) || a.windowOpen(1, 90) {
		t.Fatal("open window: a cycle ending inside it waits, one ending before it does not")
	}
	a.noteWindows(1, []cupti.Window{{Open: 100, OpenAsOf: 300}})
	for _, c := range []struct {
		end  uint64
		wait bool
	}{{150, false}, {300, false}, {301, true}, {10_000, true}} {
		if got := a.windowOpen(1, c.end); got != c.wait {
			t.Errorf("open as of 300, cycle ending at %d: wait %v, want %v", c.end, got, c.wait)
		}
	}
	if !a.traced(1, 120, 250) {
		t.Error("a cycle inside the window, open as of 300: not traced")
	}
	if st := a.duty[1].stats(); st.Windows != 1 || !st.StillOpen || st.WindowNs != 200 || st.Share != 1 {
		t.Errorf("open window's stats %+v: want one, still open, 200 ns long", st)
	}
	a.noteWindows(1, []cupti.Window{{Open: 100, OpenAsOf: 200}}) // out of order: keeps 300
	if a.windowOpen(1, 250) {
		t.Error("an older asOf moved the window's back")
	}
	a.noteWindows(1, []cupti.Window{{Open: 100, Close: 400}})
	if a.windowOpen(1, 10_000) || a.traced(1, 350, 450) || !a.traced(1, 350, 399) {
		t.Error("closed at 400")
	}
	if d := a.duty[1]; len(d.windows) != 1 || d.closed != 1 {
		t.Errorf("heartbeats made windows of their own: %+v", d.windows)
	}
	if st := a.duty[1].stats(); st.Windows != 1 || st.StillOpen || st.WindowNs != 300 {
		t.Errorf("closed window's stats %+v", st)
	}
}

// TestStraddled: a launch without record made inside a closed window may
// have run past its close only when its thread's next launch came after
// the close (or none came); not in an open window, nor outside windows, nor
// in a process without windows.
func TestStraddled(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	if a.straddled(1, 150, 0) {
		t.Fatal("no windows: not straddled")
	}
	a.noteWindows(1, []cupti.Window{{Open: 100, Close: 200}, {Open: 400, Close: 0}})
	cases := []struct {
		t, next uint64
		want    bool
	}{
		{190, 250, true}, {190, 0, true}, {190, 195, false}, {190, 200, false},
		{150, 500, true}, // a long call: its thread made nothing else in the window
		{250, 0, false},  // outside: untraced, not straddled
		{450, 0, false},  // the open window: records still on
	}
	for _, c := range cases {
		if got := a.straddled(1, c.t, c.next); got != c.want {
			t.Errorf("launch at %d, next %d: straddled %v, want %v", c.t, c.next, got, c.want)
		}
	}
}
