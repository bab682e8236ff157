package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/agent/calltree"
	"github.com/specprof/specprof/internal/testenv"
)

// TestSuggestRulesUnknownFramework: a workload whose functions match no
// preset rule (testdata/workloads/novaserve_demo.py) run with the sglang
// preset is reported unattributed, with its innermost frames and its call
// tree, and the installed sglang version is said not to be found; `specprof
// rules suggest` on that session gives rules which, passed back with --rules,
// attribute at least 95 % of the kernels' GPU time (the simulated GPU's
// ground truth) to named phases inside cycles, one cycle per step, and give
// every call the phase and cycle the workload recorded for it.
func TestSuggestRulesUnknownFramework(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	workload := filepath.Join(root, "testdata/workloads/novaserve_demo.py")
	const steps = 300
	for _, py := range testenv.Interpreters(t) {
		t.Run(py.Name, func(t *testing.T) {
			run := func(dir string, rules ...string) string {
				t.Helper()
				args := []string{"run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib,
					"--events", filepath.Join(dir, "events.jsonl")}
				args = append(args, rules...)
				args = append(args, "--", py.Path, workload, "--steps", fmt.Sprint(steps), "--tick-ms", "10")
				cmd := exec.Command(bin, args...)
				cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"),
					"SPECPROF_CUPTI_LIB="+mockCupti)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("specprof %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			// 1. With a preset that knows none of it.
			dir1 := t.TempDir()
			out := run(dir1, "--preset", "sglang-eagle")
			rep := readReport(t, dir1)
			checkNoLoss(t, &rep)
			p, _ := mainThread(t, &rep)
			at := p.Attribution
			truthNs := truthKernelNs(t, filepath.Join(dir1, "truth.jsonl"))
			// Launches made before the CUPTI connection was known have no
			// GPU records: counted, and counted against the rules below.
			if at == nil || !at.GPU || at.GPUNs > truthNs || float64(at.GPUNs) < 0.98*float64(truthNs) || at.Launches == 0 ||
				at.GPUNs < truthNs && at.LaunchesWithoutGPU == 0 {
				t.Fatalf("attribution %+v; simulated kernel time %d ns", at, truthNs)
			}
			if at.UnattributedLaunches != at.Launches || at.UnattributedGPUNs != at.GPUNs || at.OtherLaunches != at.Launches {
				t.Errorf("preset run: %d of %d launches and %d of %d ns unattributed; want all", at.UnattributedLaunches, at.Launches,
					at.UnattributedGPUNs, at.GPUNs)
			}
			if len(at.TopByLaunches) == 0 || len(at.TopByGPU) == 0 || !strings.HasSuffix(at.TopByGPU[0].Frame.File, "fakecuda.py") ||
				at.TopByGPU[0].Frame.Line == 0 {
				t.Errorf("top frames: by launches %+v, by GPU %+v", at.TopByLaunches, at.TopByGPU)
			}
			var sum int64
			for _, f := range at.TopByGPU {
				sum += f.GPUNs
			}
			if sum != at.UnattributedGPUNs || at.UnknownFrameGPUNs != 0 {
				t.Errorf("top frames' GPU time %d + frame unknown %d, unattributed %d", sum, at.UnknownFrameGPUNs, at.UnattributedGPUNs)
			}
			for _, want := range []string{"unattributed: 100.0 % of", "by GPU kernel time, innermost frame", "specprof rules suggest",
				"server version: installed version not found: no module file of sglang"} {
				if !strings.Contains(out, want) {
					t.Errorf("terminal summary lacks %q:\n%s", want, out)
				}
			}
			if v := p.Version; v == nil || v.Status != agent.VersionUnknown || v.Distribution != "sglang" {
				t.Errorf("server version %+v", v)
			}
			b, err := os.ReadFile(filepath.Join(dir1, calltree.FileName))
			if err != nil {
				t.Fatal(err)
			}
			var ct calltree.File
			if err := json.Unmarshal(b, &ct); err != nil || len(ct.Processes) != 1 || ct.Processes[0].Windows == 0 {
				t.Fatalf("call tree: %v, %d processes, %+v", err, len(ct.Processes), ct.Processes)
			}

			// 2. Suggest.
			sug, err := exec.Command(bin, "rules", "suggest", dir1).Output()
			if err != nil {
				t.Fatalf("rules suggest: %v", err)
			}
			wants := []string{`qualname: '^StepWorker\.execute_step$'`, "'draftproposer.propose'", "'targetrunner.score_drafts'", "'tokenacceptor.accept'",
				"'stepworker.execute_step'", "start_phase: 'draftproposer.propose'", "py310_rules:"}
			if strings.Contains(py.Name, "3.10") {
				wants = []string{`name: '^execute_step$'`, "'propose'", "'score_drafts'", "'accept'", "'execute_step'", "start_phase: 'propose'"}
			}
			for _, want := range append(wants, `file: 'novaserve/worker/step_worker\.py$'`) {
				if !strings.Contains(string(sug), want) {
					t.Errorf("suggested rules lack %q:\n%s", want, sug)
				}
			}
			rules := filepath.Join(t.TempDir(), "my-rules.yaml")
			if err := os.WriteFile(rules, sug, 0o644); err != nil {
				t.Fatal(err)
			}

			// 3. Back with --rules.
			dir2 := t.TempDir()
			out = run(dir2, "--rules", rules)
			rep = readReport(t, dir2)
			checkNoLoss(t, &rep)
			p, main := mainThread(t, &rep)
			at = p.Attribution
			truthNs = truthKernelNs(t, filepath.Join(dir2, "truth.jsonl"))
			if at == nil || at.GPUNs > truthNs || at.GPUNs < truthNs && at.LaunchesWithoutGPU == 0 {
				t.Fatalf("attribution %+v; simulated kernel time %d ns", at, truthNs)
			}
			if share := float64(at.UnattributedGPUNs+truthNs-at.GPUNs) / float64(truthNs); share > 0.05 {
				t.Errorf("with the suggested rules %.1f %% of the GPU kernel time is unattributed (other %d ns, outside cycles %d ns of %d)\n%s",
					100*share, at.OtherGPUNs, at.OutsideGPUNs, at.GPUNs, out)
			}
			var inPhases int64
			for _, ph := range main.Phases {
				if ph.Phase != "other" {
					inPhases += ph.GPUKernelNs
				}
			}
			if float64(inPhases) < 0.95*float64(truthNs) {
				t.Errorf("named phases inside cycles hold %d ns of %d ns simulated kernel time", inPhases, truthNs)
			}
			if main.Cycles != steps+1 {
				t.Errorf("%d cycles, the workload ran %d steps", main.Cycles, steps+1)
			}
			// Python 3.10 frames have no class names: the phases are named
			// after the methods alone.
			checkTaggedCalls(t, filepath.Join(dir2, "truth.jsonl"), filepath.Join(dir2, "events.jsonl"), strings.Contains(py.Name, "3.10"))
		})
	}
}

// truthKernelNs is the simulated GPU's kernel time.
func truthKernelNs(t *testing.T, path string) int64 {
	t.Helper()
	recs, err := testenv.ReadTruth(path)
	if err != nil {
		t.Fatal(err)
	}
	var ns int64
	for _, r := range recs {
		if r.Kind == "kernel" && r.End > r.Start {
			ns += int64(r.End - r.Start)
		}
	}
	return ns
}

// checkTaggedCalls: every hooked call is reported with the phase and the
// cycle of its truth tag (phase@cycle; a bare phase: outside cycles).
func checkTaggedCalls(t *testing.T, truthPath, eventsPath string, methodOnly bool) {
	t.Helper()
	truth := readTruth(t, truthPath)
	if methodOnly {
		for _, cs := range truth {
			for i := range cs {
				if ph, cyc, ok := strings.Cut(cs[i].phase, "@"); ok {
					_, m, _ := strings.Cut(ph, ".")
					cs[i].phase = m + "@" + cyc
				}
			}
		}
	}
	got := readEventCycles(t, eventsPath)
	for tid, want := range truth {
		have := got[tid]
		if len(have) != len(want) {
			t.Errorf("tid %d: %d calls reported, workload made %d", tid, len(have), len(want))
		}
		bad := 0
		for i := 0; i < len(want) && i < len(have); i++ {
			if want[i].api != have[i].api || want[i].phase != have[i].phase {
				if bad < 5 {
					t.Errorf("tid %d call %d: got %s in %q, workload recorded %s in %q", tid, i, have[i].api, have[i].phase, want[i].api, want[i].phase)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("tid %d: %d of %d calls misattributed", tid, bad, len(want))
		}
	}
}

// readEventCycles reads events.jsonl's calls as phase@cycle (phase alone
// outside cycles), in time order per thread.
func readEventCycles(t *testing.T, path string) map[int][]call {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]call{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e eventLine
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		if e.Kind == "sync_exit" || e.Kind == "kernel" || e.Kind == "gpu_api" {
			continue
		}
		ph := e.Phase
		if e.Cycle != 0 {
			ph = fmt.Sprintf("%s@%d", ph, e.Cycle)
		}
		out[e.TID] = append(out[e.TID], call{api: e.API, phase: ph, ktime: e.Ktime})
	}
	for _, cs := range out {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].ktime < cs[j].ktime })
	}
	return out
}
