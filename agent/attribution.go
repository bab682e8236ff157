package agent

import (
	"sort"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/agent/correlate"
	"github.com/specprof/specprof/bpf"
)

// How much of a process's GPU work the phase rules attributed: launches,
// and the kernel time CUPTI records joined to them, that fell in phase
// "other" (no rule matched any frame) or outside every cycle (the cycle
// function was not on the stack), with the innermost Python frames that
// made them. Code the rules do not know (a new server release, another
// framework) shows up here.

// maxAttrFrames bounds the distinct frames counted per process; launches
// from frames past it are counted under one "(more frames)" entry.
const maxAttrFrames = 4096

// attrState is a process's attribution accounting.
type attrState struct {
	model.Attribution
	frames map[model.Frame]*model.FrameStats
	more   *model.FrameStats // past maxAttrFrames
	memo   launchMemo
}

// launchRef names one launch of a process.
type launchRef struct {
	tid   int
	ktime uint64
}

// launchInfo is what an unattributed launch's GPU records are added to.
type launchInfo struct {
	frame *model.FrameStats
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
		p.attr = &attrState{frames: map[model.Frame]*model.FrameStats{}}
	}
	return p.attr
}

func (s *attrState) frame(f model.Frame) *model.FrameStats {
	fs := s.frames[f]
	if fs != nil {
		return fs
	}
	if len(s.frames) >= maxAttrFrames {
		if s.more == nil {
			s.more = &model.FrameStats{Frame: model.Frame{Func: "(more frames)"}}
		}
		return s.more
	}
	fs = &model.FrameStats{Frame: f}
	s.frames[f] = fs
	return fs
}

// noteLaunch counts a kernel or graph launch of phase ph, made while the
// thread is (or is not) in a cycle; an unattributed one is remembered
// with its innermost frame for its GPU records.
func (a *Agent) noteLaunch(p *process, t *thread, e *bpf.APIEvent, ph uint16, connected bool) {
	s := p.attribution()
	s.Launches++
	if !connected {
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
func (s *attrState) report(gpu bool) *model.Attribution {
	if s == nil || s.Launches == 0 {
		return nil
	}
	r := s.Attribution
	r.GPU = gpu || r.GPUNs > 0
	all := make([]*model.FrameStats, 0, len(s.frames)+1)
	for _, f := range s.frames {
		c := *f
		all = append(all, &c)
	}
	if s.more != nil {
		c := *s.more
		all = append(all, &c)
	}
	top := func(val func(*model.FrameStats) int64) []*model.FrameStats {
		sort.Slice(all, func(i, j int) bool {
			if vi, vj := val(all[i]), val(all[j]); vi != vj {
				return vi > vj
			}
			return all[i].Frame.String() < all[j].Frame.String()
		})
		var out []*model.FrameStats
		for _, f := range all {
			if len(out) == model.MaxTopFrames || val(f) == 0 {
				break
			}
			out = append(out, f)
		}
		return out
	}
	r.TopByLaunches = top(func(f *model.FrameStats) int64 { return f.Launches })
	if r.GPU {
		r.TopByGPU = top(func(f *model.FrameStats) int64 { return f.GPUNs })
	}
	return &r
}
