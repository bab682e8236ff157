package agent

import "testing"

// TestRanks: collectives of two ranks are compared by cycle and order; the
// rank whose kernel starts last is the straggler, by how much it is late;
// cycles one rank never reaches are not compared; a single rank gives no
// comparison.
func TestRanks(t *testing.T) {
	a := &Agent{}
	cyc := func(rank, pid, no int, starts ...uint64) *CycleTrace {
		ph := &PhaseTrace{Phase: "spec.verify"}
		for _, s := range starts {
			ph.Collectives = append(ph.Collectives, Collective{Op: "AllReduce", API: "ncclAllReduce", Time: s - 50, GPUStart: s, GPUEnd: s + 10})
		}
		return &CycleTrace{PID: pid, TID: pid, Rank: rank, Cycle: no, Phases: []*PhaseTrace{ph}}
	}
	a.noteRankCycle(nil, cyc(0, 100, 1, 1000, 2000))
	if r := a.rankReport(); r != nil {
		t.Fatalf("one rank compared: %+v", r)
	}
	a.noteRankCycle(nil, cyc(1, 200, 1, 1300, 1900)) // late at the first, early at the second
	a.noteRankCycle(nil, cyc(1, 200, 2, 3500))       // cycle 2 of rank 1 waits for rank 0
	a.noteRankCycle(nil, cyc(0, 100, 2, 3000))
	a.noteRankCycle(nil, cyc(0, 100, 3, 5000)) // never reached by rank 1
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
	// A thread of a rank other than the one compared is ignored; a rank
	// with a new pid (restarted) starts over.
	a.noteRankCycle(nil, &CycleTrace{PID: 100, TID: 101, Rank: 0, Cycle: 9, Phases: cyc(0, 100, 9, 1).Phases})
	if got := a.rankReport()[0].Cycles; got != 2 {
		t.Errorf("other thread counted: %d cycles", got)
	}
}
