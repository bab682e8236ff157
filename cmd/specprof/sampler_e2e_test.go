package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/internal/testenv"
)

// resultLine is cpu_phases.py's result JSON.
var resultLine = regexp.MustCompile(`\{"draft_ns"[^}]*\}`)

// TestRunCPUSampler runs the CPU-bound phases of cpu_phases.py under
// `specprof run --cpu-hz`: the window tables get a cpu column and the report
// the CPU time of each phase, matching what the workload measured for
// itself; with --cpu-hz 0 neither appears.
func TestRunCPUSampler(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	bin := specprofBin(t)
	std := testenv.BuildStandins(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	py := testenv.Interpreters(t)[0]
	run := func(t *testing.T, hz string) (string, *model.Report, map[string]int64) {
		dir := t.TempDir()
		cmd := exec.Command(bin, "run", "--cpu-hz", hz, "--cupti", "off", "--spec-metrics", "off", "--interval", "5", "-o", dir,
			"--rules", filepath.Join(root, "testdata/workloads/cpu_phases.yaml"), "--",
			py.Path, filepath.Join(root, "testdata/workloads/cpu_phases.py"), "run", "10", "30", "60", "0")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("specprof run --cpu-hz %s: %v\n%s", hz, err, out)
		}
		truth := map[string]int64{}
		// The workload's line shares the output with specprof's tables:
		// it can land in the middle of one of their lines.
		for _, l := range resultLine.FindAllString(string(out), -1) {
			{
				var v struct {
					Draft  int64 `json:"draft_ns"`
					Verify int64 `json:"verify_ns"`
				}
				if err := json.Unmarshal([]byte(l), &v); err != nil {
					t.Fatal(err)
				}
				truth["cpu.draft"], truth["cpu.verify"] = v.Draft, v.Verify
			}
		}
		if len(truth) == 0 {
			t.Fatalf("no result line from the workload:\n%s", out)
		}
		rep := readReport(t, dir)
		return string(out), &rep, truth
	}

	t.Run("999Hz", func(t *testing.T) {
		out, rep, truth := run(t, "999")
		if !strings.Contains(out, "cpu ms") {
			t.Errorf("no cpu ms column in the tables:\n%s", out)
		}
		if !strings.Contains(out, "cpu samples ") {
			t.Errorf("no sampler line in the final report:\n%s", out)
		}
		if len(rep.Processes) != 1 {
			t.Fatalf("%d processes in the report, want 1", len(rep.Processes))
		}
		p := rep.Processes[0]
		var main *model.ThreadReport
		for _, th := range p.Threads {
			if th.TID == p.PID {
				main = th
			}
		}
		if main == nil || main.Cycles != 10 {
			t.Fatalf("main thread: %+v, want 10 cycles", main)
		}
		for _, s := range main.Phases {
			want, ok := truth[s.Phase]
			if !ok {
				continue
			}
			if d := float64(s.CPUNs-want) / float64(want); math.Abs(d) > 0.25 {
				t.Errorf("phase %s: %.1f ms of CPU in the report, the workload measured %.1f ms", s.Phase, float64(s.CPUNs)/1e6, float64(want)/1e6)
			}
			delete(truth, s.Phase)
		}
		if len(truth) > 0 {
			t.Errorf("phases missing from the report: %v", truth)
		}
		if rep.CPU.Samples == 0 || rep.Loss.SamplesLost != 0 {
			t.Errorf("sampler: %+v, %d lost", rep.CPU, rep.Loss.SamplesLost)
		}
	})
	t.Run("off", func(t *testing.T) {
		out, rep, _ := run(t, "0")
		if strings.Contains(out, "cpu ms") || strings.Contains(out, "cpu samples ") {
			t.Errorf("CPU sampling off, but the output shows it:\n%s", out)
		}
		if rep.CPU != (model.SamplerStats{}) {
			t.Errorf("CPU sampling off, but the report counts samples: %+v", rep.CPU)
		}
	})
}
