package specmetrics

import (
	"math"
	"sync"
	"testing"
	"time"
)

func smp(rank int, accept, tok float64) Sample {
	return Sample{Source: SourceLog, Rank: rank, AcceptLen: accept, TokPerSec: tok}
}

func checkStats(t *testing.T, what string, got Stats, rank, n int, accept, tok, lastA, lastT float64) {
	t.Helper()
	if got.Rank != rank || got.Samples != n || !sameFloat(got.AcceptLen, accept) || !sameFloat(got.TokPerSec, tok) ||
		!sameFloat(got.LastAcceptLen, lastA) || !sameFloat(got.LastTokPerSec, lastT) {
		t.Errorf("%s = %+v\nwant rank %d, n %d, accept %v, tok %v, last %v/%v", what, got, rank, n, accept, tok, lastA, lastT)
	}
}

func TestTrackerEmpty(t *testing.T) {
	var tr Tracker
	for name, s := range map[string]Summary{"window": tr.Window(), "total": tr.Total()} {
		checkStats(t, name, s.Stats, -1, 0, nan, nan, nan, nan)
		if s.HasAccept || s.HasTok || s.Ranks != nil || !s.LastAt.IsZero() {
			t.Errorf("%s = %+v", name, s)
		}
	}
}

func TestTrackerWindowAndTotal(t *testing.T) {
	var tr Tracker
	tr.Add(smp(0, 2, 100))
	tr.Add(smp(1, 3, 100))
	tr.Add(smp(0, 4, nan)) // accept only: counts for accept, not for tok
	w := tr.Window()
	checkStats(t, "window 1", w.Stats, -1, 3, 3, 100, 4, 100)
	if !w.HasAccept || !w.HasTok {
		t.Errorf("window 1 flags %v %v", w.HasAccept, w.HasTok)
	}
	if len(w.Ranks) != 2 {
		t.Fatalf("window 1 ranks %+v", w.Ranks)
	}
	checkStats(t, "window 1 rank 0", w.Ranks[0], 0, 2, 3, 100, 4, 100)
	checkStats(t, "window 1 rank 1", w.Ranks[1], 1, 1, 3, 100, 3, 100)

	// Empty window: means NaN, but the flags remember the session.
	w = tr.Window()
	checkStats(t, "window 2", w.Stats, -1, 0, nan, nan, nan, nan)
	if !w.HasAccept || !w.HasTok || w.Ranks != nil {
		t.Errorf("window 2 = %+v", w)
	}

	tr.Add(smp(1, nan, 40)) // throughput only
	tr.Add(smp(-1, 1.5, 20))
	w = tr.Window()
	checkStats(t, "window 3", w.Stats, -1, 2, 1.5, 30, 1.5, 20)
	if len(w.Ranks) != 1 {
		t.Fatalf("window 3 ranks %+v (unknown rank must not get an entry)", w.Ranks)
	}
	checkStats(t, "window 3 rank 1", w.Ranks[0], 1, 1, nan, 40, nan, 40)

	tot := tr.Total()
	// accept: 2,3,4,1.5 → 2.625; tok: 100,100,40,20 → 65.
	checkStats(t, "total", tot.Stats, -1, 5, 2.625, 65, 1.5, 20)
	if len(tot.Ranks) != 2 {
		t.Fatalf("total ranks %+v", tot.Ranks)
	}
	checkStats(t, "total rank 0", tot.Ranks[0], 0, 2, 3, 100, 4, 100)
	checkStats(t, "total rank 1", tot.Ranks[1], 1, 2, 3, 70, 3, 40)
	// Total does not reset anything.
	if again := tr.Total(); again.Samples != 5 {
		t.Errorf("second Total: %d samples", again.Samples)
	}
}

func TestTrackerFlagsOnlyForSeenMetrics(t *testing.T) {
	var tr Tracker
	tr.Add(smp(0, nan, 55)) // a non-spec server: throughput only
	s := tr.Total()
	if s.HasAccept || !s.HasTok {
		t.Errorf("flags %v %v, want false true", s.HasAccept, s.HasTok)
	}
	if !math.IsNaN(s.AcceptLen) {
		t.Errorf("AcceptLen %v, want NaN", s.AcceptLen)
	}
}

func TestTrackerLastAt(t *testing.T) {
	var tr Tracker
	t1 := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	t2 := t1.Add(time.Second)
	tr.Add(Sample{Rank: 0, AcceptLen: 2, TokPerSec: nan, At: t1})
	tr.Add(Sample{Rank: 1, AcceptLen: 2, TokPerSec: nan, At: t2})
	s := tr.Total()
	if !s.LastAt.Equal(t2) || !s.Ranks[0].LastAt.Equal(t1) || !s.Ranks[1].LastAt.Equal(t2) {
		t.Errorf("LastAt %v, ranks %v %v", s.LastAt, s.Ranks[0].LastAt, s.Ranks[1].LastAt)
	}
}

func TestTrackerConcurrent(t *testing.T) {
	var tr Tracker
	var wg sync.WaitGroup
	windowed := 0
	var mu sync.Mutex
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				tr.Add(smp(g, 2, 10))
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			w := tr.Window()
			mu.Lock()
			windowed += w.Samples
			mu.Unlock()
		}
	}()
	wg.Wait()
	<-done
	windowed += tr.Window().Samples
	if windowed != 1000 || tr.Total().Samples != 1000 {
		t.Errorf("windows saw %d, total %d; want 1000 each", windowed, tr.Total().Samples)
	}
}
