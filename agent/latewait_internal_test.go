package agent

import (
	"testing"

	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/bpf"
)

// stepPreset: one cycle is Runner.execute_model plus the following
// Runner.sample_tokens (continue_phases), and Output.get_output waits for
// the cycle that recorded its event (late_phases).
const stepPreset = `
name: steps
phases: [step, sample, wait]
cycle:
  qualname: '^Runner\.execute_model$'
  start_phase: step
  continue_phases: [sample]
  late_phases: [wait]
rules:
  - {phase: sample, qualname: '^Runner\.sample_tokens$'}
  - {phase: step, qualname: '^Runner\.execute_model$'}
  - {phase: wait, qualname: '^Output\.get_output$'}
`

type stepEvents struct {
	pid                uint32
	now                uint64
	step, sample, wait uint16
	evs                []any
}

func (s *stepEvents) call(tid uint32, typ bpf.EventType, api bpf.API, ph uint16, cyc, handle uint64) {
	s.now += 100
	py := bpf.Py{Phase: ph, Flags: bpf.PyWalked, Depth: 1, CycleFrame: cyc}
	s.evs = append(s.evs, &bpf.APIEvent{Header: bpf.Header{Type: typ, PID: s.pid, TID: tid, Ktime: s.now},
		API: api, Handle: handle, Py: py})
}

func (s *stepEvents) launch(tid uint32, ph uint16, cyc uint64) {
	s.call(tid, bpf.EvLaunch, bpf.APILaunchKernel, ph, cyc, 0)
}

func (s *stepEvents) record(tid uint32, ph uint16, cyc, ev uint64) {
	s.call(tid, bpf.EvMark, bpf.APIEventRecord, ph, cyc, ev)
}

// waitFor is a cuEventSynchronize of wait ns.
func (s *stepEvents) waitFor(tid uint32, ph uint16, cyc, ev uint64, wait uint64) {
	s.call(tid, bpf.EvSyncEnter, bpf.APIEventSync, ph, cyc, ev)
	s.now += wait
	s.evs = append(s.evs, &bpf.SyncExit{Header: bpf.Header{Type: bpf.EvSyncExit, PID: s.pid, TID: tid, Ktime: s.now}, API: bpf.APIEventSync})
}

func (s *stepEvents) handle(a *Agent) {
	for _, e := range s.evs {
		a.mu.Lock()
		a.handle(e)
		a.mu.Unlock()
	}
}

func stepAgent(t *testing.T) (*Agent, *stepEvents, *[]Event) {
	t.Helper()
	p, err := phase.LoadRules([]byte(stepPreset), "steps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	a, err := New(noProbes{}, Options{Preset: p, OnEvent: func(e *Event) { events = append(events, *e) }})
	if err != nil {
		t.Fatal(err)
	}
	m := a.matchers[false]
	s := &stepEvents{pid: 1 << 30}
	s.step, _ = m.PhaseID("step")
	s.sample, _ = m.PhaseID("sample")
	s.wait, _ = m.PhaseID("wait")
	return a, s, &events
}

func phaseOf(r *ThreadReport, name string) *PhaseStats {
	for _, s := range r.Phases {
		if s.Phase == name {
			return s
		}
	}
	return &PhaseStats{}
}

// TestContinueAndLateWait: execute_model + sample_tokens form one cycle
// even though execute_model's frame address is reused, and a wait on
// another thread, and one on the main thread a cycle later, go to the
// cycle that recorded their events.
func TestContinueAndLateWait(t *testing.T) {
	a, s, events := stepAgent(t)
	main, out := s.pid, s.pid+1
	const frame = 0x100 // execute_model's frame, reused by every call
	for c := uint64(1); c <= 4; c++ {
		s.launch(main, s.step, frame)
		s.launch(main, s.step, frame)
		s.launch(main, s.sample, 0) // sample_tokens: continues the cycle
		s.record(main, s.sample, 0, 0x1000+c)
		if c >= 2 {
			// The output thread waits for the previous cycle's event,
			// and so does the main thread's own result processing.
			s.waitFor(out, s.wait, 0, 0x1000+c-1, 50)
			s.waitFor(main, s.wait, 0, 0x1000+c-1, 7)
		}
	}
	s.handle(a)
	a.Finish()
	r := a.Report()
	var mt, ot *ThreadReport
	for _, th := range r.Processes[0].Threads {
		switch th.TID {
		case int(main):
			mt = th
		case int(out):
			ot = th
		}
	}
	if mt == nil || mt.Cycles != 4 {
		t.Fatalf("main thread: %+v, want 4 cycles", mt)
	}
	if st := phaseOf(mt, "step"); st.Launches != 8 {
		t.Errorf("step: %d launches, want 8", st.Launches)
	}
	if st := phaseOf(mt, "sample"); st.Launches != 4 {
		t.Errorf("sample: %d launches in cycles, want 4 (sample_tokens continues its cycle)", st.Launches)
	}
	if st := phaseOf(mt, "wait"); st.Syncs != 6 || st.SyncWaitNs != 3*57 || st.CPUSpanNs != 0 {
		t.Errorf("wait in the main thread's cycles: %d syncs, %d ns waited, span %d; want 6, %d, 0", st.Syncs, st.SyncWaitNs, st.CPUSpanNs, 3*57)
	}
	if ot != nil && (ot.Cycles != 0 || len(ot.Outside) != 0) {
		t.Errorf("output thread: %d cycles, outside %+v; its waits belong to the main thread's cycles", ot.Cycles, ot.Outside)
	}
	if r.Loss.LateWaitsTooLate != 0 {
		t.Errorf("%d late waits too late", r.Loss.LateWaitsTooLate)
	}
	// Every event names its cycle: the waits the cycle before the caller's.
	for _, e := range *events {
		if e.Phase == "wait" {
			want := 0
			if e.TID == int(out) {
				want = int(main)
			}
			if e.CycleTID != want || e.Cycle < 1 || e.Cycle > 3 {
				t.Errorf("%s %s at %d: cycle %d of tid %d, want cycle 1-3 of tid %d", e.Kind, e.API, e.Ktime, e.Cycle, e.CycleTID, want)
			}
			continue
		}
		if e.TID != int(main) || e.Cycle < 1 {
			t.Errorf("%s %s in %s at %d: cycle %d", e.Kind, e.API, e.Phase, e.Ktime, e.Cycle)
		}
	}
}

// TestLateWaitTooLate: a wait for a cycle already folded into the figures
// (held only until its thread has closed lateHold cycles after it) is counted.
func TestLateWaitTooLate(t *testing.T) {
	a, s, _ := stepAgent(t)
	main := s.pid
	for c := uint64(1); c <= lateHold+2; c++ {
		s.launch(main, s.step, 0x100)
		s.record(main, s.sample, 0, 0x1000+c)
	}
	s.waitFor(main, s.wait, 0, 0x1001, 5) // cycle 1, folded when cycle 1+lateHold closed
	s.handle(a)
	a.Finish()
	r := a.Report()
	if r.Loss.LateWaitsTooLate != 1 {
		t.Errorf("late waits too late: %d, want 1", r.Loss.LateWaitsTooLate)
	}
}

// TestContinuePhasesValidated: continue/late phases must be declared
// phases, not the start phase, and listed once.
func TestContinuePhasesValidated(t *testing.T) {
	for _, bad := range []string{
		"continue_phases: [nope]",
		"continue_phases: [step]",
		"continue_phases: [sample]\n  late_phases: [sample]",
		"late_phases: [other]",
	} {
		y := "phases: [step, sample]\ncycle:\n  qualname: '^f$'\n  start_phase: step\n  " + bad + "\nrules:\n  - {phase: sample, qualname: '^g$'}\n  - {phase: step, qualname: '^f$'}\n"
		if _, err := phase.LoadRules([]byte(y), "x.yaml"); err == nil {
			t.Errorf("%q accepted", bad)
		} else {
			t.Logf("%s: %v", bad, err)
		}
	}
}

// TestBeforeStartOutside: with before_start outside, a cycle-function call
// holding a loop of cycles opens its first at the first start phase; the
// setup before it is outside cycles.
func TestBeforeStartOutside(t *testing.T) {
	p, err := phase.LoadRules([]byte(`
name: loop
phases: [draft, verify, setup]
cycle: {qualname: '^G\._assisted_decoding$', start_phase: draft, before_start: outside}
rules:
  - {phase: draft, qualname: '^G\.get_candidates$'}
  - {phase: verify, qualname: '^M\.forward$'}
  - {phase: setup, qualname: '^G\._assisted_decoding$'}
`), "loop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	a, err := New(noProbes{}, Options{Preset: p, OnEvent: func(e *Event) { events = append(events, *e) }})
	if err != nil {
		t.Fatal(err)
	}
	m := a.matchers[false]
	draft, _ := m.PhaseID("draft")
	verify, _ := m.PhaseID("verify")
	setup, _ := m.PhaseID("setup")
	s := &stepEvents{pid: 1 << 30}
	s.launch(s.pid, setup, 0x100) // torch.ones before the loop
	s.launch(s.pid, setup, 0x100)
	for c := 0; c < 3; c++ {
		s.launch(s.pid, draft, 0x100)
		s.launch(s.pid, verify, 0x100)
		s.launch(s.pid, setup, 0x100) // the loop tail: in the cycle
	}
	s.handle(a)
	a.Finish()
	th := a.Report().Processes[0].Threads[0]
	if th.Cycles != 3 {
		t.Errorf("%d cycles, want 3", th.Cycles)
	}
	if st := phaseOf(th, "setup"); st.Launches != 3 {
		t.Errorf("setup in cycles: %d launches, want the 3 loop tails", st.Launches)
	}
	for i, e := range events {
		if want := i >= 2; (e.Cycle != 0) != want {
			t.Errorf("call %d (%s): cycle %d", i, e.Phase, e.Cycle)
		}
	}
}
