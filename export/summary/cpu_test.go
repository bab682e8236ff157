package summary

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/specprof/specprof/agent"
)

// TestCPUColumn: the "cpu ms" column shows the sampled CPU time per cycle,
// only when the sampler delivered samples.
func TestCPUColumn(t *testing.T) {
	win := &agent.Window{PID: 1, TID: 1, FirstCycle: 1, LastCycle: 4, CycleNs: 40e6, Phases: []*agent.PhaseStats{
		{Phase: "spec.draft", Cycles: 4, Launches: 8, CPUSpanNs: 8e6, CPUSamples: 12, CPUNs: 12e6},
		{Phase: "spec.verify", Cycles: 4, Launches: 4, CPUSpanNs: 20e6},
	}}
	var b bytes.Buffer
	if err := WriteWindow(&b, "t", win, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	hdr, rows := tableRows(b.String())
	draft, verify := rows["spec.draft"], rows["spec.verify"]
	if len(hdr) < 2 || hdr[len(hdr)-2] != "cpu" || hdr[len(hdr)-1] != "ms" {
		t.Fatalf("no cpu ms column at the end of the header:\n%s", b.String())
	}
	// 12 ms over 4 cycles; a phase without samples shows 0.
	if draft[len(draft)-1] != "3.000" || verify[len(verify)-1] != "0.000" {
		t.Errorf("cpu ms: draft %q, verify %q; want 3.000 and 0.000:\n%s", draft[len(draft)-1], verify[len(verify)-1], b.String())
	}

	// Without samples (sampler off), no column.
	for _, p := range win.Phases {
		p.CPUSamples, p.CPUNs = 0, 0
	}
	b.Reset()
	if err := WriteWindow(&b, "t", win, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "cpu ms") {
		t.Errorf("cpu ms column without samples:\n%s", b.String())
	}
}

// TestReportCPUSampler: the final report states the sampler's totals and
// losses, and the CPU time sampled outside cycles.
func TestReportCPUSampler(t *testing.T) {
	r := &agent.Report{Preset: "p", Start: time.Unix(0, 0), End: time.Unix(1, 0),
		Processes: []*agent.ProcessReport{{PID: 7, Threads: []*agent.ThreadReport{{TID: 7,
			Outside: []*agent.PhaseStats{{Phase: "other", Launches: 2, CPUSamples: 5, CPUNs: 5_005_005}}}}}},
		CPU:  agent.SamplerStats{Samples: 9, CPUNs: 9_009_009, Python: 5, Kernel: 1, NoThreadState: 4},
		Loss: agent.Loss{SamplesLost: 3}}
	var b bytes.Buffer
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"other=2 calls/5.005 ms cpu", "cpu samples 9 (9.009 ms of CPU): 5 with a Python stack, 1 in the kernel", "4 native threads", "3 lost"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	r.CPU, r.Loss = agent.SamplerStats{}, agent.Loss{}
	r.Processes[0].Threads[0].Outside[0].CPUSamples = 0
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "cpu") {
		t.Errorf("report mentions cpu samples with the sampler off:\n%s", b.String())
	}
}
