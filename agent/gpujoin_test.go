package agent

import (
	"testing"

	"github.com/specprof/specprof/cupti"
)

// TestOutermost: driver records nested in a runtime record of the same
// thread become aliases of it; other threads' records and records outside
// the runtime window stay.
func TestOutermost(t *testing.T) {
	rt := func(tid, corr uint32, s, e uint64) cupti.API {
		return cupti.API{Tid: tid, CorrelationID: corr, Start: s, End: e, Domain: domainRuntime}
	}
	dr := func(tid, corr uint32, s, e uint64) cupti.API {
		return cupti.API{Tid: tid, CorrelationID: corr, Start: s, End: e, Domain: domainDriver}
	}
	recs := []cupti.API{
		dr(1, 11, 110, 150), // nested in 10 (arrives first: it returns first)
		rt(1, 10, 100, 160),
		dr(2, 21, 120, 130), // another thread: stays
		dr(1, 12, 170, 180), // a driver call of its own (Triton): stays
		rt(1, 13, 200, 300), // a runtime call with no driver call inside: stays
		dr(1, 14, 310, 320), // after it: stays
		rt(1, 15, 400, 500), // two driver calls inside
		dr(1, 16, 410, 420), //
		dr(1, 17, 430, 440), //
		dr(1, 18, 490, 510), // overlaps the end: not nested, stays
	}
	al := &corrAliases{cur: map[uint32]uint32{}}
	out := outermost(recs, al)
	var got []uint32
	for _, r := range out {
		got = append(got, r.CorrelationID)
	}
	want := []uint32{10, 12, 13, 14, 15, 18, 21}
	if len(got) != len(want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("kept %v, want %v", got, want)
		}
	}
	for from, to := range map[uint32]uint32{11: 10, 16: 15, 17: 15, 12: 12, 21: 21} {
		if al.of(from) != to {
			t.Errorf("alias of %d: %d, want %d", from, al.of(from), to)
		}
	}
	// Driver-only batches (the stand-in, or CUPTI without runtime records)
	// pass through untouched.
	d := []cupti.API{dr(1, 1, 1, 2), dr(1, 2, 3, 4)}
	if o := outermost(d, al); len(o) != 2 {
		t.Fatalf("driver-only batch changed: %v", o)
	}
}
