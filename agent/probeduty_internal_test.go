package agent

import (
	"sync"
	"testing"
	"time"

	"github.com/specprof/specprof/bpf"
)

// windowProbes records what probe windows do to the probes.
type windowProbes struct {
	noProbes
	mu       sync.Mutex
	attached map[string]int // path -> attaches
	detached int
	sampler  []bool // SetSamplerEnabled calls
}

func (w *windowProbes) AttachLibrary(_ int, path string, _ bpf.Library) (bpf.Attached, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.attached[path]++
	return bpf.Attached{Symbols: []string{"cuLaunchKernel"}}, nil
}

func (w *windowProbes) DetachLibraries(int) { w.mu.Lock(); w.detached++; w.mu.Unlock() }

func (w *windowProbes) SetSamplerEnabled(on bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sampler = append(w.sampler, on)
	return nil
}

// TestProbeWindowSchedule: the first window is open from the start; at its
// close the probes come out and the CPU sampler pauses; a library found
// between windows waits for the next one, which attaches every library found
// so far and resumes the sampler. Calls are then attributed by time: a cycle
// with a call made while the probes went out or in is cut, and so is each
// window's first cycle; whole cycles inside a window count.
func TestProbeWindowSchedule(t *testing.T) {
	preset := cpuPhasesPreset(t)
	pr := &windowProbes{attached: map[string]int{}}
	a, err := New(pr, Options{Preset: preset, ProbeOn: 50 * time.Millisecond, ProbePeriod: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const pid = 1 << 30
	a.mu.Lock()
	p := a.proc(pid)
	if err := a.attach(p, "/h/libcuda.so.1", "/libcuda.so.1", bpf.LibCUDA); err != nil {
		t.Fatal(err)
	}
	a.mu.Unlock()
	w := a.pw
	start := w.opened
	if a.probeTick(start.Add(49 * time.Millisecond)) {
		t.Fatal("the window closed before its ON time")
	}
	if !a.probeTick(start.Add(50*time.Millisecond)) || w.open || pr.detached != 1 {
		t.Fatalf("window 1 not closed at its ON time: open %v, %d detaches", w.open, pr.detached)
	}
	a.mu.Lock()
	if err := a.attach(p, "/h/libnccl.so.2", "/libnccl.so.2", bpf.LibNCCL); err != nil {
		t.Fatal(err)
	}
	a.mu.Unlock()
	if pr.attached["/h/libnccl.so.2"] != 0 {
		t.Fatal("a library found between windows was attached at once")
	}
	if a.probeTick(start.Add(199 * time.Millisecond)) {
		t.Fatal("the next window opened before its period")
	}
	if !a.probeTick(start.Add(200*time.Millisecond)) || !w.open {
		t.Fatal("window 2 did not open at the period")
	}
	if pr.attached["/h/libcuda.so.1"] != 2 || pr.attached["/h/libnccl.so.2"] != 1 {
		t.Errorf("attaches %v: want libcuda twice (both windows), libnccl once (window 2)", pr.attached)
	}
	if len(pr.sampler) != 2 || pr.sampler[0] || !pr.sampler[1] {
		t.Errorf("sampler switches %v: want paused at the close, resumed at the open", pr.sampler)
	}
	if s := a.probeStats(); s.Windows != 2 || s.OnNs != int64(50*time.Millisecond) || s.PeriodNs != int64(200*time.Millisecond) {
		t.Errorf("stats %+v", s)
	}

	// Attribution by time. Window 1: [open1, close1); the probes go out from
	// close1; window 2 opens at open2 and its probes are all in at ready2.
	open1, close1, open2 := w.opens[0], w.closes[0], w.opens[1]
	ready2 := p.readyAt
	if !(open1 < close1 && close1 < open2 && open2 <= ready2) {
		t.Fatalf("window times out of order: %d %d %d %d", open1, close1, open2, ready2)
	}
	D, _ := a.matchers[false].PhaseID("cpu.draft")
	launch := func(k, cyc uint64) *bpf.APIEvent {
		return &bpf.APIEvent{Header: bpf.Header{Type: bpf.EvLaunch, PID: pid, TID: pid, Ktime: k}, API: bpf.APILaunchKernel,
			Py: bpf.Py{Phase: D, Flags: bpf.PyWalked, Depth: 1, CycleFrame: cyc, Frames: []uint64{0x10}, FrameAddrs: []uint64{cyc}}}
	}
	evs := []*bpf.APIEvent{
		launch(open1+1, 0x100), launch(open1+2, 0x100), // the window's first cycle: cut
		launch(open1+3, 0x200), launch(open1+4, 0x200), // whole
		launch(open1+5, 0x300), launch(close1+1, 0x300), // a call while the probes went out: cut
		launch(ready2+1, 0x400), launch(ready2+2, 0x400), // window 2's first cycle: cut
		launch(ready2+3, 0x500), launch(ready2+4, 0x500), // whole
		launch(ready2+5, 0x600), // open at the end: cut at Finish
	}
	handleAll(a, evs)
	a.Finish()
	th := a.Report().Processes[0].Threads[0]
	if th.Cycles != 2 || th.ProbeCut != 4 {
		t.Errorf("%d cycles measured, %d cut; want 2 (0x200, 0x500) and 4", th.Cycles, th.ProbeCut)
	}
	for _, s := range th.Phases {
		if s.Launches != 4 {
			t.Errorf("%s: %d launches in the measured cycles, want 4", s.Phase, s.Launches)
		}
	}
}
