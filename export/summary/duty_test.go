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
	if err := WriteReport(&b, r); err != nil {
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
	if err := WriteReport(&b, r); err != nil {
		t.Fatal(err)
	}
	if want := "3 windows (the last one still open at the end), 25.0 %"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}
