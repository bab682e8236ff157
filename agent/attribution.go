package agent

import (
	"sort"

	"github.com/specprof/specprof/agent/correlate"
	"github.com/specprof/specprof/bpf"
)

// How much of a process's GPU work the phase rules attributed: launches,
// and the kernel time CUPTI records joined to them, that fell in phase
// "other" (no rule matched any frame) or outside every cycle (the cycle
// function was not on the stack), with the innermost Python frames that
// made them. Code the rules do not know (a new server release, another
// framework) shows up here.

// MaxTopFrames is how many frames Attribution lists, by launches and by GPU
// time.
const MaxTopFrames = 20

// maxAttrFrames bounds the distinct frames counted per process; launches
// from frames past it are counted under one "(more frames)" entry.
const maxAttrFrames = 4096

// Attribution accounts for the launches of one process and their GPU
// kernel time: how much the phase rules attributed (a named phase, inside
// a cycle) and how much they did not.
type Attribution struct {
	// Launches counts kernel and graph launches.
	Launches int64 `json:"launches"`
	// OtherLaunches matched no rule (phase "other"), inside cycles or not.
	OtherLaunches int64 `json:"launches_phase_other"`
	// OutsideLaunches were made outside every cycle, in any phase.
	OutsideLaunches int64 `json:"launches_outside_cycles"`
	// UnattributedLaunches were in phase "other" or outside every cycle
	// (or both).
	UnattributedLaunches int64 `json:"launches_unattributed"`
	// LaunchesWithoutGPU were made before the process's CUPTI library
	// connection was known (or with GPU records off): their kernel time is
	// in none of the GPU figures.
	LaunchesWithoutGPU int64 `json:"launches_without_gpu_records,omitempty"`
	// GPU says whether GPU time is known (the process's CUPTI library
	// connected); the GPU fields are zero otherwise.
	GPU bool `json:"gpu"`
	// GPUNs is the kernel time of the CUPTI records joined to the
	// launches: kernel durations summed (whole graph executions with
	// --cupti-graphs graph). Copies are not counted.
	GPUNs int64 `json:"gpu_kernel_ns"`
	// OtherGPUNs, OutsideGPUNs and UnattributedGPUNs split it as the
	// launch counts are split.
	OtherGPUNs        int64 `json:"gpu_kernel_ns_phase_other"`
	OutsideGPUNs      int64 `json:"gpu_kernel_ns_outside_cycles"`
	UnattributedGPUNs int64 `json:"gpu_kernel_ns_unattributed"`
	// UnknownFrameGPUNs is unattributed kernel time whose launch's frame
	// was no longer remembered when its records came (more than 131072
	// unattributed launches of the process in between): in
	// UnattributedGPUNs, in no frame of TopByGPU.
	UnknownFrameGPUNs int64 `json:"gpu_kernel_ns_frame_unknown,omitempty"`
	// TopByLaunches and TopByGPU list the innermost Python frames (the
	// function, its file and the line of the call) that made the most
	// unattributed launches, and the most unattributed kernel time, at
	// most MaxTopFrames each.
	TopByLaunches []*FrameStats `json:"top_frames_by_launches,omitempty"`
	TopByGPU      []*FrameStats `json:"top_frames_by_gpu_time,omitempty"`
}

// FrameStats counts the unattributed launches made from one innermost
// Python frame, and their GPU kernel time.
type FrameStats struct {
	// Frame is the innermost Python frame of the launches: co_qualname
	// (co_name on 3.10), co_filename and the line of the call. Empty when
	// unknown; "(more frames)" past the agent's bound on distinct frames.
	Frame    Frame `json:"frame"`
	Launches int64 `json:"launches"`
	// Other and OutsideCycles split Launches (a launch may be both).
	Other         int64 `json:"launches_phase_other"`
	OutsideCycles int64 `json:"launches_outside_cycles"`
	GPUNs         int64 `json:"gpu_kernel_ns"`
}

// attrState is a process's attribution accounting.
type attrState struct {
	Attribution
	frames map[Frame]*FrameStats
	more   *FrameStats // past maxAttrFrames
	memo   launchMemo
}

// launchRef names one launch of a process.
type launchRef struct {
	tid   int
	ktime uint64
}

// launchInfo is what an unattributed launch's GPU records are added to.
type launchInfo struct {
	frame *FrameStats
	node  *treeNode // with a call tree (calltree.go)
}

// launchMemo remembers unattributed launches until their GPU records have
// come, in two generations of maxMemo each: a launch is forgotten only
// after maxMemo later ones.
type launchMemo struct {
	cur, prev map[launchRef]launchInfo
}

const maxMemo = 1 << 16

func (m *launchMemo) put(k launchRef, v launchInfo) {
	if m.cur == nil || len(m.cur) >= maxMemo {
		m.prev, m.cur = m.cur, make(map[launchRef]launchInfo, 1024)
	}
	m.cur[k] = v
}

func (m *launchMemo) get(k launchRef) (launchInfo, bool) {
	if v, ok := m.cur[k]; ok {
		return v, true
	}
	v, ok := m.prev[k]
	return v, ok
}

func (p *process) attribution() *attrState {
	if p.attr == nil {
		p.attr = &attrState{frames: map[Frame]*FrameStats{}}
	}
	return p.attr
}

func (s *attrState) frame(f Frame) *FrameStats {
	fs := s.frames[f]
	if fs != nil {
		return fs
	}
	if len(s.frames) >= maxAttrFrames {
		if s.more == nil {
			s.more = &FrameStats{Frame: Frame{Func: "(more frames)"}}
		}
		return s.more
	}
	fs = &FrameStats{Frame: f}
	s.frames[f] = fs
	return fs
}

// noteLaunch counts a kernel or graph launch of phase ph, made while the
// thread is (or is not) in a cycle; an unattributed one is remembered
// with its innermost frame for its GPU records.
func (a *Agent) noteLaunch(p *process, t *thread, e *bpf.APIEvent, ph uint16) {
	s := p.attribution()
	s.Launches++
	if !a.gpu.connected(p.pid) {
		s.LaunchesWithoutGPU++
	}
	other, outside := ph == 0, !t.inCycle
	if other {
		s.OtherLaunches++
	}
	if outside {
		s.OutsideLaunches++
	}
	node := a.treeLaunch(p, t, e, ph)
	if !other && !outside {
		return
	}
	s.UnattributedLaunches++
	fs := s.frame(a.frameOf(p, e.Py.LeafCode, e.Py.LeafInstr))
	fs.Launches++
	if other {
		fs.Other++
	}
	if outside {
		fs.OutsideCycles++
	}
	s.memo.put(launchRef{t.tid, e.Ktime}, launchInfo{frame: fs, node: node})
}

// attributeGPU counts a joined GPU record's kernel time.
func (a *Agent) attributeGPU(k correlate.Key, r *correlate.GPURecord) {
	if r.Kind != correlate.Kernel && r.Kind != correlate.Graph || r.End <= r.Start {
		return
	}
	p := a.procs[r.PID]
	if p == nil {
		return
	}
	s := p.attribution()
	d := int64(r.End - r.Start)
	s.GPUNs += d
	other, outside := k.Phase == 0, k.Cycle <= 0
	if other {
		s.OtherGPUNs += d
	}
	if outside {
		s.OutsideGPUNs += d
	}
	if !other && !outside {
		return
	}
	s.UnattributedGPUNs += d
	li, ok := s.memo.get(launchRef{k.Thread, r.Launch})
	if !ok {
		s.UnknownFrameGPUNs += d
		return
	}
	li.frame.GPUNs += d
	for n := li.node; n != nil; n = n.parent {
		n.GPUNs += d
	}
}

// report returns the process's attribution, with its top frames.
func (s *attrState) report(gpu bool) *Attribution {
	if s == nil || s.Launches == 0 {
		return nil
	}
	r := s.Attribution
	r.GPU = gpu || r.GPUNs > 0
	all := make([]*FrameStats, 0, len(s.frames)+1)
	for _, f := range s.frames {
		c := *f
		all = append(all, &c)
	}
	if s.more != nil {
		c := *s.more
		all = append(all, &c)
	}
	top := func(val func(*FrameStats) int64) []*FrameStats {
		sort.Slice(all, func(i, j int) bool {
			if vi, vj := val(all[i]), val(all[j]); vi != vj {
				return vi > vj
			}
			return all[i].Frame.String() < all[j].Frame.String()
		})
		var out []*FrameStats
		for _, f := range all {
			if len(out) == MaxTopFrames || val(f) == 0 {
				break
			}
			out = append(out, f)
		}
		return out
	}
	r.TopByLaunches = top(func(f *FrameStats) int64 { return f.Launches })
	if r.GPU {
		r.TopByGPU = top(func(f *FrameStats) int64 { return f.GPUNs })
	}
	return &r
}
