package correlate

import "testing"

// Records of one batch come per kind (kernels, then copies): Annotate merges
// them per stream, and the stream's timeline carries over to the next batch.
func TestStreamOrderAnnotate(t *testing.T) {
	var o StreamOrder
	b1 := []GPURecord{
		{PID: 1, Stream: 7, Start: 100, End: 200, Kind: Kernel},
		{PID: 1, Stream: 7, Start: 300, End: 400, Kind: Kernel},
		{PID: 1, Stream: 9, Start: 150, End: 160, Kind: Kernel},
		{PID: 1, Stream: 7, Start: 210, End: 290, Kind: Memcpy},
		{PID: 2, Stream: 7, Start: 50, End: 60, Kind: Kernel},
	}
	o.Annotate(b1)
	want := map[[3]uint64]uint64{ // (pid, stream, start) → PrevEnd
		{1, 7, 100}: 0, {1, 7, 210}: 200, {1, 7, 300}: 290, {1, 9, 150}: 0, {2, 7, 50}: 0,
	}
	check := func(recs []GPURecord) {
		t.Helper()
		for _, r := range recs {
			k := [3]uint64{uint64(r.PID), uint64(r.Stream), r.Start}
			if w, ok := want[k]; !ok || r.PrevEnd != w {
				t.Errorf("pid %d stream %d start %d: PrevEnd %d, want %d", r.PID, r.Stream, r.Start, r.PrevEnd, w)
			}
		}
	}
	check(b1)
	// Next batch: stream 7 goes on from 400; a record older than what was
	// seen is an inversion and gets no PrevEnd; overlapping work on one
	// stream id (graph branches) hands on the latest end.
	b2 := []GPURecord{
		{PID: 1, Stream: 7, Start: 410, End: 900, Kind: Kernel},
		{PID: 1, Stream: 7, Start: 420, End: 500, Kind: Kernel},
		{PID: 1, Stream: 7, Start: 950, End: 960, Kind: Kernel},
		{PID: 1, Stream: 9, Start: 120, End: 130, Kind: Kernel},
	}
	want = map[[3]uint64]uint64{{1, 7, 410}: 400, {1, 7, 420}: 900, {1, 7, 950}: 900, {1, 9, 120}: 0}
	o.Annotate(b2)
	check(b2)
	if o.Inversions != 1 {
		t.Errorf("inversions %d, want 1", o.Inversions)
	}
	o.Forget(1)
	b3 := []GPURecord{{PID: 1, Stream: 7, Start: 1000, End: 1100}}
	o.Annotate(b3)
	if b3[0].PrevEnd != 0 {
		t.Errorf("after Forget: PrevEnd %d", b3[0].PrevEnd)
	}
}

// Active time counts a record from its predecessor's end only when it was
// launched before that end (queued); elapsed spans the active intervals.
func TestAggActive(t *testing.T) {
	var a Agg
	for _, r := range []GPURecord{
		// Queued behind work that ended at 90: counts from 90.
		{Start: 100, End: 200, PrevEnd: 90, APIStart: 50, Kind: Kernel},
		// Launched after its predecessor ended (the stream waited for the
		// CPU): counts from its start.
		{Start: 300, End: 350, PrevEnd: 200, APIStart: 260, Kind: Kernel},
		// A copy queued behind the kernel: from 350.
		{Start: 355, End: 380, PrevEnd: 350, APIStart: 310, Kind: Memcpy, Bytes: 8},
		// Overlaps its predecessor (graph branches): no gap.
		{Start: 360, End: 370, PrevEnd: 380, APIStart: 310, Kind: Kernel},
		// Unknown predecessor or launch: its own interval.
		{Start: 500, End: 510, Kind: Kernel},
	} {
		a.Add(&r)
	}
	var s KeyStats
	a.Result(&s)
	if want := uint64(110 + 50 + 30 + 10); s.ActiveNs != want {
		t.Errorf("active %d, want %d", s.ActiveNs, want)
	}
	if s.BusyNs != 100+50+10+10 {
		t.Errorf("busy %d", s.BusyNs)
	}
	if s.ElapsedNs() != 510-90 {
		t.Errorf("elapsed %d, want %d", s.ElapsedNs(), 510-90)
	}
	a.Reset()
	a.Result(&s)
	if s.ActiveNs != 0 || s.ElapsedNs() != 0 {
		t.Errorf("after Reset: %+v", s)
	}
}
