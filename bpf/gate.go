package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The library-open gate: a process traced with stopOnLib is stopped (SIGSTOP,
// from BPF) when it opens libcuda or libnccl, so that the agent attaches its
// probes before the library's first call, and resumed by the agent after. The
// kernel map `gated` holds every process stopped that way (pid → CLOCK_MONOTONIC
// time of the stop), written before the stop is sent; whoever resumes a
// process takes its entry first. A gate watchdog — a process apart from the
// agent that holds the map — resumes those left stopped: all of them as soon as
// the agent is gone (killed, crashed), and any stopped for longer than its
// timeout while the agent lives (stopped, stalled). So a process is never left
// stopped by specprof, whatever happens to the agent.

// GateMap is the map of gated processes, for the gate watchdog (pass its FD to
// the watchdog's process; see OpenGateMap).
func (t *Tracer) GateMap() *ebpf.Map { return t.objs.Gated }

// released marks a gated entry the watchdog resumed: the agent, finding it
// in place of a stop time, knows it came late (an exited process's entry is
// gone instead).
const released = ^uint64(0)

// Ungate removes pid from the gated processes before the agent resumes it.
// It reports false when the watchdog resumed it already (the agent was late).
func (t *Tracer) Ungate(pid int) (bool, error) {
	var at uint64
	err := t.objs.Gated.LookupAndDelete(uint32(pid), &at)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return true, nil // exited while stopped (its exit removes the entry)
	}
	if err != nil {
		return false, fmt.Errorf("remove pid %d from the gated processes: %w", pid, err)
	}
	return at != released, nil
}

// TrackedPIDs lists the processes the kernel side follows: those added with
// Track and every process they forked since. A fork whose record was lost to
// a full ring buffer is found here.
func (t *Tracer) TrackedPIDs() ([]int, error) {
	var (
		k, v uint32
		out  []int
	)
	it := t.objs.Tracked.Iterate()
	for it.Next(&k, &v) {
		out = append(out, int(k))
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("list tracked processes: %w", err)
	}
	return out, nil
}

// IsTracked reports whether the kernel side follows pid (Track, or forked
// from a tracked process).
func (t *Tracer) IsTracked(pid int) bool {
	var flags uint32
	return t.objs.Tracked.Lookup(uint32(pid), &flags) == nil
}

// OpenGateMap opens the gated-process map from a file descriptor inherited
// from the agent (the watchdog's side of GateMap).
func OpenGateMap(fd int) (*ebpf.Map, error) {
	m, err := ebpf.NewMapFromFD(fd)
	if err != nil {
		return nil, fmt.Errorf("open the gated-process map from fd %d: %w", fd, err)
	}
	info, err := m.Info()
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("inspect the map on fd %d: %w", fd, err)
	}
	if info.Type != ebpf.Hash || info.KeySize != 4 || info.ValueSize != 8 {
		m.Close()
		return nil, fmt.Errorf("fd %d is not the gated-process map (%v, key %d, value %d bytes)", fd, info.Type, info.KeySize, info.ValueSize)
	}
	return m, nil
}

// GateWatch resumes gated processes that the agent does not resume in time.
type GateWatch struct {
	// Map is the gated-process map (OpenGateMap).
	Map *ebpf.Map
	// Timeout is how long a process may stay gated while the agent lives;
	// past it the watchdog resumes it (its first calls may then go
	// unprobed: the agent reports the late release).
	Timeout time.Duration
	// Settle is how long the watchdog goes on sweeping after the agent is
	// gone: its programs stay attached until the kernel has closed every
	// file of the dead agent, and may stop a process until then.
	Settle time.Duration
	// Log receives a line for every process the watchdog resumes.
	Log *slog.Logger
	// resume sends SIGCONT; tests replace it.
	resume func(pid int) error
}

// Run sweeps the map until agentGone is closed, then resumes every gated
// process, sweeps for Settle more and returns the number of processes it
// resumed.
func (g *GateWatch) Run(agentGone <-chan struct{}) int {
	poll := g.Timeout / 4
	if poll <= 0 || poll > 100*time.Millisecond {
		poll = 100 * time.Millisecond
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-tick.C:
			n += g.sweep(g.Timeout, "the agent did not resume it in time")
			continue
		case <-agentGone:
		}
		break
	}
	end := time.Now().Add(g.Settle)
	for {
		n += g.sweep(0, "the agent is gone")
		if time.Now().After(end) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweep resumes every process gated for at least minAge.
func (g *GateWatch) sweep(minAge time.Duration, why string) int {
	if g.Log == nil {
		g.Log = slog.New(slog.DiscardHandler)
	}
	if g.resume == nil {
		g.resume = func(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }
	}
	now, err := monotonic()
	if err != nil {
		g.Log.Error("gate watchdog: read the clock", "err", err)
		return 0
	}
	var (
		pid  uint32
		at   uint64
		late []uint32
	)
	it := g.Map.Iterate()
	for it.Next(&pid, &at) {
		if at != released && now >= at && time.Duration(now-at) >= minAge {
			late = append(late, pid)
		}
	}
	if err := it.Err(); err != nil {
		g.Log.Error("gate watchdog: list gated processes", "err", err)
	}
	n := 0
	for _, pid := range late {
		// Marked first: the agent, finding the mark, knows it came late;
		// it fails when the agent took the entry in between.
		if err := g.Map.Update(pid, released, ebpf.UpdateExist); err != nil {
			continue
		}
		if err := g.resume(int(pid)); err != nil && !errors.Is(err, syscall.ESRCH) {
			g.Log.Error("gate watchdog: resume process", "pid", pid, "err", err)
			continue
		}
		n++
		g.Log.Warn("gate watchdog: resumed a process stopped at a library open", "pid", pid, "why", why)
	}
	return n
}

func monotonic() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_MONOTONIC): %w", err)
	}
	return uint64(ts.Nano()), nil
}

// AgentGone returns a channel closed when the read end f of a pipe, whose
// write end only the agent holds, reaches end of file: when the agent has
// exited, however it ended.
func AgentGone(f *os.File) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		var b [64]byte
		for {
			if _, err := f.Read(b[:]); err != nil {
				close(ch)
				return
			}
		}
	}()
	return ch
}
