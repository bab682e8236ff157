package summary

import (
	"bytes"
	"strings"
	"testing"

	"github.com/specprof/specprof/agent"
)

// TestGraphsColumn: under graph-level tracing the table counts the whole
// graph replays per cycle in their own column; without replays there is no
// such column.
func TestGraphsColumn(t *testing.T) {
	win := &agent.Window{PID: 1, TID: 1, FirstCycle: 1, LastCycle: 2, CycleNs: 4e6, GPU: true, Phases: []*agent.PhaseStats{
		{Phase: "spec.draft", Cycles: 2, Launches: 2, GPUCycles: 2, GPUGraphs: 2, GPUBusyNs: 1e6},
		{Phase: "spec.accept", Cycles: 2, Launches: 6, GPUCycles: 2, GPUKernels: 6, GPUBusyNs: 1e5},
	}}
	var b bytes.Buffer
	if err := WriteWindow(&b, "t", win, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	hdr, rows := tableRows(b.String())
	draft, accept := rows["spec.draft"], rows["spec.accept"]
	if len(hdr) < 1 || hdr[len(hdr)-1] != "graphs/cyc" || draft[len(draft)-1] != "1.0" || accept[len(accept)-1] != "0.0" {
		t.Fatalf("graphs column:\n%s", b.String())
	}
	win.Phases[0].GPUGraphs = 0
	b.Reset()
	if err := WriteWindow(&b, "t", win, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "graphs/cyc") {
		t.Errorf("graphs column without replays:\n%s", b.String())
	}
}

// tableRows splits a phase table into its header's fields and each phase
// row's fields, by phase.
func tableRows(out string) (hdr []string, rows map[string][]string) {
	rows = map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case strings.Contains(l, "launches/cyc"):
			hdr = f
		case len(f) > 0:
			rows[f[0]] = f
		}
	}
	return hdr, rows
}
