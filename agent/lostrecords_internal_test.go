package agent

import (
	"testing"

	"github.com/specprof/specprof/bpf"
)

// TestLostRecordsCutCycles: when a call record's LostSeq changes, records
// were lost to a full ring buffer before it. Every thread's open cycle is then
// incomplete, and so is the next one a thread begins unless one of its own
// calls came after the loss: those cycles are left out of the figures and
// counted, the others keep exact per-cycle counts.
func TestLostRecordsCutCycles(t *testing.T) {
	a, D := draftAgent(t)
	const pid, tid2 = 1 << 30, 1<<30 + 1
	var now uint64
	launch := func(tid int, cyc uint64, seq uint32) *bpf.APIEvent {
		now += 100
		return &bpf.APIEvent{Header: bpf.Header{Type: bpf.EvLaunch, PID: pid, TID: uint32(tid), Ktime: now},
			API: bpf.APILaunchKernel, LostSeq: seq,
			Py: bpf.Py{Phase: D, Flags: bpf.PyWalked, Depth: 1, CycleFrame: cyc, Frames: []uint64{0x10}, FrameAddrs: []uint64{cyc}}}
	}
	three := func(tid int, cyc uint64, seq uint32) []*bpf.APIEvent {
		return []*bpf.APIEvent{launch(tid, cyc, seq), launch(tid, cyc, seq), launch(tid, cyc, seq)}
	}
	var evs []*bpf.APIEvent
	evs = append(evs, three(pid, 0x100, 0)...)                      // A: whole
	evs = append(evs, three(tid2, 0x900, 0)...)                     // thread 2, cycle P: open at the first loss
	evs = append(evs, launch(pid, 0x200, 0), launch(pid, 0x200, 1)) // B: a loss inside it
	evs = append(evs, launch(pid, 0x200, 1))                        //
	evs = append(evs, three(pid, 0x300, 1)...)                      // C: begun after the main thread's own later call, so not cut for the first loss
	evs = append(evs, three(tid2, 0x901, 1)...)                     // thread 2's next cycle Q may have lost its first calls: cut
	evs = append(evs, three(tid2, 0x902, 1)...)                     // R: open at the second loss (and at the report)
	evs = append(evs, launch(pid, 0x400, 2), launch(pid, 0x400, 2)) // D: a second loss seen at its first call: C (open) and D cut
	evs = append(evs, three(pid, 0x500, 2)...)                      // E: whole
	evs = append(evs, launch(pid, 0x600, 2))                        // F: closes E
	handleAll(a, evs)
	r := a.Report()                                   // before Finish: F and R are still open
	want := map[int][2]int{pid: {2, 3}, tid2: {0, 2}} // main: A, E whole; B, C, D cut. Thread 2: P, Q cut
	for _, th := range r.Processes[0].Threads {
		w := want[th.TID]
		if th.Cycles != w[0] || th.LossCut != w[1] {
			t.Errorf("tid %d: %d cycles, %d with lost records; want %d and %d", th.TID, th.Cycles, th.LossCut, w[0], w[1])
		}
		for _, s := range th.Phases {
			if s.Launches != 3*int64(th.Cycles) {
				t.Errorf("tid %d %s: %d launches in %d cycles, want 3 each", th.TID, s.Phase, s.Launches, th.Cycles)
			}
		}
	}
}

// TestFailedWalkCutsCycle: a call whose frame walk failed before it reached
// a cycle frame (here an unreadable frame) cannot say whether it ends the open
// cycle or lies inside it. The open cycle and the one the thread's next call
// begins are left out and counted, not reported whole with calls missing.
func TestFailedWalkCutsCycle(t *testing.T) {
	a, D := draftAgent(t)
	const pid = 1 << 30
	var now uint64
	launch := func(cyc uint64, flags bpf.PyFlags) *bpf.APIEvent {
		now += 100
		py := bpf.Py{Phase: D, Flags: bpf.PyWalked | flags, Depth: 1, CycleFrame: cyc, Frames: []uint64{0x10}, FrameAddrs: []uint64{cyc}}
		if cyc == 0 {
			py = bpf.Py{Flags: bpf.PyWalked | flags}
		}
		return &bpf.APIEvent{Header: bpf.Header{Type: bpf.EvLaunch, PID: pid, TID: pid, Ktime: now},
			API: bpf.APILaunchKernel, Py: py}
	}
	evs := []*bpf.APIEvent{
		launch(0x100, 0), launch(0x100, 0), launch(0x100, 0), // A: whole
		launch(0x200, 0), launch(0x200, 0), // B: its third call's walk fails
		launch(0, bpf.PyReadErr),
		launch(0x200, 0),                                     // B's tail, begun after the failed call: cut
		launch(0x300, 0), launch(0x300, 0), launch(0x300, 0), // C: whole
		launch(0x400, 0), // closes C
	}
	handleAll(a, evs)
	r := a.Report()
	th := r.Processes[0].Threads[0]
	if th.Cycles != 2 || th.LossCut != 2 {
		t.Errorf("%d cycles, %d cut: want A and C whole, B and its tail cut", th.Cycles, th.LossCut)
	}
	for _, s := range th.Phases {
		if s.Launches != 6 {
			t.Errorf("%s: %d launches in the whole cycles, want 6", s.Phase, s.Launches)
		}
	}
	if r.Loss.ReadErrors != 1 {
		t.Errorf("read errors %d, want 1", r.Loss.ReadErrors)
	}
}

// draftAgent is an agent on the CPU phases preset, without probes, and the
// id of its cpu.draft phase.
func draftAgent(t *testing.T) (*Agent, uint16) {
	a, err := New(noProbes{}, Options{Preset: cpuPhasesPreset(t)})
	if err != nil {
		t.Fatal(err)
	}
	D, _ := a.matchers[false].PhaseID("cpu.draft")
	return a, D
}

// handleAll hands the events to the agent in order, as its read loop does.
func handleAll(a *Agent, evs []*bpf.APIEvent) {
	for _, e := range evs {
		a.mu.Lock()
		a.handle(e)
		a.mu.Unlock()
	}
}
