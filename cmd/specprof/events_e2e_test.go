package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/internal/testenv"
)

var eventsLine = regexp.MustCompile(`\{"events_ms".*\}`)

// TestGPUElapsedMatchesEvents: the way a user checks a phase's GPU time by
// hand is a pair of CUDA timing events around it. event_phases.py does that
// around three GPU-bound phases on a simulated GPU whose queued work starts
// a hand-over gap after the work before it (as on a real GPU, about 1.5 µs;
// busy time leaves those gaps out, events count them). specprof's GPU
// elapsed time of a phase must equal the events' elapsed time wherever the
// start event found work queued before it and the end event found the
// phase's work still running (the events then mark the GPU's own
// timeline); where the GPU was idle at an event, the events also count the
// CPU time from the event to the first launch (or from the last work to the
// event), which no GPU record holds: the difference must lie within that.
func TestGPUElapsedMatchesEvents(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	dir := t.TempDir()
	const cycles, kernelUs, lat, qgap = 12, 400, 4000, 1500
	truthPath := filepath.Join(dir, "truth.jsonl")
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib,
		"--rules", filepath.Join(root, "testdata/workloads/event_phases.yaml"), "--spec-metrics", "off",
		"--cycles-jsonl", "--cycles-kernels", "--",
		"python3", filepath.Join(root, "testdata/workloads/event_phases.py"), fmt.Sprint(cycles), fmt.Sprint(kernelUs))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti, "SPECPROF_SIM_TRUTH="+truthPath,
		fmt.Sprintf("SPECPROF_SIM_LAUNCH_LATENCY_NS=%d", lat), fmt.Sprintf("SPECPROF_SIM_QUEUE_GAP_NS=%d", qgap))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, out)
	}
	var res struct {
		Events map[string][]float64 `json:"events_ms"`
	}
	m := eventsLine.Find(out)
	if m == nil {
		t.Fatalf("no result line from the workload:\n%s", out)
	}
	if err := json.Unmarshal(m, &res); err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, dir)

	// The truth: GPU operations by correlation id, each one's stream
	// predecessor end, and the event records in call order.
	recs, err := testenv.ReadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	type op struct{ start, end, prevEnd uint64 }
	var ops []testenv.TruthRecord
	var evRecs []testenv.TruthRecord
	for _, r := range recs {
		switch {
		case r.Kind == "kernel":
			ops = append(ops, r)
		case r.Kind == "api" && r.API == "cuEventRecord":
			evRecs = append(evRecs, r)
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
	sort.SliceStable(evRecs, func(i, j int) bool { return evRecs[i].Enter < evRecs[j].Enter })
	byCorr := map[uint64][]op{}
	last := map[uint32]uint64{}
	for _, r := range ops {
		byCorr[r.Corr] = append(byCorr[r.Corr], op{r.Start, r.End, last[r.StreamID]})
		last[r.StreamID] = max(last[r.StreamID], r.End)
	}
	if len(evRecs) != 2*3*cycles {
		t.Fatalf("%d event records in the truth, want %d", len(evRecs), 2*3*cycles)
	}

	b, err := os.ReadFile(filepath.Join(dir, "cycles.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	phases := []string{"ev.draft", "ev.verify", "ev.extend"}
	n, exact, busyShort := 0, 0, 0
	var idleDiff, idleUpper float64 // phases with the GPU idle at an event
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var c model.CycleTrace
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		for _, ph := range c.Phases {
			k := indexOf(phases, ph.Phase)
			if k < 0 || c.Cycle < 1 || c.Cycle > cycles {
				continue
			}
			var first, lastOp op
			for _, g := range ph.GPU {
				for _, o := range byCorr[uint64(g.Corr)] {
					if first.end == 0 || o.start < first.start {
						first = o
					}
					if o.end > lastOp.end {
						lastOp = o
					}
				}
			}
			if first.end == 0 {
				t.Errorf("cycle %d %s: no GPU work joined", c.Cycle, ph.Phase)
				continue
			}
			recB, recE := evRecs[6*(c.Cycle-1)+2*k], evRecs[6*(c.Cycle-1)+2*k+1]
			// The start event lands on the predecessor's end when that is
			// later than its recording (+ launch latency): work was queued.
			queued := first.prevEnd != 0 && recB.Exit+lat <= first.prevEnd
			busy := recE.Exit+lat <= lastOp.end
			upper := 1.0 // float ms → ns rounding
			if !queued {
				upper += float64(first.start - recB.Enter)
			}
			if !busy {
				upper += float64(recE.Exit + lat - lastOp.end)
			}
			ev := res.Events[ph.Phase][c.Cycle-1] * 1e6
			d := ev - float64(ph.Stats.GPUElapsedNs)
			if d < -1 || d > upper {
				t.Errorf("cycle %d %s: GPU elapsed %d ns, CUDA events %.0f ns (queued at start %v, busy at end %v: want a difference within [0, %.0f])",
					c.Cycle, ph.Phase, ph.Stats.GPUElapsedNs, ev, queued, busy, upper)
			}
			if !queued || !busy {
				idleDiff += d
				idleUpper += upper
			}
			if queued && busy {
				exact++
				// Busy time leaves out the hand-over gaps the events count.
				if float64(ph.Stats.GPUBusyNs) < ev-qgap/2 {
					busyShort++
				}
			}
			// Active time adds the gaps to busy time and never exceeds the
			// phase's elapsed window (checkActiveElapsed checks it exactly).
			if st := ph.Stats; st.GPUActiveNs < st.GPUBusyNs || st.GPUActiveNs > st.GPUElapsedNs {
				t.Errorf("cycle %d %s: GPU busy %d ≤ active %d ≤ elapsed %d does not hold",
					c.Cycle, ph.Phase, st.GPUBusyNs, st.GPUActiveNs, st.GPUElapsedNs)
			}
			n++
		}
	}
	if n != 3*cycles {
		t.Errorf("%d phases compared, want %d", n, 3*cycles)
	}
	// verify and extend start behind queued work and end while it runs in
	// nearly every cycle (the CPU runs ahead of 0.2–0.6 ms kernels).
	if exact < cycles {
		t.Errorf("only %d of %d phases were compared exactly (queued at start, busy at end)", exact, n)
	}
	if busyShort < exact {
		t.Errorf("busy time fell short of the events by the hand-over gaps in %d of %d exact phases", busyShort, exact)
	}
	checkActiveElapsed(t, truthPath, filepath.Join(dir, "cycles.jsonl"), &rep, true)
	if n > exact {
		t.Logf("%d phases, %d compared exactly; the others: events − elapsed %.0f ns on average, bound %.0f",
			n, exact, idleDiff/float64(n-exact), idleUpper/float64(n-exact))
	}
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}
