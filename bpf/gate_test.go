package bpf

import (
	"sort"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// TestGateWatch: the watchdog resumes a process gated longer than its
// timeout (and only those) while the agent lives, marks it so the agent's
// Ungate reports the late release, and resumes every gated process once the
// agent is gone.
func TestGateWatch(t *testing.T) {
	requireRoot(t)
	tr, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	m := tr.GateMap()
	now, err := monotonic()
	if err != nil {
		t.Fatal(err)
	}
	put := func(pid uint32, age time.Duration) {
		if err := m.Put(pid, now-uint64(age)); err != nil {
			t.Fatal(err)
		}
	}
	put(101, 2*time.Second) // overdue
	put(102, 0)             // within the timeout
	var resumed []int
	g := &GateWatch{Map: m, Timeout: time.Second, resume: func(pid int) error {
		resumed = append(resumed, pid)
		return nil
	}}
	if n := g.sweep(g.Timeout, "test"); n != 1 || len(resumed) != 1 || resumed[0] != 101 {
		t.Fatalf("sweep resumed %v (%d), want [101]", resumed, n)
	}
	if n := g.sweep(g.Timeout, "test"); n != 0 {
		t.Fatalf("second sweep resumed %d more, want none (101 is marked released)", n)
	}
	if ours, err := tr.Ungate(101); err != nil || ours {
		t.Errorf("Ungate(101) after the watchdog's release = %v, %v; want false", ours, err)
	}
	if ours, err := tr.Ungate(102); err != nil || !ours {
		t.Errorf("Ungate(102), still gated = %v, %v; want true", ours, err)
	}
	put(103, 0)
	put(104, 0)
	resumed = nil
	gone := make(chan struct{})
	close(gone)
	g.Settle = 20 * time.Millisecond
	if n := g.Run(gone); n != 2 {
		t.Errorf("after the agent's end the watchdog resumed %d, want 2", n)
	}
	sort.Ints(resumed)
	if len(resumed) != 2 || resumed[0] != 103 || resumed[1] != 104 {
		t.Errorf("resumed %v, want [103 104]", resumed)
	}
	// Its own map type check refuses another map.
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := OpenGateMap(other.FD()); err == nil {
		t.Error("OpenGateMap took an array map")
	}
}
