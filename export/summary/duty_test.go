package summary

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/specprof/specprof/agent"
)

// TestReportDutyWindows: the report states the windows and their share, and
// says so when the last one was still open at the end (the process exited
// in it, or stopped making the synchronising calls that close windows).
func TestReportDutyWindows(t *testing.T) {
	r := &agent.Report{Preset: "p", Start: time.Unix(0, 0), End: time.Unix(1, 0),
		Processes: []*agent.ProcessReport{{PID: 7, Duty: &agent.DutyStats{Windows: 3, WindowNs: 300_000_000, Share: 0.25}}}}
	var b bytes.Buffer
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if want := "GPU traced in windows (--cupti-duty): 3 windows, 25.0 % of the time"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
	if strings.Contains(b.String(), "still open") {
		t.Errorf("closed windows reported open:\n%s", b.String())
	}
	b.Reset()
	r.Processes[0].Duty.StillOpen = true
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if want := "3 windows (the last one still open at the end), 25.0 %"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

// TestReportDuplicateAPIRecords: API records that repeat a correlation id
// (CUPTI 13.0 after its API kinds were switched by windows) are counted in
// the GPU join line, with what to do about them; without any, no hint.
func TestReportDuplicateAPIRecords(t *testing.T) {
	r := &agent.Report{Preset: "p", Start: time.Unix(0, 0), End: time.Unix(1, 0),
		Loss: agent.Loss{LaunchesWithoutAPI: 12088, APIDuplicates: 15148}}
	var b bytes.Buffer
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"launches without a CUPTI API record 12088", "API records with a correlation id seen before 15148",
		"leave SPECPROF_CUPTI_API_SOURCE unset"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	r.Loss.APIDuplicates = 0
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "SPECPROF_CUPTI_API_SOURCE") {
		t.Errorf("hint without duplicate API records:\n%s", b.String())
	}
}

// TestReportWindowsShorterThanCycles: windows about as long as the cycles
// leave few cycles wholly inside one; the report says so and what to do.
func TestReportWindowsShorterThanCycles(t *testing.T) {
	th := &agent.ThreadReport{TID: 7, Cycles: 91, CycleNs: 91 * 110_000_000}
	r := &agent.Report{Preset: "p", Start: time.Unix(0, 0), End: time.Unix(1, 0),
		Processes: []*agent.ProcessReport{{PID: 7, Threads: []*agent.ThreadReport{th},
			Duty: &agent.DutyStats{Windows: 14, WindowNs: 14 * 130_000_000, Share: 0.14}}}}
	var b bytes.Buffer
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if want := "windows (130.000 ms on average) are not much longer than the cycles (110.000 ms)"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	th.CycleNs = 91 * 1_400_000
	if err := WriteReport(&b, r, Layout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "not much longer") {
		t.Errorf("hint with cycles far shorter than the windows:\n%s", b.String())
	}
}
