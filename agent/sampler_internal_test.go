package agent

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/internal/testenv"
)

// noProbes stands in for the BPF side: the sampler logic is driven with
// handle directly.
type noProbes struct{}

func (noProbes) Read() (any, error)                            { return nil, errors.New("no probes") }
func (noProbes) Track(int, bool) error                         { return nil }
func (noProbes) SetPyConfig(int, bpf.PyConfig) error           { return nil }
func (noProbes) SetCodeClass(int, uint64, bpf.CodeClass) error { return nil }
func (noProbes) ForgetCode(int)                                {}
func (noProbes) Forget(int)                                    {}
func (noProbes) AttachLibrary(int, string, bpf.Library) (bpf.Attached, error) {
	return bpf.Attached{}, nil
}
func (noProbes) DetachLibraries(int)                      {}
func (noProbes) Lost() (bpf.Lost, error)                  { return bpf.Lost{Sample: 2}, nil }
func (noProbes) SetDeadline(time.Time)                    {}
func (noProbes) Ungate(int) (bool, error)                 { return true, nil }
func (noProbes) TrackedPIDs() ([]int, error)              { return nil, nil }
func (noProbes) IsTracked(int) bool                       { return false }
func (noProbes) ThreadCycles() ([]bpf.ThreadCycle, error) { return nil, nil }

// cpuPhasesPreset loads testdata/workloads/cpu_phases.yaml (phases
// cpu.draft and cpu.verify inside a cycle function).
func cpuPhasesPreset(t *testing.T) *phase.Preset {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	preset, err := phase.LoadRulesFile(filepath.Join(root, "testdata/workloads/cpu_phases.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return preset
}

// TestSampleCycles drives the cycle rules for samples: samples inside the
// open call of the cycle function count in its cycle; samples taken before
// a cycle's first call (no cycle open, or its start phase coming back) wait
// outside cycles and move into that cycle when it closes; samples outside
// the cycle function stay outside cycles; samples without a Python stack
// count only in the sampler's totals.
func TestSampleCycles(t *testing.T) {
	preset := cpuPhasesPreset(t)
	var samples []*model.CPUSample
	a, err := New(noProbes{}, Options{Preset: preset, OnSample: func(s *model.CPUSample) { samples = append(samples, s) }})
	if err != nil {
		t.Fatal(err)
	}
	m := a.matchers[false]
	D, _ := m.PhaseID("cpu.draft")
	V, _ := m.PhaseID("cpu.verify")
	const pid, frame, period = 1 << 30, 0x7000, 1000
	var now uint64
	py := func(ph uint16, cyc uint64) bpf.Py {
		return bpf.Py{Phase: ph, Flags: bpf.PyWalked, Depth: 3, CycleFrame: cyc, Frames: []uint64{0x10, 0x20, 0x30},
			FrameAddrs: []uint64{0x1, 0x2, 0x3}}
	}
	hdr := func(typ bpf.EventType) bpf.Header {
		now += 100
		return bpf.Header{Type: typ, PID: pid, TID: pid, Ktime: now}
	}
	sample := func(ph uint16, cyc uint64) *bpf.Sample {
		return &bpf.Sample{Header: hdr(bpf.EvSample), PeriodNs: period, UserIP: 0, Py: py(ph, cyc)}
	}
	launch := func(ph uint16, cyc uint64) *bpf.APIEvent {
		return &bpf.APIEvent{Header: hdr(bpf.EvLaunch), API: bpf.APILaunchKernel, Py: py(ph, cyc)}
	}
	steps := []struct {
		ev    any
		cycle int // of the sample (OnSample)
	}{
		{sample(0, 0), 0},      // outside the cycle function
		{sample(D, frame), 1},  // before cycle 1's first call
		{launch(D, frame), 0},  // cycle 1 opens
		{sample(D, frame), 1},  //
		{launch(V, frame), 0},  //
		{sample(V, frame), 1},  //
		{sample(V, frame), 1},  //
		{sample(D, frame), 2},  // the start phase again: cycle 2, before its first call
		{launch(D, frame), 0},  // cycle 1 closes, 2 opens
		{sample(D, 0x9000), 3}, // another call of the cycle function: cycle 3
		{launch(0, 0), 0},      // outside the cycle function: cycle 2 closes
		{sample(V, frame), 3},  // no cycle open: the next one
		{&bpf.Sample{Header: hdr(bpf.EvSample), PeriodNs: period, Py: bpf.Py{Flags: bpf.PyNoTstate}}, 0},
	}
	for i, s := range steps {
		a.mu.Lock()
		a.handle(s.ev)
		a.mu.Unlock()
		if _, ok := s.ev.(*bpf.Sample); ok {
			got := samples[len(samples)-1]
			if got.Cycle != s.cycle {
				t.Errorf("step %d: sample in cycle %d, want %d", i, got.Cycle, s.cycle)
			}
		}
	}
	a.Finish()
	r := a.Report()
	th := r.Processes[0].Threads[0]
	if th.Cycles != 2 {
		t.Fatalf("%d cycles, want 2", th.Cycles)
	}
	want := map[string]int64{"cpu.draft": 3, "cpu.verify": 2} // cycles 1 and 2
	for _, s := range th.Phases {
		if s.CPUSamples != want[s.Phase] || s.CPUNs != want[s.Phase]*period {
			t.Errorf("phase %s in cycles: %d samples, %d ns; want %d", s.Phase, s.CPUSamples, s.CPUNs, want[s.Phase])
		}
		delete(want, s.Phase)
	}
	if len(want) > 0 {
		t.Errorf("phases missing from the cycles: %v", want)
	}
	// Outside: the sample outside the cycle function, and those waiting
	// for cycle 3, which never opened.
	wantOut := map[string]int64{"other": 1, "cpu.draft": 1, "cpu.verify": 1}
	for _, s := range th.Outside {
		if s.CPUSamples != wantOut[s.Phase] {
			t.Errorf("phase %s outside cycles: %d samples, want %d", s.Phase, s.CPUSamples, wantOut[s.Phase])
		}
		delete(wantOut, s.Phase)
	}
	if len(wantOut) > 0 {
		t.Errorf("phases missing outside cycles: %v", wantOut)
	}
	if r.CPU.Samples != 9 || r.CPU.Python != 8 || r.CPU.NoThreadState != 1 || r.CPU.CPUNs != 9*period {
		t.Errorf("sampler totals %+v", r.CPU)
	}
	if r.Loss.SamplesLost != 2 {
		t.Errorf("lost samples %d, want the probes' 2", r.Loss.SamplesLost)
	}
	if len(samples) != 9 || samples[len(samples)-1].Stack != nil || samples[len(samples)-1].Phase != "other" {
		t.Errorf("%d samples delivered; last %+v", len(samples), samples[len(samples)-1])
	}
}
