package agent

import (
	"sort"

	"github.com/specprof/specprof/model"
)

// Host gaps: the time a thread's GPU work sat idle, waiting for the host,
// between the GPU work of consecutive phases (PhaseStats.GPUHostGapNs). A
// phase that starts on an idle GPU, or ends in a host sync followed by CPU
// work, has CUDA events around it that count host time no GPU record holds;
// the gaps show where that time went, and make the cycle's GPU timeline add
// up: the phases' elapsed times plus their gaps.

// gapMark is where the previous folded cycle's GPU work ended.
type gapMark struct {
	cycle int    // its number, 0 when none
	end   uint64 // its last GPU work's end
}

// hostGaps sets the host gap of each phase of cc that has GPU work, in the
// order that work started: the idle time since the latest end of the
// thread's earlier GPU work of this cycle or, for the first, of the cycle
// just before it (when that one was traced too). Called as cc is folded, in
// cycle order.
func (t *thread) hostGaps(cc *closedCycle) {
	prev := t.gapPrev
	t.gapPrev = gapMark{}
	if !cc.gpu {
		return
	}
	var ph []*model.PhaseStats
	for _, s := range cc.phases {
		if s.GPUFirst != 0 && s.GPULast >= s.GPUFirst {
			ph = append(ph, s)
		}
	}
	if len(ph) == 0 {
		return
	}
	sort.Slice(ph, func(i, j int) bool { return ph[i].GPUFirst < ph[j].GPUFirst })
	var end uint64
	if prev.cycle != 0 && prev.cycle == cc.no-1 {
		end = prev.end
	}
	for _, s := range ph {
		if end != 0 && s.GPUFirst > end {
			s.GPUHostGapNs = int64(s.GPUFirst - end)
		}
		end = max(end, s.GPULast)
	}
	t.gapPrev = gapMark{cycle: cc.no, end: end}
}
