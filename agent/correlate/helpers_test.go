package correlate

import (
	"testing"
	"time"
)

// rec records everything a Joiner hands out.
type rec struct {
	joined   map[Key][]GPURecord
	finals   map[Key]KeyStats
	nFinal   map[Key]int
	unjoined map[Reason][]GPURecord
	order    []Key // finalization order
}

func newRec() *rec {
	return &rec{
		joined:   map[Key][]GPURecord{},
		finals:   map[Key]KeyStats{},
		nFinal:   map[Key]int{},
		unjoined: map[Reason][]GPURecord{},
	}
}

func (r *rec) opts(o Options[Key]) Options[Key] {
	o.OnJoin = func(k Key, g *GPURecord) { r.joined[k] = append(r.joined[k], *g) }
	o.OnFinal = func(k Key, s *KeyStats) {
		r.finals[k] = *s
		r.nFinal[k]++
		r.order = append(r.order, k)
	}
	o.OnUnjoined = func(g *GPURecord, why Reason) { r.unjoined[why] = append(r.unjoined[why], *g) }
	return o
}

func newJoiner(t testing.TB, r *rec, o Options[Key]) *Joiner[Key] {
	t.Helper()
	if o.Horizon == 0 {
		o.Horizon = time.Duration(1000)
	}
	if o.CPUHorizon == 0 {
		o.CPUHorizon = -1
	}
	j, err := New(r.opts(o))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// checkIdentities verifies that every input is in exactly one category.
func checkIdentities(t testing.TB, s Stats) {
	t.Helper()
	if got := s.MatchedLaunches + s.UnmatchedLaunches + s.UntracedLaunches + s.StraddledLaunches + s.PendingLaunches; got != s.Launches {
		t.Fatalf("launches %d != matched %d + unmatched %d + untraced %d + straddled %d + pending %d", s.Launches, s.MatchedLaunches,
			s.UnmatchedLaunches, s.UntracedLaunches, s.StraddledLaunches, s.PendingLaunches)
	}
	if got := s.MatchedAPIs + s.APINoLaunch + s.DuplicateAPIs + s.PendingAPIs; got != s.APIs {
		t.Fatalf("apis %d != matched %d + nolaunch %d + dup %d + pending %d", s.APIs, s.MatchedAPIs, s.APINoLaunch, s.DuplicateAPIs, s.PendingAPIs)
	}
	if got := s.Joined + s.GPUNoLaunch + s.GPUNoAPI + s.DuplicateGPU + s.Late + s.PendingGPU; got != s.GPURecords {
		t.Fatalf("gpu %d != joined %d + nolaunch %d + noapi %d + dup %d + late %d + pending %d",
			s.GPURecords, s.Joined, s.GPUNoLaunch, s.GPUNoAPI, s.DuplicateGPU, s.Late, s.PendingGPU)
	}
}

func kern(pid int, corr uint32, start, end uint64, stream uint32) *GPURecord {
	return &GPURecord{PID: pid, Corr: corr, Start: start, End: end, Stream: stream, Kind: Kernel}
}

func api(pid, tid int, corr uint32, start, end uint64) *APIRecord {
	return &APIRecord{PID: pid, TID: tid, Corr: corr, Start: start, End: end}
}
