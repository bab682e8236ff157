package agent

import "testing"

// TestAutoProbes: the probes stay in place for a process whose hooked
// calls cost it less than the budget, and go into windows sized to the
// budget once one's calls would cost more; processes that run no cycles
// are not measured.
func TestAutoProbes(t *testing.T) {
	a, err := New(noProbes{}, Options{Preset: cpuPhasesPreset(t), AutoProbes: true, MaxOverhead: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	now := a.pw.auto.last
	step := func(calls map[int]int64, cycled bool) bool {
		for pid, n := range calls {
			p := a.proc(pid)
			p.calls += n
			if cycled {
				p.lastCycleEnd += 1000
			}
		}
		now = now.Add(autoEvery)
		return a.autoDecide(now)
	}
	step(map[int]int64{1 << 30: 0, 1<<30 + 1: 0}, true) // first sight: no rate yet
	// 1,000 calls/s: 0.33 % of the time; 20,000 calls/s outside cycles (warm-up).
	if step(map[int]int64{1 << 30: 2000}, true) || step(map[int]int64{1<<30 + 1: 40000}, false) {
		t.Fatal("windows chosen below the budget")
	}
	if r := a.autoReport(); r.InWindows || r.Worst.PID != 1<<30 {
		t.Errorf("report %+v: want probes in place, worst the cycling process", r)
	}
	// 20,000 calls/s while cycling: 6.6 %.
	if !step(map[int]int64{1<<30 + 1: 40000}, true) {
		t.Fatal("no windows at 6.6 % against a 2 % budget")
	}
	// 0.825 s would give the budget by the call rate; the windows'
	// own cost keeps them autoProbeMinPeriod apart at least.
	if a.pw.period != autoProbeMinPeriod {
		t.Errorf("period %v, want %v", a.pw.period, autoProbeMinPeriod)
	}
	if r := a.autoReport(); !r.InWindows || r.Worst.PID != 1<<30+1 || r.Window == "" {
		t.Errorf("report %+v", r)
	}
}
