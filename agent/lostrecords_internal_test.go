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
	preset := cpuPhasesPreset(t)
	a, err := New(noProbes{}, Options{Preset: preset})
	if err != nil {
		t.Fatal(err)
	}
	D, _ := a.matchers[false].PhaseID("cpu.draft")
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
	for _, e := range evs {
		a.mu.Lock()
		a.handle(e)
		a.mu.Unlock()
	}
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
