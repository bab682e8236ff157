package pprof

import (
	"fmt"
	"os"

	"github.com/specprof/specprof/model"

	"github.com/google/pprof/profile"
)

// Default bounds of each profile's tables.
const (
	DefaultMaxStacks = 1 << 16
	DefaultMaxFrames = 1 << 16
)

// File names of the profiles in a session's output directory.
const (
	GPUTimeFile  = "gpu_time.pb.gz"
	SyncWaitFile = "sync_wait.pb.gz"
	CPUFile      = "cpu.pb.gz"
)

// Options configure Profiles.
type Options struct {
	// MaxStacks bounds the distinct (stack, labels) samples of each
	// profile, MaxFrames its distinct frames (0: the defaults).
	MaxStacks, MaxFrames int
	// CPUPeriodNs is the CPU sampler's interval (1e9 / frequency); 0 takes
	// it from the samples' weight.
	CPUPeriodNs int64
	// Clock, when set, dates the profiles (TimeNanos) in wall time.
	Clock *model.Clock
}

// Profiles accumulates the three profiles of a session. It is not safe for
// concurrent use.
type Profiles struct {
	opts            Options
	gpu, sync, cpu  *table
	first, last     uint64 // CLOCK_MONOTONIC span of what was added
	cycles, samples int64
	nonKernel       int64 // copies and sets (not in gpu_time)
	unknownWait     int64 // syncs whose return was not seen
	cpuPeriod       int64
	cpuMixedWeights bool
	stack           []frameKey
	anyKernel       bool
}

// New returns empty Profiles.
func New(opts Options) *Profiles {
	if opts.MaxStacks <= 0 {
		opts.MaxStacks = DefaultMaxStacks
	}
	if opts.MaxFrames <= 0 {
		opts.MaxFrames = DefaultMaxFrames
	}
	return &Profiles{opts: opts,
		gpu:  newTable(opts.MaxStacks, opts.MaxFrames),
		sync: newTable(opts.MaxStacks, opts.MaxFrames),
		cpu:  newTable(opts.MaxStacks, opts.MaxFrames)}
}

func (p *Profiles) span(start, end uint64) {
	if start != 0 && (p.first == 0 || start < p.first) {
		p.first = start
	}
	if end > p.last {
		p.last = end
	}
}

// pyFrame appends a Python frame to the stack being built (leaf first),
// unless it is unknown or the same function as the frame below it (a
// launch made in the phase function itself): the inner frame, with the
// more precise line, stays.
func (p *Profiles) pyFrame(f model.Frame) {
	if f.IsZero() {
		return
	}
	k := frameKey{kind: kindPython, name: f.Func, file: f.File, line: int64(f.Line)}
	if n := len(p.stack); n > 0 {
		if last := p.stack[n-1]; last.kind == kindPython && last.name == k.name && last.file == k.file {
			return
		}
	}
	p.stack = append(p.stack, k)
}

// abridged appends site → phase function → cycle function (leaf first).
func (p *Profiles) abridged(t *table, site model.Frame, ph *model.PhaseTrace) {
	for _, f := range []model.Frame{ph.Func, ph.Cycle} {
		if !f.IsZero() {
			// The agent reports the matched code objects' first lines.
			t.startLine(funcKey{kindPython, f.Func, f.File}, int64(f.Line))
		}
	}
	p.pyFrame(site)
	p.pyFrame(ph.Func)
	p.pyFrame(ph.Cycle)
}

// AddCycle adds a closed cycle's kernels (gpu_time) and blocking calls
// (sync_wait). Kernels need agent.Options.Detail.
func (p *Profiles) AddCycle(c *model.CycleTrace) {
	p.cycles++
	p.span(c.Start, c.End)
	for _, ph := range c.Phases {
		for i := range ph.GPU {
			g := &ph.GPU[i]
			// Kernels, and whole graph replays under graph-level tracing
			// (their first node's start to their last node's end).
			if g.Kind != "kernel" && g.Kind != "graph" {
				p.nonKernel++
				continue
			}
			var ns int64
			if g.End > g.Start {
				ns = int64(g.End - g.Start)
			}
			name := g.Name
			if name == "" {
				name = "[unnamed kernel]"
			}
			p.stack = append(p.stack[:0], frameKey{kind: kindKernel, name: name})
			p.abridged(p.gpu, g.Site, ph)
			p.gpu.add(p.stack, labels{phase: ph.Phase, pid: int64(c.PID), tid: int64(c.TID),
				device: int64(g.Device), stream: int64(g.Stream)}, [2]int64{1, ns})
			p.anyKernel = true
		}
		for i := range ph.Syncs {
			s := &ph.Syncs[i]
			if s.WaitNs < 0 {
				p.unknownWait++
				continue
			}
			p.stack = append(p.stack[:0], frameKey{kind: kindAPI, name: s.API})
			p.abridged(p.sync, s.Site, ph)
			p.sync.add(p.stack, labels{phase: ph.Phase, pid: int64(c.PID), tid: int64(c.TID), device: -1, stream: -1},
				[2]int64{1, s.WaitNs})
		}
	}
}

// AddSample adds one CPU sample: its Python stack under the native leaf.
func (p *Profiles) AddSample(s *model.CPUSample) {
	p.samples++
	p.span(s.Time, s.Time)
	if p.cpuPeriod == 0 {
		p.cpuPeriod = s.Weight
	} else if s.Weight != p.cpuPeriod {
		p.cpuMixedWeights = true
	}
	p.stack = p.stack[:0]
	if s.Native != "" {
		p.stack = append(p.stack, frameKey{kind: kindNative, name: s.Native})
	}
	for _, f := range s.Stack {
		if !f.IsZero() {
			p.stack = append(p.stack, frameKey{kind: kindPython, name: f.Func, file: f.File, line: int64(f.Line)})
		}
	}
	if len(p.stack) == 0 {
		p.stack = append(p.stack, frameKey{kind: kindSpecial, name: "[unknown]"})
	}
	p.cpu.add(p.stack, labels{phase: s.Phase, pid: int64(s.PID), tid: int64(s.TID), device: -1, stream: -1},
		[2]int64{1, s.Weight})
}

// Folded is the number of additions that did not fit the bounds, over the
// three profiles (each also says so in its comments).
func (p *Profiles) Folded() int64 { return p.gpu.folded + p.sync.folded + p.cpu.folded }

func (p *Profiles) newProfile(types [2]*profile.ValueType, period *profile.ValueType, periodN int64) *profile.Profile {
	pr := &profile.Profile{SampleType: types[:], DefaultSampleType: types[1].Type, PeriodType: period, Period: periodN}
	if p.opts.Clock != nil && p.first != 0 {
		pr.TimeNanos = p.opts.Clock.Wall(p.first).UnixNano()
		pr.DurationNanos = int64(p.last - p.first)
	}
	return pr
}

// GPUTime builds gpu_time: GPU kernel ns by launching Python stack.
func (p *Profiles) GPUTime() *profile.Profile {
	pr := p.newProfile([2]*profile.ValueType{{Type: "kernels", Unit: "count"}, {Type: "gpu", Unit: "nanoseconds"}},
		&profile.ValueType{Type: "kernels", Unit: "count"}, 1)
	pr.Comments = append(pr.Comments, fmt.Sprintf("specprof gpu_time: GPU kernel time of %d cycles by launching Python stack "+
		"(cycle function > phase function > launch site > kernel)", p.cycles))
	if p.nonKernel > 0 {
		pr.Comments = append(pr.Comments, fmt.Sprintf("%d memory copies and sets are not kernels and not counted here", p.nonKernel))
	}
	if !p.anyKernel {
		pr.Comments = append(pr.Comments, "no GPU kernel was joined to a cycle (CUPTI library off or not connected)")
	}
	p.gpu.build(pr)
	return pr
}

// SyncWait builds sync_wait: ns the CPU was blocked, by Python stack.
func (p *Profiles) SyncWait() *profile.Profile {
	pr := p.newProfile([2]*profile.ValueType{{Type: "syncs", Unit: "count"}, {Type: "wait", Unit: "nanoseconds"}},
		&profile.ValueType{Type: "syncs", Unit: "count"}, 1)
	pr.Comments = append(pr.Comments, fmt.Sprintf("specprof sync_wait: CPU time blocked in synchronizing calls of %d cycles "+
		"(cycle function > phase function > call site > API)", p.cycles))
	if p.unknownWait > 0 {
		pr.Comments = append(pr.Comments, fmt.Sprintf("%d blocking calls whose return was not seen are not counted", p.unknownWait))
	}
	p.sync.build(pr)
	return pr
}

// CPU builds cpu: the CPU sampler's samples by Python stack and native leaf.
func (p *Profiles) CPU() *profile.Profile {
	period := p.opts.CPUPeriodNs
	if period == 0 {
		period = p.cpuPeriod
	}
	pr := p.newProfile([2]*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		&profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, period)
	if p.samples == 0 {
		pr.Comments = append(pr.Comments, "specprof cpu: no CPU samples (the sampler was off or saw no target thread)")
	} else {
		pr.Comments = append(pr.Comments, fmt.Sprintf("specprof cpu: %d CPU samples of target threads", p.samples))
	}
	if p.cpuMixedWeights {
		pr.Comments = append(pr.Comments, "samples carry different weights; the cpu values are their sums")
	}
	p.cpu.build(pr)
	return pr
}

// WriteFile writes a profile to path, gzip-compressed.
func WriteFile(pr *profile.Profile, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create profile: %w", err)
	}
	if err := pr.Write(f); err != nil {
		f.Close()
		return fmt.Errorf("write profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close profile %s: %w", path, err)
	}
	return nil
}
