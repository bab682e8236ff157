package summary

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/specprof/specprof/agent"
)

// fullReport has every optional column of the phase table: GPU figures,
// collectives, graph-level GPU records and CPU samples.
func fullReport() *agent.Report {
	ph := func(name string) *agent.PhaseStats {
		return &agent.PhaseStats{Phase: name, Cycles: 10, Launches: 123456, GraphLaunch: 10, CPUSpanNs: 123456789, SyncWaitNs: 98765432,
			Syncs: 10, Colls: 20, CollBytes: 1 << 30, GPUCycles: 10, GPUBusyNs: 55555555, GPUActiveNs: 66666666, GPUHostGapNs: 777777,
			GPUKernels: 4000, CollGPUNs: 1111111, GPUGraphs: 10, CPUSamples: 99, CPUNs: 9999999}
	}
	return &agent.Report{Preset: "sglang-eagle", Processes: []*agent.ProcessReport{{
		PID: 4242, Cmdline: "sglang::scheduler_TP0", Python: "3.12.1", Libraries: []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		Problems: []string{strings.Repeat("a long problem text that goes on ", 12)},
		Threads: []*agent.ThreadReport{{TID: 4242, Cycles: 10, CycleNs: 1e9, Calls: 100,
			Phases: []*agent.PhaseStats{ph("spec.draft"), ph("spec.verify"), ph("spec.draft_extend")}}},
	}}}
}

func TestReportFitsWidth(t *testing.T) {
	for _, width := range []int{0, 100, 160} {
		var b bytes.Buffer
		if err := WriteReport(&b, fullReport(), Layout{Width: width}); err != nil {
			t.Fatal(err)
		}
		limit := width
		if limit == 0 {
			limit = DefaultWidth
		}
		for _, l := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(strings.TrimRight(l, " ")); n > limit {
				t.Errorf("width %d: a line of %d columns:\n%s", width, n, l)
			}
		}
		out := b.String()
		for _, head := range []string{"phase", "launches/cyc", "cpu span ms", "sync wait ms", "gpu busy ms", "gpu % cycle"} {
			if !strings.Contains(out, head) {
				t.Errorf("width %d: column %q dropped; the first columns a user reads must stay", width, head)
			}
		}
		if !strings.Contains(out, "more columns with --wide") {
			t.Errorf("width %d: no note of the columns left out:\n%s", width, out)
		}
		if words := strings.Join(strings.Fields(out), " "); strings.Count(words, "a long problem text that goes on") != 12 {
			t.Errorf("width %d: the wrapped problem line lost words:\n%s", width, out)
		}
	}
	var b bytes.Buffer
	if err := WriteReport(&b, fullReport(), Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []column{colGraphs, colSyncs, colColls, colCollMB, colGPUActive, colHostGap, colKernels, colCollPct, colGPUGraphs, colCPUSampled} {
		if !strings.Contains(b.String(), c.head) {
			t.Errorf("--wide: column %q missing", c.head)
		}
	}
	if strings.Contains(b.String(), "more columns") {
		t.Errorf("--wide left columns out")
	}
}
