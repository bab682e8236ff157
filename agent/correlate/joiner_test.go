package correlate

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var k1 = Key{Thread: 11, Cycle: 1, Phase: 1}
var k2 = Key{Thread: 11, Cycle: 1, Phase: 2}
var k3 = Key{Thread: 12, Cycle: 1, Phase: 1}

func TestJoinExact(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.Launch(1, 11, 100, k1)
	j.Launch(1, 11, 200, k2)
	j.Launch(1, 11, 300, k2)
	j.API(api(1, 11, 7, 90, 110))
	j.API(api(1, 11, 8, 195, 200)) // launch on the end bound
	j.API(api(1, 11, 9, 300, 305)) // launch on the start bound
	j.GPU(kern(1, 7, 120, 130, 1))
	j.GPU(kern(1, 8, 210, 250, 1))
	j.GPU(kern(1, 9, 260, 270, 1))
	j.AdvanceCPU(1, 1000)
	j.AdvanceGPU(1, 1300)
	s := j.Stats()
	checkIdentities(t, s)
	if s.MatchedLaunches != 3 || s.Joined != 3 || s.OpenKeys != 0 {
		t.Fatalf("stats %+v", s)
	}
	if got := r.finals[k1]; got.Kernels != 1 || got.BusyNs != 10 || got.Launches != 1 || got.MatchedLaunches != 1 || got.PID != 1 {
		t.Errorf("k1 %+v", got)
	}
	if got := r.finals[k2]; got.Kernels != 2 || got.BusyNs != 50 || got.FirstStart != 210 || got.LastEnd != 270 || got.SpanNs() != 60 {
		t.Errorf("k2 %+v", got)
	}
	if len(r.joined[k1]) != 1 || r.joined[k1][0].Corr != 7 {
		t.Errorf("joined k1 %+v", r.joined[k1])
	}
}

// Every arrival order of one launch, its API record and two kernels gives
// the same result.
func TestArrivalOrders(t *testing.T) {
	ops := []int{0, 1, 2, 3}
	for {
		r := newRec()
		j := newJoiner(t, r, Options[Key]{})
		for _, op := range ops {
			switch op {
			case 0:
				j.Launch(1, 11, 100, k1)
			case 1:
				j.API(api(1, 11, 7, 90, 110))
			case 2:
				j.GPU(kern(1, 7, 120, 130, 1))
			case 3:
				j.GPU(kern(1, 7, 125, 140, 2))
			}
		}
		j.AdvanceCPU(1, 500)
		j.AdvanceGPU(1, 5000)
		s := j.Stats()
		checkIdentities(t, s)
		if got := r.finals[k1]; s.Joined != 2 || got.Kernels != 2 || got.BusyNs != 20 || got.KernelNs != 25 {
			t.Fatalf("order %v: %+v %+v", ops, got, s)
		}
		if !nextPerm(ops) {
			break
		}
	}
}

func nextPerm(a []int) bool {
	i := len(a) - 2
	for i >= 0 && a[i] >= a[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	k := len(a) - 1
	for a[k] <= a[i] {
		k--
	}
	a[i], a[k] = a[k], a[i]
	slices.Reverse(a[i+1:])
	return true
}

func TestGraphReplay(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{Horizon: 1_000_000})
	j.Launch(1, 11, 1000, k1)
	// 100 kernels of one replay, back to back on stream 1 with gaps every
	// tenth, delivered shuffled, some before the API record.
	var ks []*GPURecord
	var want uint64
	at := uint64(2000)
	for i := range 100 {
		if i%10 == 0 {
			at += 50
		}
		ks = append(ks, kern(1, 42, at, at+100, 1))
		at += 100
		want += 100
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(ks), func(a, b int) { ks[a], ks[b] = ks[b], ks[a] })
	for _, k := range ks[:30] {
		j.GPU(k)
	}
	j.API(api(1, 11, 42, 990, 1010))
	for _, k := range ks[30:] {
		j.GPU(k)
	}
	j.AdvanceGPU(1, 10_000_000)
	got := r.finals[k1]
	if got.Kernels != 100 || got.BusyNs != want || got.KernelNs != want || got.SpanNs() != at-2050 {
		t.Fatalf("%+v want busy %d span %d", got, want, at-2050)
	}
}

func TestUnionNotSum(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.Launch(1, 11, 5, k1)
	j.Launch(1, 11, 7, k1)
	j.API(api(1, 11, 1, 4, 6))
	j.API(api(1, 11, 2, 7, 8))
	j.GPU(kern(1, 2, 5, 15, 2))
	j.GPU(kern(1, 1, 0, 10, 1))
	j.AdvanceGPU(1, 2000)
	got := r.finals[k1]
	if got.BusyNs != 15 || got.KernelNs != 20 || got.SpanNs() != 15 || got.Kernels != 2 {
		t.Fatalf("%+v", got)
	}
}

func TestNestedAdjacent(t *testing.T) {
	for _, c := range []struct {
		iv   [][2]uint64
		want uint64
	}{
		{[][2]uint64{{0, 100}, {10, 20}, {100, 150}, {200, 210}}, 160},
		{[][2]uint64{{10, 20}, {0, 100}}, 100},
		{[][2]uint64{{0, 5}, {5, 10}, {10, 15}}, 15},
		{[][2]uint64{{20, 30}, {0, 10}, {10, 20}}, 30},
		{[][2]uint64{{5, 5}, {7, 3}}, 0},
		{[][2]uint64{{0, 10}, {0, 10}, {2, 3}}, 10},
	} {
		var a Agg
		for i, x := range c.iv {
			a.Add(&GPURecord{Start: x[0], End: x[1], Stream: uint32(i), Kind: Kernel})
		}
		var s KeyStats
		a.Result(&s)
		if s.BusyNs != c.want {
			t.Errorf("%v: busy %d want %d", c.iv, s.BusyNs, c.want)
		}
	}
}

// bruteUnion sweeps interval endpoints: a different algorithm from the
// merge Intervals uses.
func bruteUnion(iv [][2]uint64) uint64 {
	type ev struct {
		t uint64
		d int
	}
	var evs []ev
	for _, x := range iv {
		if x[1] > x[0] {
			evs = append(evs, ev{x[0], 1}, ev{x[1], -1})
		}
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			if a.t < b.t {
				return -1
			}
			return 1
		}
		return b.d - a.d
	})
	var n uint64
	depth := 0
	var from uint64
	for _, e := range evs {
		if depth == 0 && e.d > 0 {
			from = e.t
		}
		depth += e.d
		if depth == 0 {
			n += e.t - from
		}
	}
	return n
}

func TestIntervalsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := rng.IntN(2000)
		var iv [][2]uint64
		var s Intervals
		for range n {
			a := rng.Uint64N(100_000)
			b := a + rng.Uint64N(500)
			if rng.IntN(50) == 0 {
				b = a - min(a, rng.Uint64N(10)) // empty or inverted
			}
			iv = append(iv, [2]uint64{a, b})
			s.Add(a, b)
			if rng.IntN(500) == 0 {
				if got, want := s.Union(), bruteUnion(iv); got != want {
					t.Fatalf("trial %d partial: %d want %d", trial, got, want)
				}
			}
		}
		if got, want := s.Union(), bruteUnion(iv); got != want {
			t.Fatalf("trial %d: %d want %d", trial, got, want)
		}
		if s.Len() > n {
			t.Fatalf("holds %d > %d", s.Len(), n)
		}
	}
}

func TestUnhookedAPI(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{CPUHorizon: 50})
	j.Launch(1, 11, 100, k1)
	j.API(api(1, 11, 7, 90, 110))
	j.API(api(1, 11, 8, 120, 130)) // cuMemcpyHtoDAsync: not hooked
	j.GPU(&GPURecord{PID: 1, Corr: 8, Start: 140, End: 150, Bytes: 4096, Kind: Memcpy})
	j.AdvanceCPU(1, 179) // 130+50 not passed yet: a launch at <=130 could still come
	if s := j.Stats(); s.PendingAPIs != 1 || s.PendingGPU != 1 {
		t.Fatalf("decided too early: %+v", s)
	}
	j.AdvanceCPU(1, 180)
	j.GPU(&GPURecord{PID: 1, Corr: 8, Start: 150, End: 160, Bytes: 4096, Kind: Memcpy})
	s := j.Stats()
	checkIdentities(t, s)
	if s.APINoLaunch != 1 || s.GPUNoLaunch != 2 || len(r.unjoined[NoLaunch]) != 2 {
		t.Fatalf("%+v", s)
	}
	j.AdvanceGPU(1, 5000)
	if got := r.finals[k1]; got.Memcpys != 0 {
		t.Fatalf("unhooked copy attributed: %+v", got)
	}
}

func TestOrphanGPU(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.AdvanceGPU(1, 100)
	j.GPU(kern(1, 9, 50, 60, 1)) // waits until max(100, 50)+1000
	j.GPU(kern(1, 9, 60, 70, 1))
	j.AdvanceGPU(1, 1099)
	if s := j.Stats(); s.PendingGPU != 2 {
		t.Fatalf("%+v", s)
	}
	j.AdvanceGPU(1, 1100)
	s := j.Stats()
	checkIdentities(t, s)
	if s.GPUNoAPI != 2 || s.PendingGPU != 0 || len(r.unjoined[NoAPI]) != 2 {
		t.Fatalf("%+v", s)
	}
}

func TestUnmatchedLaunch(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.Launch(1, 11, 100, k1)
	j.Launch(1, 11, 200, k1)
	j.API(api(1, 11, 8, 195, 205))
	j.GPU(kern(1, 8, 210, 220, 1))
	j.AdvanceGPU(1, 1099)
	if s := j.Stats(); s.PendingLaunches != 1 || s.OpenKeys != 1 {
		t.Fatalf("%+v", s)
	}
	j.AdvanceGPU(1, 1100)
	if s := j.Stats(); s.UnmatchedLaunches != 1 || s.OpenKeys != 1 {
		t.Fatalf("%+v", s)
	}
	j.AdvanceGPU(1, 1220) // last joined end 220 + horizon
	s := j.Stats()
	checkIdentities(t, s)
	if got := r.finals[k1]; s.OpenKeys != 0 || got.Launches != 2 || got.MatchedLaunches != 1 || got.Kernels != 1 {
		t.Fatalf("%+v %+v", s, got)
	}
}

func TestDuplicates(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.GPU(kern(1, 7, 120, 130, 1))
	j.Launch(1, 11, 100, k1)
	j.GPU(kern(1, 7, 120, 130, 1)) // duplicate while buffered
	j.API(api(1, 11, 7, 90, 110))
	j.API(api(1, 11, 7, 90, 110))  // duplicate API record
	j.GPU(kern(1, 7, 120, 130, 1)) // duplicate after the join
	j.GPU(kern(1, 7, 120, 130, 2)) // another stream: not a duplicate
	j.AdvanceGPU(1, 5000)
	s := j.Stats()
	checkIdentities(t, s)
	if s.DuplicateGPU != 2 || s.DuplicateAPIs != 1 || s.Joined != 2 {
		t.Fatalf("%+v", s)
	}
	if got := r.finals[k1]; got.Kernels != 2 || got.BusyNs != 10 {
		t.Fatalf("%+v", got)
	}
}

func TestLateAfterFinalize(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.Launch(1, 11, 100, k1)
	j.API(api(1, 11, 7, 90, 110))
	j.GPU(kern(1, 7, 120, 130, 1))
	j.AdvanceGPU(1, 1129)
	if len(r.finals) != 0 {
		t.Fatal("finalized before its deadline")
	}
	j.AdvanceGPU(1, 1130)
	j.GPU(kern(1, 7, 140, 150, 1)) // late kernel of a finalized key
	j.Launch(1, 11, 1200, k1)      // late launch of a finalized key...
	j.API(api(1, 11, 8, 1195, 1205))
	j.GPU(kern(1, 8, 1210, 1220, 1)) // ...and its kernel
	j.AdvanceGPU(1, 10_000)
	s := j.Stats()
	checkIdentities(t, s)
	if s.Late != 2 || s.LateLaunches != 1 || len(r.unjoined[Late]) != 2 || r.nFinal[k1] != 1 {
		t.Fatalf("%+v finals %d", s, r.nFinal[k1])
	}
	if got := r.finals[k1]; got.Kernels != 1 {
		t.Fatalf("%+v", got)
	}
	// After the tombstone expired, the key is new again.
	j.Launch(1, 11, 20_000, k1)
	j.AdvanceGPU(1, 30_000)
	if r.nFinal[k1] != 2 {
		t.Fatalf("reused key finalized %d times", r.nFinal[k1])
	}
}

func TestPerProcessCorr(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	ka, kb := Key{Thread: 11}, Key{Thread: 21}
	j.Launch(1, 11, 100, ka)
	j.Launch(2, 21, 100, kb)
	j.API(api(2, 21, 7, 90, 110))
	j.API(api(1, 11, 7, 90, 110))
	j.GPU(kern(1, 7, 120, 130, 1))
	j.GPU(kern(2, 7, 120, 150, 1))
	j.GPU(kern(2, 7, 120, 150, 1))
	j.API(api(2, 22, 8, 90, 110)) // other thread: no launch there
	j.AdvanceCPU(1, 1000)
	j.AdvanceCPU(2, 1000)
	j.AdvanceGPU(1, 5000)
	if _, ok := r.finals[kb]; ok {
		t.Fatal("pid 2 key finalized by pid 1's watermark")
	}
	j.AdvanceGPU(2, 5000)
	s := j.Stats()
	checkIdentities(t, s)
	if r.finals[ka].BusyNs != 10 || r.finals[kb].BusyNs != 30 || r.finals[kb].PID != 2 || s.DuplicateGPU != 1 || s.APINoLaunch != 1 {
		t.Fatalf("%+v %+v %+v", r.finals[ka], r.finals[kb], s)
	}
}

func TestSharedAPI(t *testing.T) {
	for _, launchFirst := range []bool{true, false} {
		r := newRec()
		j := newJoiner(t, r, Options[Key]{})
		if !launchFirst {
			j.API(api(1, 11, 7, 90, 110))
		}
		j.Launch(1, 11, 95, k1)
		j.Launch(1, 11, 105, k2) // an inner hooked variant of the same call
		if launchFirst {
			j.API(api(1, 11, 7, 90, 110))
		}
		j.GPU(kern(1, 7, 120, 130, 1))
		j.AdvanceCPU(1, 1000)
		j.AdvanceGPU(1, 5000)
		s := j.Stats()
		checkIdentities(t, s)
		if s.MatchedLaunches != 2 || s.SharedAPI != 1 || s.MatchedAPIs != 1 || r.finals[k1].Kernels != 1 || r.finals[k2].Kernels != 0 {
			t.Fatalf("launchFirst=%v: %+v", launchFirst, s)
		}
	}
}

// TestLostRecordPrefix: a launch whose own API record was lost lies in the
// slack before the next record, which holds the next launch. The record is
// the next launch's: the first stays unmatched (counted) instead of taking
// the record, its key and its GPU work (then understated in k2's cycle and
// wrongly added to k1's).
func TestLostRecordPrefix(t *testing.T) {
	for _, c := range []struct {
		name    string
		inside  bool // a second launch lies inside the record
		before  bool // a second launch lies between the first and the record's start
		skipped uint64
		k1      int // kernels joined to k1
	}{
		{"lost record before another launch's", true, false, 1, 0},
		// Alone before the record, a launch is its (the uprobe fired
		// before CUPTI took the start).
		{"preempted launch", false, false, 0, 1},
		// Two before it: the later is its (an earlier launch made outside
		// a duty window, or whose record was lost, stays unmatched).
		{"lost record, then a preempted launch", false, true, 1, 0},
	} {
		r := newRec()
		j := newJoiner(t, r, Options[Key]{Slack: 50})
		j.Launch(1, 11, 100, k1)
		if c.inside {
			j.Launch(1, 11, 140, k2)
		}
		if c.before {
			j.Launch(1, 11, 120, k2)
		}
		j.API(api(1, 11, 8, 130, 150))
		j.GPU(kern(1, 8, 160, 170, 1))
		j.AdvanceCPU(1, 1000)
		j.AdvanceGPU(1, 5000)
		s := j.Stats()
		checkIdentities(t, s)
		if s.PrefixSkipped != c.skipped || s.SharedAPI != 0 || r.finals[k1].Kernels != c.k1 ||
			((c.inside || c.before) && (s.UnmatchedLaunches != 1 || r.finals[k1].MatchedLaunches != 0 || r.finals[k2].Kernels != 1)) {
			t.Errorf("%s: %+v; k1 %+v; k2 %+v", c.name, s, r.finals[k1], r.finals[k2])
		}
	}
}

// TestUntracedPrefix: launches made outside a duty window (no API record
// will come for them) lie in the slack before a record that arrives before
// its own launch's event. The record must not take them, nor they the record
// when their events come late: its launch, coming next, would then find its
// record taken and count as lost, and the next record would take the next
// untraced launch, and so on.
func TestUntracedPrefix(t *testing.T) {
	r := newRec()
	o := Options[Key]{Slack: 50, InOrder: true, Untraced: func(pid int, t uint64) bool { return t < 110 }}
	var lost []uint64
	o.OnUnmatched = func(pid int, t uint64) { lost = append(lost, t) }
	j := newJoiner(t, r, o)
	j.Launch(1, 11, 90, k1) // outside the window
	j.Launch(1, 11, 100, k1)
	j.API(api(1, 11, 8, 130, 150)) // before its launch's event
	j.API(api(1, 11, 9, 160, 170))
	j.Launch(1, 11, 105, k1) // outside the window, its event late: the record within its slack is not its
	j.Launch(1, 11, 125, k2)
	j.Launch(1, 11, 155, k2)
	j.GPU(kern(1, 8, 180, 190, 1))
	j.GPU(kern(1, 9, 190, 200, 1))
	j.AdvanceCPU(1, 1000)
	j.AdvanceGPU(1, 5000)
	s := j.Stats()
	checkIdentities(t, s)
	if s.UntracedLaunches != 3 || s.UnmatchedLaunches != 0 || len(lost) != 0 || r.finals[k2].Kernels != 2 || r.finals[k1].Kernels != 0 {
		t.Errorf("%+v; lost at %v; k1 %+v; k2 %+v", s, lost, r.finals[k1], r.finals[k2])
	}
}

func TestSlack(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{Slack: 5})
	j.Launch(1, 11, 87, k1)  // 3 ns before CUPTI's start
	j.Launch(1, 11, 120, k2) // inside the next record, 4 ns after the previous one's end
	j.API(api(1, 11, 7, 90, 116))
	j.API(api(1, 11, 8, 118, 125))
	j.GPU(kern(1, 7, 130, 140, 1))
	j.GPU(kern(1, 8, 150, 170, 1))
	j.AdvanceGPU(1, 5000)
	if r.finals[k1].BusyNs != 10 || r.finals[k2].BusyNs != 20 {
		t.Fatalf("%+v %+v", r.finals[k1], r.finals[k2])
	}
	// Exact matching would not have matched the first launch.
	r = newRec()
	j = newJoiner(t, r, Options[Key]{})
	j.Launch(1, 11, 87, k1)
	j.API(api(1, 11, 7, 90, 116))
	j.AdvanceCPU(1, 1000)
	j.AdvanceGPU(1, 5000)
	if s := j.Stats(); s.UnmatchedLaunches != 1 || s.APINoLaunch != 1 {
		t.Fatalf("%+v", s)
	}
}

// TestInOrderPreempted: a thread preempted between the uprobe and CUPTI's
// stamp leaves its launch far before the record; with InOrder the record
// takes it (it is the thread's only launch since the previous call
// returned), while a record of an unhooked call never takes a launch made
// before the previous call returned.
func TestInOrderPreempted(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{Slack: 5, InOrder: true})
	j.Launch(1, 11, 100, k1) // preempted: CUPTI stamps the call at 500
	j.Launch(1, 11, 700, k2) // its record is lost
	j.Launch(1, 12, 100, k3) // another thread: never taken by thread 11's records
	j.API(api(1, 11, 7, 500, 520))
	j.API(api(1, 11, 8, 600, 610)) // an unhooked call before the lost record's launch
	j.API(api(1, 11, 9, 900, 950)) // unhooked, after the lost record: takes k2 (the rule's limit)
	j.GPU(kern(1, 7, 530, 540, 1))
	j.GPU(kern(1, 8, 615, 625, 1))
	j.AdvanceCPU(1, 1<<20)
	j.AdvanceGPU(1, 1<<21)
	s := j.Stats()
	checkIdentities(t, s)
	if r.finals[k1].Kernels != 1 || r.finals[k1].BusyNs != 10 {
		t.Fatalf("preempted launch not joined: %+v", r.finals[k1])
	}
	if s.PreemptedLaunches != 2 || s.GPUNoLaunch != 1 || r.finals[k3].MatchedLaunches != 0 {
		t.Fatalf("%+v %+v", s, r.finals[k3])
	}
	// The same when the launch arrives after the records (ring buffer
	// backlog): the first record after it, if the one before ended earlier.
	r = newRec()
	j = newJoiner(t, r, Options[Key]{Slack: 5, InOrder: true})
	j.API(api(1, 11, 6, 40, 60))
	j.API(api(1, 11, 7, 500, 520))
	j.GPU(kern(1, 7, 530, 540, 1))
	j.Launch(1, 11, 100, k1)
	j.Launch(1, 11, 50, k2) // inside record 6
	j.AdvanceCPU(1, 1<<20)
	j.AdvanceGPU(1, 1<<21)
	if s := j.Stats(); r.finals[k1].Kernels != 1 || s.PreemptedLaunches != 1 || s.MatchedLaunches != 2 {
		t.Fatalf("launch after its record: %+v %+v", s, r.finals[k1])
	}
	// Without InOrder the preempted launch stays unmatched, counted.
	r = newRec()
	j = newJoiner(t, r, Options[Key]{Slack: 5})
	j.Launch(1, 11, 100, k1)
	j.API(api(1, 11, 7, 500, 520))
	j.AdvanceCPU(1, 1<<20)
	j.AdvanceGPU(1, 1<<21)
	if s := j.Stats(); s.UnmatchedLaunches != 1 || s.PreemptedLaunches != 0 {
		t.Fatalf("%+v", s)
	}
}

func TestAggCopiesAndNames(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{PerName: true})
	j.Launch(1, 11, 100, k1)
	j.API(api(1, 11, 7, 90, 110))
	j.GPU(&GPURecord{PID: 1, Corr: 7, Start: 120, End: 130, Kind: Kernel, Name: 3})
	j.GPU(&GPURecord{PID: 1, Corr: 7, Start: 125, End: 145, Kind: Kernel, Name: 3, Stream: 1})
	j.GPU(&GPURecord{PID: 1, Corr: 7, Start: 150, End: 151, Kind: Kernel, Name: 4})
	j.GPU(&GPURecord{PID: 1, Corr: 7, Start: 160, End: 170, Kind: Memcpy, Bytes: 100})
	j.GPU(&GPURecord{PID: 1, Corr: 7, Start: 170, End: 175, Kind: Memset, Bytes: 8})
	j.AdvanceGPU(1, 5000)
	got := r.finals[k1]
	if got.Kernels != 3 || got.BusyNs != 26 || got.KernelNs != 31 || got.SpanNs() != 31 ||
		got.Memcpys != 1 || got.MemcpyBytes != 100 || got.MemcpyNs != 10 ||
		got.Memsets != 1 || got.MemsetBytes != 8 || got.MemsetNs != 5 {
		t.Fatalf("%+v", got)
	}
	if got.Names[3] != (NameTotal{2, 30}) || got.Names[4] != (NameTotal{1, 1}) {
		t.Fatalf("names %+v", got.Names)
	}
}

func TestFlush(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.Launch(1, 11, 100, k1)
	j.API(api(1, 11, 7, 90, 110))
	j.GPU(kern(1, 7, 120, 130, 1))
	j.Launch(1, 11, 200, k2)       // API lost
	j.API(api(1, 11, 8, 300, 310)) // unhooked, CPU watermark not there yet
	j.GPU(kern(1, 8, 320, 330, 1)) // its copy
	j.GPU(kern(1, 9, 400, 410, 1)) // orphan
	j.Flush()
	s := j.Stats()
	checkIdentities(t, s)
	if s.UnmatchedLaunches != 1 || s.APINoLaunch != 1 || s.GPUNoLaunch != 1 || s.GPUNoAPI != 1 || s.Joined != 1 ||
		s.PendingAPIs+s.PendingGPU+s.PendingLaunches+s.OpenKeys != 0 || len(r.finals) != 2 {
		t.Fatalf("%+v", s)
	}
	if r.finals[k1].Kernels != 1 || r.finals[k2].Launches != 1 || r.finals[k2].MatchedLaunches != 0 {
		t.Fatalf("%+v", r.finals)
	}
}

func TestWatermarksMonotone(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{})
	j.Launch(1, 11, 100, k1)
	j.AdvanceGPU(1, 1000)
	j.AdvanceGPU(1, 10) // ignored
	j.AdvanceGPU(1, 1099)
	if len(r.finals) != 0 {
		t.Fatal("finalized early")
	}
	j.AdvanceGPU(1, 1100)
	if r.nFinal[k1] != 1 {
		t.Fatal("not finalized")
	}
}

func TestCaps(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{MaxLaunches: 4, MaxAPIs: 4, MaxGPU: 8, MaxCorrs: 16, MaxKeys: 4, MaxDedup: 16})
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		tt := uint64(i * 10)
		switch rng.IntN(4) {
		case 0:
			j.Launch(1, 11+rng.IntN(2), tt, Key{Cycle: i / 7})
		case 1:
			j.API(api(1, 11+rng.IntN(2), uint32(rng.IntN(300)), tt, tt+5))
		default:
			j.GPU(kern(1, uint32(rng.IntN(300)), tt, tt+5, uint32(rng.IntN(2))))
		}
		s := j.Stats()
		checkIdentities(t, s)
		p := j.procs[1]
		if p.entL > 4 || p.entA > 4 || p.nGPU > 8 || len(p.corrs) > 16 || len(p.keys) > 4 ||
			len(p.dCur)+len(p.dPrev) > 16 {
			t.Fatalf("cap exceeded at %d: entL %d entA %d gpu %d corrs %d keys %d dedup %d",
				i, p.entL, p.entA, p.nGPU, len(p.corrs), len(p.keys), len(p.dCur)+len(p.dPrev))
		}
	}
	s := j.Stats()
	if s.CapEvictions == 0 || s.DedupForgotten == 0 {
		t.Fatalf("%+v", s)
	}
	j.Flush()
	checkIdentities(t, j.Stats())
}

func TestOptions(t *testing.T) {
	for _, o := range []Options[Key]{
		{Horizon: -1},
		{Slack: -time.Nanosecond},
		{MaxKeys: -1},
		{MaxDedup: -5},
	} {
		if _, err := New(o); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: err %v", o, err)
		}
	}
	j, err := New(Options[Key]{})
	if err != nil || j.h != uint64(DefaultHorizon) || j.ch != uint64(DefaultCPUHorizon) || j.maxK != DefaultMaxKeys {
		t.Fatalf("%v %+v", err, j)
	}
	js, _ := New(Options[string]{CPUHorizon: -1})
	if js.ch != 0 {
		t.Fatal("negative CPUHorizon is none")
	}
	js.Launch(1, 1, 5, "generic keys work")
}

// The hot path allocates nothing once warm.
func TestSteadyStateAllocs(t *testing.T) {
	w := newWorkload(1, 4)
	w.horizon = 10_000_000
	j, err := New(Options[Key]{Horizon: time.Duration(w.horizon), CPUHorizon: -1,
		OnJoin: func(Key, *GPURecord) {}, OnFinal: func(Key, *KeyStats) {}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2000 {
		w.step(j)
	}
	if a := testing.AllocsPerRun(500, func() { w.step(j) }); a > 0 {
		t.Fatalf("%.1f allocs per step of %d records", a, w.perStep)
	}
}

// TestUntracedLaunches: a launch left without an API record is untraced
// when Options.Untraced says no API records were being made at its time
// (duty-cycled tracing, outside a window), unmatched otherwise; matched
// launches are not asked about.
func TestUntracedLaunches(t *testing.T) {
	r := newRec()
	var asked []uint64
	j := newJoiner(t, r, Options[Key]{Untraced: func(pid int, t uint64) bool {
		asked = append(asked, t)
		return pid == 1 && t < 500
	}})
	j.Launch(1, 11, 100, k1) // outside the window: untraced
	j.Launch(1, 11, 600, k2) // inside: its record was lost
	j.Launch(1, 11, 700, k1) // inside, joined
	j.API(api(1, 11, 7, 690, 710))
	j.GPU(kern(1, 7, 720, 730, 1))
	j.AdvanceCPU(1, 10_000)
	j.AdvanceGPU(1, 1_000_000)
	s := j.Stats()
	if s.UntracedLaunches != 1 || s.UnmatchedLaunches != 1 || s.MatchedLaunches != 1 {
		t.Fatalf("%+v", s)
	}
	// A pure predicate, asked at least about the two launches that end
	// without a record (also when records are matched).
	seen := map[uint64]bool{}
	for _, x := range asked {
		seen[x] = true
	}
	if !seen[100] || !seen[600] {
		t.Errorf("asked about %v, want at least the two launches without records", asked)
	}
	checkIdentities(t, s)
}

// TestStraddledLaunches: a launch without record made inside a window is
// lost, unless its call may have run past the window's close (the thread's
// next launch came after the close, or none came): Options.Straddled gets
// the next launch's time, in order and out of order.
func TestStraddledLaunches(t *testing.T) {
	const closeAt = 1000 // the window [0, 1000]; records stop after it
	r := newRec()
	type q struct{ t, next uint64 }
	var asked []q
	j := newJoiner(t, r, Options[Key]{
		Untraced: func(pid int, t uint64) bool { return t > closeAt },
		Straddled: func(pid int, t, next uint64) bool {
			asked = append(asked, q{t, next})
			return next == 0 || next > closeAt
		},
	})
	j.Launch(1, 11, 100, k1) // lost: the thread's next call came at 200, records on
	j.Launch(1, 11, 200, k1) // joined
	j.API(api(1, 11, 7, 195, 210))
	j.Launch(1, 11, 950, k2) // straddled: the next launch at 1500 is past the close
	j.Launch(1, 11, 1500, k2)
	j.Launch(1, 12, 990, k2) // straddled: its thread made no later launch
	j.Launch(1, 13, 700, k1) // out of order: 600 came after it (600 and 700 lost, 980 straddled)
	j.Launch(1, 13, 980, k1)
	j.Launch(1, 13, 600, k1)
	j.AdvanceCPU(1, 10_000)
	j.AdvanceGPU(1, 1_000_000)
	s := j.Stats()
	if s.StraddledLaunches != 3 || s.UnmatchedLaunches != 3 || s.UntracedLaunches != 1 || s.MatchedLaunches != 1 {
		t.Errorf("%+v", s)
	}
	next := map[uint64]uint64{}
	for _, a := range asked {
		next[a.t] = a.next
	}
	for lt, want := range map[uint64]uint64{100: 200, 950: 1500, 990: 0, 600: 700, 700: 980, 980: 0} {
		if got, ok := next[lt]; !ok || got != want {
			t.Errorf("launch at %d: asked with next %d (asked %v), want %d", lt, got, ok, want)
		}
	}
	checkIdentities(t, s)
}

// TestJoinedLaunchTime: every joined record carries the ktime of the launch
// that named its key, whichever came first, the launch or its API record
// (and with InOrder, a launch preempted before CUPTI stamped its call).
func TestJoinedLaunchTime(t *testing.T) {
	r := newRec()
	j := newJoiner(t, r, Options[Key]{InOrder: true})
	j.Launch(1, 11, 100, k1)
	j.API(api(1, 11, 7, 90, 110)) // API after its launch
	j.API(api(1, 11, 8, 195, 205))
	j.Launch(1, 11, 200, k2) // launch after its API record
	j.Launch(1, 11, 250, k2)
	j.API(api(1, 11, 9, 400, 410)) // preempted: the launch is long before the record
	for _, k := range []*GPURecord{kern(1, 7, 120, 130, 1), kern(1, 8, 210, 250, 1), kern(1, 8, 250, 255, 1), kern(1, 9, 420, 430, 1)} {
		j.GPU(k)
	}
	j.AdvanceCPU(1, 1000)
	j.AdvanceGPU(1, 1300)
	want := map[uint32]uint64{7: 100, 8: 200, 9: 250}
	n := 0
	for _, rs := range r.joined {
		for _, g := range rs {
			n++
			if g.Launch != want[g.Corr] {
				t.Errorf("corr %d: launch %d, want %d", g.Corr, g.Launch, want[g.Corr])
			}
		}
	}
	if n != 4 {
		t.Errorf("%d records joined, want 4", n)
	}
}
