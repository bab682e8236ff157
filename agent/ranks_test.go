package agent

import (
	"fmt"
	"testing"

	"github.com/specprof/specprof/model"
)

// TestRanks: collectives of two ranks are compared by cycle and order; the
// rank whose kernel starts last is the straggler, by how much it is late;
// a cycle is held until every rank has it, then both ranks' are handed on
// together, annotated; cycles one rank never reaches are handed on
// uncompared; a single rank, or collectives over one rank, give no
// comparison.
func TestRanks(t *testing.T) {
	var got []*model.CycleTrace
	a := &Agent{opts: Options{OnCycle: func(c *model.CycleTrace) { got = append(got, c) }}}
	cyc := func(rank, pid, no int, starts ...uint64) *model.CycleTrace {
		ph := &model.PhaseTrace{Phase: "spec.verify"}
		for _, s := range starts {
			ph.Collectives = append(ph.Collectives, model.Collective{Op: "AllReduce", API: "ncclAllReduce", Time: s - 50,
				GPUStart: s, GPUEnd: s + 10, Ranks: 2})
		}
		return &model.CycleTrace{PID: pid, TID: pid, Rank: rank, Cycle: no, Phases: []*model.PhaseTrace{ph}}
	}
	emitted := func(want ...string) {
		t.Helper()
		var s []string
		for _, c := range got {
			s = append(s, fmt.Sprintf("%d/%d", c.Rank, c.Cycle))
		}
		if len(s) != len(want) {
			t.Fatalf("handed on %v, want %v", s, want)
		}
		for i := range s {
			if s[i] != want[i] {
				t.Fatalf("handed on %v, want %v", s, want)
			}
		}
		got = nil
	}
	// Not compared: no rank, one rank in the communicator.
	a.deliverCycle(&model.CycleTrace{Rank: -1, Cycle: 1})
	single := cyc(0, 100, 1, 10)
	single.Phases[0].Collectives[0].Ranks = 1
	a.deliverCycle(single)
	emitted("-1/1", "0/1")

	a.deliverCycle(cyc(0, 100, 1, 1000, 2000))
	emitted() // held for rank 1
	if r := a.rankReport(); r != nil {
		t.Fatalf("one rank compared: %+v", r)
	}
	a.deliverCycle(cyc(1, 200, 1, 1300, 1900)) // late at the first, early at the second
	emitted("0/1", "1/1")
	a.deliverCycle(cyc(1, 200, 2, 3500)) // cycle 2 of rank 1 waits for rank 0
	emitted()
	a.deliverCycle(cyc(0, 100, 2, 3000))
	c0, c1 := got[0], got[1]
	emitted("0/2", "1/2")
	if c0.TP == nil || c1.TP == nil || c0.TP.Straggler != 1 || c0.TP.SpreadNs != 500 || c0.TP.WaitNs != 500 ||
		c1.TP.WaitNs != 0 || c1.TP.Collectives != 1 || c1.TP.Ranks != 2 {
		t.Errorf("cycle 2 compared: rank 0 %+v, rank 1 %+v", c0.TP, c1.TP)
	}
	if ar := c0.Phases[0].Collectives[0].Arrival; ar == nil || ar.LastRank != 1 || ar.WaitNs != 500 || ar.SpreadNs != 500 ||
		ar.Clock != "gpu" {
		t.Errorf("rank 0 arrival %+v", ar)
	}
	a.deliverCycle(cyc(0, 100, 3, 5000)) // never reached by rank 1
	emitted()
	r := a.rankReport()
	if len(r) != 2 {
		t.Fatalf("ranks %+v", r)
	}
	r0, r1 := r[0], r[1]
	if r0.Rank != 0 || r1.Rank != 1 || r0.PID != 100 || r1.PID != 200 {
		t.Fatalf("ranks %+v %+v", r0, r1)
	}
	if r0.Cycles != 2 || r0.Collectives != 3 || r1.Collectives != 3 {
		t.Errorf("compared: %+v %+v", r0, r1)
	}
	if r0.LastArrivals != 1 || r0.WaitImposedNs != 100 || r1.LastArrivals != 2 || r1.WaitImposedNs != 800 {
		t.Errorf("stragglers: rank 0 %+v, rank 1 %+v", r0, r1)
	}
	// Cycle 1: one last arrival each, rank 1 later in total (300 vs 100).
	if r0.StragglerCycles != 0 || r1.StragglerCycles != 2 {
		t.Errorf("straggler cycles: rank 0 %d, rank 1 %d", r0.StragglerCycles, r1.StragglerCycles)
	}
	// A thread of a rank other than the one compared is handed on at once.
	a.deliverCycle(&model.CycleTrace{PID: 100, TID: 101, Rank: 0, Cycle: 9, Phases: cyc(0, 100, 9, 1).Phases})
	emitted("0/9")
	// Rank 1 skips cycle 4: rank 0's cycle 3 goes on uncompared before
	// cycle 4 of both.
	a.deliverCycle(cyc(1, 200, 4, 7100))
	a.deliverCycle(cyc(0, 100, 4, 7000))
	emitted("0/3", "0/4", "1/4")
	if r := a.rankReport(); r[0].Uncompared != 1 || r[0].Cycles != 3 {
		t.Errorf("after a skipped cycle: %+v", r[0])
	}
	// Held cycles go on at the end of the session; a rank running far
	// ahead gives up on its oldest.
	for i := 5; i < 5+maxHeldCycles+1; i++ {
		a.deliverCycle(cyc(0, 100, i, uint64(i*1000)))
	}
	if len(got) != 1 || got[0].Cycle != 5 || got[0].TP != nil {
		t.Fatalf("a rank %d cycles ahead: handed on %d", maxHeldCycles, len(got))
	}
	got = nil
	a.flushRanks()
	if len(got) != maxHeldCycles || got[0].Cycle != 6 {
		t.Fatalf("flush handed on %d", len(got))
	}
}

// TestRanksClock: a collective is compared on kernel starts only when every
// rank has one; else on every rank's call time (never a mix of the two).
func TestRanksClock(t *testing.T) {
	var got []*model.CycleTrace
	a := &Agent{opts: Options{OnCycle: func(c *model.CycleTrace) { got = append(got, c) }}}
	mk := func(rank int, call, start uint64) *model.CycleTrace {
		return &model.CycleTrace{PID: 100 + rank, TID: 100 + rank, Rank: rank, Cycle: 1, Phases: []*model.PhaseTrace{{Phase: "spec.verify",
			Collectives: []model.Collective{{Op: "AllReduce", Time: call, GPUStart: start, Ranks: 2}}}}}
	}
	// Rank 0 called first but its kernel is not known (outside a GPU
	// window); rank 1's kernel started long after both calls.
	a.deliverCycle(mk(0, 1000, 0))
	a.deliverCycle(mk(1, 1200, 9000))
	if len(got) != 2 {
		t.Fatalf("handed on %d cycles", len(got))
	}
	for _, c := range got {
		ar := c.Phases[0].Collectives[0].Arrival
		if ar == nil || ar.Clock != "cpu" || ar.LastRank != 1 || ar.SpreadNs != 200 {
			t.Errorf("rank %d: arrival %+v, want rank 1 last by 200 ns on the cpu clock", c.Rank, ar)
		}
	}
}
