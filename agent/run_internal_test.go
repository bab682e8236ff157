package agent

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/specprof/specprof/agent/phase"
)

// busyProbes stands in for the ring buffer of a target that launches
// without pause: a record is always ready until the process's probes are
// removed, then a backlog of 100 records, then nothing (deadline).
type busyProbes struct {
	noProbes
	mu       sync.Mutex
	detached map[int]bool
	backlog  int
}

func (b *busyProbes) Read() (any, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.detached) == 0 {
		return struct{}{}, nil
	}
	if b.backlog > 0 {
		b.backlog--
		return struct{}{}, nil
	}
	time.Sleep(time.Millisecond)
	return nil, os.ErrDeadlineExceeded
}

func (b *busyProbes) DetachLibraries(pid int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.detached[pid] = true
}

// TestRunStopsOnBusyTarget: a cancelled session ends while the target goes
// on launching (attach --duration, Ctrl-C). Before, Run looked at the
// context only when a read timed out, which a busy target never let happen:
// `specprof attach --duration 12s` ran until the target exited. Now Run
// removes the probes and drains the backlog.
func TestRunStopsOnBusyTarget(t *testing.T) {
	pr := &busyProbes{detached: map[int]bool{}, backlog: 100}
	a, err := New(pr, Options{Preset: &phase.Preset{Name: "empty"}})
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.proc(os.Getpid())
	a.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(drainLimit + 5*time.Second):
		t.Fatal("Run did not return after cancellation while records kept arriving")
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if !pr.detached[os.Getpid()] {
		t.Errorf("the traced process's probes were not removed at the end (detached: %v)", pr.detached)
	}
	if pr.backlog != 0 {
		t.Errorf("%d records of the backlog left unread", pr.backlog)
	}
}
