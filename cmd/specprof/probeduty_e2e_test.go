package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/internal/testenv"
)

// TestRunProbeWindows: with --probe-duty the libraries' probes are in
// place only in windows. Checked against the stand-in's record of every call:
//   - between windows the target really runs without probes (far fewer calls
//     are seen than it made), and every call seen is one it made, in order,
//     with its phase;
//   - every cycle measured is whole: the launches of each phase add up to
//     exactly the workload's launches per cycle times the cycles measured
//     (a cycle cut by a window's edge, or with a call made while the probes
//     went in or out, would fall short);
//   - cut cycles are counted, not exported, and the report states the windows.
func TestRunProbeWindows(t *testing.T) {
	_, _, std, bin, root := standins(t)
	workload := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	py := "python3"
	if ips := testenv.Interpreters(t); len(ips) > 0 {
		py = ips[0].Path
	}
	const cycles = 1500
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "--cupti", "off", "--probe-duty", "150ms/500ms",
		"--events", filepath.Join(dir, "events.jsonl"), "--cycles-jsonl", "-o", dir, "--",
		py, workload, "--cycles", itoa(cycles), "--mode", "eager", "--log-interval", "100")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "probes in place only in windows (--probe-duty 150ms/500ms)") ||
		!strings.Contains(string(out), "CPU samples are taken only in windows") {
		t.Errorf("the report does not state the probe windows:\n%s", out)
	}
	rep := readReport(t, dir)
	pw := rep.ProbeWindows
	if pw == nil || pw.Windows < 2 || pw.Share <= 0 || pw.Share >= 1 {
		t.Fatalf("probe windows in the report: %+v; want at least 2 windows and a share of the time below 1", pw)
	}
	p, main := mainThread(t, &rep)
	checkNoLoss(t, &rep)

	// Calls: a subsequence of the workload's, each with its phase.
	truth := readTruth(t, filepath.Join(dir, "truth.jsonl"))
	got := readEvents(t, filepath.Join(dir, "events.jsonl"))
	want, have := truth[p.PID], got[p.PID]
	if len(have) == 0 || len(have) > len(want)*8/10 {
		t.Fatalf("%d of the workload's %d calls seen: the probes were not out between windows", len(have), len(want))
	}
	j := 0
	for _, c := range have {
		for j < len(want) && (want[j].api != c.api || want[j].phase != c.phase) {
			j++
		}
		if j == len(want) {
			t.Fatalf("call %s in %q is not in the workload's calls, in order", c.api, c.phase)
		}
		j++
	}

	// Whole cycles: per phase, launches = per-cycle launches x cycles measured.
	perCycle := map[string]int64{}
	for _, c := range want {
		if c.api == "cuLaunchKernel" || c.api == "cuLaunchKernelEx" {
			perCycle[c.phase]++
		}
	}
	if main.Cycles < 20 || main.ProbeCut == 0 || main.Cycles+main.ProbeCut >= cycles {
		t.Errorf("main thread: %d cycles measured, %d cut, of %d: want some of each, and fewer than all", main.Cycles, main.ProbeCut, cycles)
	}
	checked := 0
	for _, ph := range main.Phases {
		n, ok := perCycle[ph.Phase]
		if !ok || !strings.HasPrefix(ph.Phase, "spec.") {
			continue
		}
		if n%cycles != 0 {
			t.Fatalf("%s: the workload made %d launches in %d cycles, not the same number in each", ph.Phase, n, cycles)
		}
		if want := n / cycles * int64(main.Cycles); ph.Launches != want {
			t.Errorf("%s: %d launches in %d measured cycles, want %d (%d per cycle): a measured cycle is incomplete",
				ph.Phase, ph.Launches, main.Cycles, want, n/cycles)
		}
		checked++
	}
	if checked < 3 {
		t.Errorf("only %d phases with launches checked: %+v", checked, main.Phases)
	}

	// The cycle timelines are those measured.
	f, err := os.Open(filepath.Join(dir, "cycles.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var c model.CycleTrace
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("cycles.jsonl: %v", err)
		}
		if c.TID == p.PID {
			lines++
		}
	}
	if lines != main.Cycles {
		t.Errorf("cycles.jsonl has %d cycles of the main thread, the report %d", lines, main.Cycles)
	}
	t.Logf("%d windows, %.0f %% of the time, removal %.1f ms mean; %d of %d calls seen; %d cycles measured, %d cut",
		pw.Windows, 100*pw.Share, float64(pw.DetachMeanNs)/1e6, len(have), len(want), main.Cycles, main.ProbeCut)
}

// TestRunPerfEventUprobes: on kernels without uprobe_multi links (before
// 6.6; forced here with SPECPROF_UPROBE_MULTI=0) the probes are perf-event
// uprobes, and they attribute every call as well. One probe window longer
// than the run: its first cycle is cut, the rest are whole.
func TestRunPerfEventUprobes(t *testing.T) {
	_, _, std, bin, root := standins(t)
	workload := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	const cycles = 30
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "--cupti", "off", "--probe-duty", "10m/20m",
		"--events", filepath.Join(dir, "events.jsonl"), "-o", dir, "--",
		"python3", workload, "--cycles", itoa(cycles), "--mode", "eager")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_UPROBE_MULTI=0",
		"SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, out)
	}
	rep := readReport(t, dir)
	if pw := rep.ProbeWindows; pw == nil || pw.UprobeMulti {
		t.Fatalf("probe windows %+v: want perf-event uprobes", pw)
	}
	_, main := mainThread(t, &rep)
	checkNoLoss(t, &rep)
	if main.Cycles != cycles-1 || main.ProbeCut != 1 {
		t.Errorf("main thread: %d cycles measured, %d cut; want %d and 1 (the first)", main.Cycles, main.ProbeCut, cycles-1)
	}
	compareCalls(t, readTruth(t, filepath.Join(dir, "truth.jsonl")), readEvents(t, filepath.Join(dir, "events.jsonl")))
}

// TestRunProbeWindowsGPU: --probe-duty with --cupti-duty ON/PERIOD
// --cupti-windows N --cupti-detach. Every launch's probe joins its CUPTI
// records, so the first probe window stays open while the library traces
// its N windows; once CUPTI has detached the probes go in and out as
// scheduled (eBPF only). Checked: the library traced N windows and
// detached; every launch made in them has its records and every GPU record
// its launch (one per window edge at most: a launch whose probe fired just
// before a window opened); cycles inside the GPU windows have GPU figures;
// later probe windows cut cycles and leave calls unseen; the report says the
// probes were held.
func TestRunProbeWindowsGPU(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	const cycles, windows = 1500, 3
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", dir, "--probe-duty", "150ms/500ms",
		"--cupti", "on", "--cupti-lib", injLib, "--cupti-duty", "100ms/200ms", "--cupti-windows", itoa(windows), "--cupti-detach",
		"--events", filepath.Join(dir, "events.jsonl"), "--",
		"python3", filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", itoa(cycles), "--mode", "eager")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti,
		"SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, out)
	}
	rep := readReport(t, dir)
	p, main := mainThread(t, &rep)
	checkNoLoss(t, &rep)
	pw, g := rep.ProbeWindows, p.GPU
	if pw == nil || g == nil || p.Duty == nil {
		t.Fatalf("report: probe windows %+v, GPU %+v, duty %+v", pw, g, p.Duty)
	}
	t.Logf("probe windows %+v; GPU windows %+v; library detaches %d", *pw, *p.Duty, g.Detaches)
	if p.Duty.Windows != windows || g.Detaches != 1 {
		t.Errorf("library: %d GPU windows, %d detaches: want %d, then CUPTI detached", p.Duty.Windows, g.Detaches, windows)
	}
	if pw.GPUHeldNs <= 0 || pw.Windows < 3 || pw.Share >= 1 {
		t.Errorf("probe windows %+v: want the first held while CUPTI traced, then more, in place part of the time", pw)
	}
	if l := rep.Loss; l.LaunchesWithoutAPI != 0 || l.GPUWithoutAPI != 0 || l.GPULate != 0 || l.GPUUnhooked > windows {
		t.Errorf("GPU join losses with held probe windows: %+v", l)
	}
	var gpuCycles int
	for _, ph := range main.Phases {
		gpuCycles = max(gpuCycles, ph.GPUCycles)
	}
	if gpuCycles < 5 || main.ProbeCut == 0 || main.Cycles >= cycles {
		t.Errorf("main thread: %d cycles measured (at most %d with GPU figures), %d cut by probe windows, of %d: want GPU figures from the GPU windows, then probe windows",
			main.Cycles, gpuCycles, main.ProbeCut, cycles)
	}
	truth := readTruth(t, filepath.Join(dir, "truth.jsonl"))
	got := readEvents(t, filepath.Join(dir, "events.jsonl"))
	if want, have := truth[p.PID], got[p.PID]; len(have) == 0 || len(have) > len(want)*9/10 {
		t.Errorf("%d of the workload's %d calls seen: the probes were not out after CUPTI's windows", len(have), len(want))
	}
	if !strings.Contains(string(out), "the probes stayed in place") {
		t.Errorf("the report does not say the probes were held:\n%s", out)
	}
}
