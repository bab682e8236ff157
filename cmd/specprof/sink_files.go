package main

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/google/pprof/profile"
	"github.com/spf13/pflag"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/export/perfetto"
	"github.com/specprof/specprof/export/pprof"
)

// Files written at the end of a session into its output directory: the
// pprof profiles (export/pprof) and the Perfetto timeline
// (export/perfetto). Both keep what they need in memory, bounded, while the
// session runs.

var filesFlags struct {
	pprof          bool
	perfetto       bool
	perfettoEvents int
}

func init() {
	registerSink(sinkKind{
		name: "pprof",
		flags: func(fl *pflag.FlagSet) {
			fl.BoolVar(&filesFlags.pprof, "pprof", true, "write the pprof profiles "+pprof.GPUTimeFile+", "+pprof.SyncWaitFile+" and "+pprof.CPUFile+
				" to the output directory (with --perfetto=false too, specprof stops collecting every GPU record)")
		},
		make: func(s *session) (sink, error) {
			if !filesFlags.pprof {
				return nil, nil
			}
			s.detail = true // gpu_time needs every kernel with its launch site
			return &pprofSink{p: pprof.New(pprof.Options{Clock: &s.clock})}, nil
		},
	})
	registerSink(sinkKind{
		name: "Perfetto",
		flags: func(fl *pflag.FlagSet) {
			fl.BoolVar(&filesFlags.perfetto, "perfetto", true, "write the timeline "+perfetto.FileName+
				" (Chrome trace JSON: open it at ui.perfetto.dev) to the output directory")
			fl.IntVar(&filesFlags.perfettoEvents, "perfetto-max-events", perfetto.DefaultMaxEvents,
				"events kept for the timeline (about 150 bytes each), beyond which whole cycles are counted, not kept")
		},
		make: func(s *session) (sink, error) {
			if !filesFlags.perfetto {
				return nil, nil
			}
			if filesFlags.perfettoEvents < 1 {
				return nil, fmt.Errorf("--perfetto-max-events %d: must be 1 or more", filesFlags.perfettoEvents)
			}
			s.detail = true // kernels on their streams, launch arrows
			return &perfettoSink{t: perfetto.New(perfetto.Options{MaxEvents: filesFlags.perfettoEvents, Clock: &s.clock})}, nil
		},
	})
}

// pprofSink accumulates the three profiles.
type pprofSink struct {
	mu sync.Mutex
	p  *pprof.Profiles
}

func (k *pprofSink) cycle(c *agent.CycleTrace) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.p.AddCycle(c)
}

func (k *pprofSink) sample(s *agent.CPUSample) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.p.AddSample(s)
}

// dropped implements dropReporter: additions folded into the overflow
// sample (still counted in the totals, without their stacks).
func (k *pprofSink) dropped() (string, uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return "pprof", uint64(k.p.Folded())
}

func (k *pprofSink) finish(_ *agent.Report, dir *outDir) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var files []string
	var errs []error
	for _, f := range []struct {
		name string
		prof *profile.Profile
	}{{pprof.GPUTimeFile, k.p.GPUTime()}, {pprof.SyncWaitFile, k.p.SyncWait()}, {pprof.CPUFile, k.p.CPU()}} {
		err := writeOutput(dir, f.name, f.prof.Write)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, dir.join(f.name))
	}
	return files, errors.Join(errs...)
}

// writeOutput creates name in dir and has write fill it.
func writeOutput(dir *outDir, name string, write func(io.Writer) error) error {
	f, err := dir.create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return nil
}

// perfettoSink accumulates the timeline.
type perfettoSink struct {
	mu sync.Mutex
	t  *perfetto.Trace
}

func (k *perfettoSink) cycle(c *agent.CycleTrace) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.t.AddCycle(c)
}

func (k *perfettoSink) sample(*agent.CPUSample) {}

// dropped implements dropReporter: events of cycles beyond the cap.
func (k *perfettoSink) dropped() (string, uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ev := k.t.Dropped()
	return "perfetto", uint64(ev)
}

// exportStats implements exportAccounter: the events of the cycles beyond
// the cap, left out of the timeline.
func (k *perfettoSink) exportStats() *agent.ExportStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ev := k.t.Dropped()
	e := &agent.ExportStats{Exporter: "perfetto", Unit: "events", Dropped: uint64(ev)}
	if c > 0 {
		e.Detail = fmt.Sprintf("%d cycles beyond --perfetto-max-events %d", c, filesFlags.perfettoEvents)
	}
	return e
}

func (k *perfettoSink) finish(_ *agent.Report, dir *outDir) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := writeOutput(dir, perfetto.FileName, k.t.Write); err != nil {
		return nil, err
	}
	path := dir.join(perfetto.FileName)
	if c, ev := k.t.Dropped(); c > 0 {
		return []string{path}, fmt.Errorf("%s: %d cycles (%d events) beyond --perfetto-max-events %d are not in the timeline",
			path, c, ev, filesFlags.perfettoEvents)
	}
	return []string{path}, nil
}
