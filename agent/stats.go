package agent

import (
	"sort"

	"github.com/specprof/specprof/model"
)

func sortedStats(m map[uint16]*model.PhaseStats, order func(uint16) int) []*model.PhaseStats {
	ids := make([]uint16, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return order(ids[i]) < order(ids[j]) })
	out := make([]*model.PhaseStats, 0, len(ids))
	for _, id := range ids {
		out = append(out, m[id])
	}
	return out
}
