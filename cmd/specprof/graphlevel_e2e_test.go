package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/export/pprof"
	"github.com/specprof/specprof/internal/testenv"
)

// TestGraphLevelTracing: with --cupti-graphs graph, CUPTI reports each CUDA
// graph replay as one record (first node start to last node end) instead of
// one per node, and kernels launched outside graphs as before. Per phase the
// report counts the replays and the eager kernels exactly, and its GPU busy
// time is exactly the union of the eager kernels and the replays' intervals
// (the simulated GPU leaves a gap between graph nodes: a replay's interval
// is more than the union of its kernels, and that is what graph-level
// tracing can know).
func TestGraphLevelTracing(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	py := testenv.Interpreters(t)[0]
	dir := t.TempDir()
	const cycles = 20
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib,
		"--cupti-graphs", "graph", "--cycles-jsonl", "--cycles-kernels", "--",
		py.Path, filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", itoa(cycles), "--mode", "graph",
		"--allreduce", "--proctitle", "sglang::scheduler_TP0")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"),
		"SPECPROF_CUPTI_LIB="+mockCupti)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, out)
	}
	rep := readReport(t, dir)
	recs, err := testenv.ReadTruth(filepath.Join(dir, "truth.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		tid int
		tag string
	}
	type want struct {
		iv              [][2]uint64
		kernels, graphs int64
	}
	replays := map[uint64]int{} // corr → index into its key's intervals
	exp := map[key]*want{}
	kernelUnion := map[key][][2]uint64{}
	for _, r := range recs {
		if r.Kind != "kernel" || !strings.HasPrefix(r.Tag, "spec.") {
			continue
		}
		k := key{int(r.Tid), r.Tag}
		w := exp[k]
		if w == nil {
			w = &want{}
			exp[k] = w
		}
		kernelUnion[k] = append(kernelUnion[k], [2]uint64{r.Start, r.End})
		if r.GraphExecID == 0 {
			w.kernels++
			w.iv = append(w.iv, [2]uint64{r.Start, r.End})
			continue
		}
		i, ok := replays[r.Corr]
		if !ok {
			w.graphs++
			w.iv = append(w.iv, [2]uint64{r.Start, r.End})
			replays[r.Corr] = len(w.iv) - 1
			continue
		}
		x := &w.iv[i]
		x[0], x[1] = min(x[0], r.Start), max(x[1], r.End)
	}
	got := map[key]*model.PhaseStats{}
	for _, p := range rep.Processes {
		for _, th := range p.Threads {
			for _, ph := range th.Phases {
				got[key{th.TID, ph.Phase}] = ph
			}
		}
	}
	graphs, wider := int64(0), false
	for k, w := range exp {
		g := got[k]
		if g == nil {
			t.Errorf("tid %d %s: not in the report", k.tid, k.tag)
			continue
		}
		busy := unionNs(w.iv)
		if g.GPUBusyNs != busy || g.GPUKernels != w.kernels || g.GPUGraphs != w.graphs {
			t.Errorf("tid %d %s: busy %d ns, %d kernels, %d graphs; simulated %d ns, %d kernels outside graphs, %d replays",
				k.tid, k.tag, g.GPUBusyNs, g.GPUKernels, g.GPUGraphs, busy, w.kernels, w.graphs)
		}
		graphs += w.graphs
		if busy > unionNs(kernelUnion[k]) {
			wider = true
		}
	}
	if graphs < cycles {
		t.Errorf("%d graph replays in the phases, want at least one per cycle", graphs)
	}
	if !wider {
		t.Error("no replay interval was wider than its kernels: the test cannot tell graph-level from node-level records")
	}
	if l := rep.Loss; l.GPUWithoutAPI+l.GPULate > 0 {
		t.Errorf("GPU records not joined: %+v", l)
	}
	// gpu_time (pprof) has the replays as leaves, and its GPU time adds up
	// to the report's kernels and replays.
	var wantNs, gotNs, graphLeaves int64
	for _, p := range rep.Processes {
		for _, th := range p.Threads {
			for _, ph := range th.Phases {
				wantNs += ph.GPUKernelNs + ph.GPUGraphNs
			}
		}
	}
	prof := readProfile(t, filepath.Join(dir, pprof.GPUTimeFile))
	for _, s := range prof.Sample {
		gotNs += s.Value[1]
		if fn := s.Location[0].Line[0].Function.Name; strings.HasPrefix(fn, "graph ") {
			graphLeaves += s.Value[0]
		}
	}
	if gotNs != wantNs || graphLeaves < cycles {
		t.Errorf("gpu_time: %d ns, %d graph replays; report: %d ns of kernels and replays", gotNs, graphLeaves, wantNs)
	}
	// The timeline names the replays.
	c, err := os.ReadFile(filepath.Join(dir, "cycles.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c), `"kind":"graph","name":"graph `) {
		t.Error("cycles.jsonl has no graph records")
	}
}
