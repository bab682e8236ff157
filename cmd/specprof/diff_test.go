package main

import (
	"strings"
	"testing"

	"github.com/specprof/specprof/model"
)

func TestDiff(t *testing.T) {
	mk := func(cycles int, busy int64) *model.Report {
		return &model.Report{Processes: []*model.ProcessReport{{Threads: []*model.ThreadReport{{
			Cycles: cycles, CycleNs: int64(cycles) * 2e6,
			Phases: []*model.PhaseStats{{Phase: "spec.draft", GPUBusyNs: busy, GPUKernels: int64(cycles) * 4, Launches: int64(cycles)}},
		}}}}}
	}
	var b strings.Builder
	if err := writeDiff(&b, "a", "b", mk(10, 10e6), mk(20, 40e6)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// 1 ms/cycle -> 2 ms/cycle of draft GPU busy: +100 %.
	for _, want := range []string{"gpu busy ms", "1.000", "2.000", "+100.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
	if err := writeDiff(&b, "a", "b", mk(0, 0), mk(1, 1)); err == nil {
		t.Error("no error for a report without cycles")
	}
}
