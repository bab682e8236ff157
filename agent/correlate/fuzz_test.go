package correlate

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// garbage drives a Joiner with arbitrary operations: overlapping API
// windows, inverted intervals, timestamps at 0 and 2^64-1, watermarks out of
// order, reused correlation ids, flushes at random. It must never panic and
// its books must always balance.
func garbage(t testing.TB, next func(n uint64) uint64, ops int, o Options[Key]) {
	finals := map[Key]int{}
	o.OnFinal = func(k Key, s *KeyStats) {
		finals[k]++
		if s.Kernels+s.Graphs == 0 && (s.BusyNs != 0 || s.SpanNs() != 0) {
			t.Fatalf("no kernels but %+v", s)
		}
		if s.BusyNs > s.KernelNs+s.GraphNs || s.BusyNs > s.SpanNs() {
			t.Fatalf("busy exceeds sum or span: %+v", s)
		}
	}
	j, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	tm := func() uint64 {
		switch next(8) {
		case 0:
			return 0
		case 1:
			return math.MaxUint64 - next(3)
		}
		return next(5000)
	}
	for range ops {
		pid := int(next(3))
		switch next(12) {
		case 0, 1, 2:
			j.Launch(pid, int(next(4)), tm(), Key{Cycle: int(next(6)), Phase: uint16(next(3))})
		case 3, 4, 5:
			a := APIRecord{PID: pid, TID: int(next(4)), Corr: uint32(next(40)), Start: tm()}
			a.End = a.Start + next(300)
			if next(10) == 0 {
				a.End = tm()
			}
			j.API(&a)
		case 6, 7, 8:
			g := GPURecord{PID: pid, Corr: uint32(next(40)), Start: tm(), Stream: uint32(next(3)), Kind: Kind(next(4)), Bytes: next(100)}
			g.End = g.Start + next(300)
			if next(10) == 0 {
				g.End = tm()
			}
			j.GPU(&g)
		case 9:
			j.AdvanceCPU(pid, tm())
		case 10:
			j.AdvanceGPU(pid, tm())
		case 11:
			if next(4) == 0 {
				j.Flush()
			} else {
				j.FlushPID(pid)
			}
		}
		checkIdentities(t, j.Stats())
	}
	j.Flush()
	s := j.Stats()
	checkIdentities(t, s)
	if s.PendingLaunches+s.PendingAPIs+s.PendingGPU+s.OpenKeys != 0 {
		t.Fatalf("pending after Flush: %+v", s)
	}
	var n uint64
	for _, c := range finals {
		n += uint64(c)
	}
	if n != s.KeysFinalized {
		t.Fatalf("%d finals, stats say %d", n, s.KeysFinalized)
	}
}

func garbageOptions(sel uint64) Options[Key] {
	o := Options[Key]{Horizon: time.Duration(1 + sel%700), CPUHorizon: time.Duration(int64(sel%50) - 10), Slack: time.Duration(sel % 7)}
	if sel%2 == 0 {
		o.MaxLaunches, o.MaxAPIs, o.MaxGPU, o.MaxCorrs, o.MaxKeys, o.MaxDedup = 3, 3, 5, 6, 2, 4
	}
	o.PerName = sel%3 == 0
	o.OnJoin = func(Key, *GPURecord) {}
	o.OnUnjoined = func(*GPURecord, Reason) {}
	return o
}

func TestGarbage(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 40
	}
	for seed := range n {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		garbage(t, func(n uint64) uint64 { return rng.Uint64N(n) }, 3000, garbageOptions(uint64(seed)))
	}
}

func FuzzJoiner(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte("launch api gpu advance flush \x00\xff\x80"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		sel := uint64(data[0])
		data = data[1:]
		next := func(n uint64) uint64 {
			if len(data) == 0 {
				return 0
			}
			var b [8]byte
			k := copy(b[:], data[:min(2, len(data))])
			data = data[k:]
			return binary.LittleEndian.Uint64(b[:]) % n
		}
		garbage(t, next, len(data)/4+1, garbageOptions(sel))
	})
}
