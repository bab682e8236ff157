package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/internal/testenv"
)

type call struct {
	api, phase string
	ktime      uint64
}

// canonical maps every hooked exported symbol to its family name.
var canonical = func() map[string]string {
	m := map[string]string{}
	for _, h := range bpf.Hooks {
		for _, s := range h.Symbols {
			m[s] = h.Name
		}
	}
	return m
}()

func readTruth(t *testing.T, path string) map[int][]call {
	t.Helper()
	recs, err := testenv.ReadTruth(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]call{}
	for _, r := range recs {
		var name string
		switch r.Kind {
		case "api":
			name = canonical[r.API]
		case "coll": // written by the stand-in libnccl
			name = canonical["nccl"+r.Op]
		}
		if name == "" {
			continue // not hooked
		}
		out[int(r.Tid)] = append(out[int(r.Tid)], call{api: name, phase: r.Tag, ktime: r.Enter})
	}
	for _, cs := range out {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].ktime < cs[j].ktime })
	}
	return out
}

func readEvents(t *testing.T, path string) map[int][]call {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int][]call{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e eventLine
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		if e.Kind == "sync_exit" || e.Kind == "kernel" || e.Kind == "gpu_api" {
			continue
		}
		out[e.TID] = append(out[e.TID], call{api: e.API, phase: e.Phase, ktime: e.Ktime})
	}
	for _, cs := range out {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].ktime < cs[j].ktime })
	}
	return out
}

// compareCalls requires every hooked call of every thread to be reported,
// in order, with the phase the workload itself recorded for it.
func compareCalls(t *testing.T, truth, got map[int][]call) int {
	t.Helper()
	total := 0
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
		total += len(want)
	}
	for tid := range got {
		if _, ok := truth[tid]; !ok {
			t.Errorf("tid %d: %d calls reported for a thread that made none", tid, len(got[tid]))
		}
	}
	return total
}

func TestRunAttributesEveryCall(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	injLib, mockCupti, std := testenv.BuildInjection(t)
	bin := specprofBin(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	workload := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	const cycles = 24
	for _, py := range testenv.Interpreters(t) {
		for _, mode := range []string{"graph", "eager"} {
			for _, depth := range []int{10, 200} {
				name := fmt.Sprintf("%s/%s/depth%d", py.Name, mode, depth)
				// Kernels long enough that launches queue behind them
				// (checkActiveElapsed needs some): 200 Python frames
				// make every launch of the workload itself several
				// times slower, and a slow machine then had none at the
				// default 20 µs. Whether a launch lands just before its
				// predecessor's end (a hand-over gap) stays a matter of
				// the machine's speed at depth 200 (0 of 3,722 operations
				// in one clean-clone CI run at 100 µs, 7-14 at 400 µs,
				// none at 1 ms, where launches queue far ahead): the
				// depth-10 cases of the same interpreter and mode
				// (20-109 a run) are the ones required to have some.
				kernelUs := 20
				if depth > 10 {
					kernelUs = 100
				}
				t.Run(name, func(t *testing.T) {
					dir := t.TempDir()
					args := []string{"run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib, "--events", filepath.Join(dir, "events.jsonl"),
						"--cycles-jsonl", "--cycles-kernels", "--",
						py.Path, workload, "--cycles", fmt.Sprint(cycles), "--mode", mode, "--stack-depth", fmt.Sprint(depth),
						"--extra-thread", "--allreduce", "--log-interval", "8", "--proctitle", "sglang::scheduler_TP0",
						"--side-stream", "--kernel-us", fmt.Sprint(kernelUs)}
					cmd := exec.Command(bin, args...)
					cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"),
						"SPECPROF_CUPTI_LIB="+mockCupti)
					out, err := cmd.CombinedOutput()
					if err != nil {
						t.Fatalf("specprof run: %v\n%s", err, out)
					}
					if !strings.Contains(string(out), "Decode batch") {
						t.Errorf("workload log lines missing:\n%s", out)
					}
					truth := readTruth(t, filepath.Join(dir, "truth.jsonl"))
					got := readEvents(t, filepath.Join(dir, "events.jsonl"))
					n := compareCalls(t, truth, got)
					if len(truth) < 2 {
						t.Errorf("expected calls from two threads, got %d", len(truth))
					}

					rep := readReport(t, dir)
					checkReport(t, &rep, cycles)
					checkKernels(t, filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "events.jsonl"))
					checkGPUBusy(t, filepath.Join(dir, "truth.jsonl"), &rep, mode == "eager")
					checkCopies(t, filepath.Join(dir, "truth.jsonl"), &rep, mode == "graph")
					checkCycles(t, filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "cycles.jsonl"), &rep, cycles)
					checkActiveElapsed(t, filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "cycles.jsonl"), &rep, depth == 10)
					t.Logf("%d calls compared", n)
				})
			}
		}
	}
}

// TestRunAPIRecordsFromCallbacks: with SPECPROF_CUPTI_API_SOURCE=callbacks
// the injected library makes the API records of the work calls itself, in
// CUPTI's enter and exit callbacks, and never enables CUPTI's API activity
// kinds (the mock counts none of their records). Every launch still joins its
// kernels: the same checks against the simulated GPU's ground truth as
// TestRunAttributesEveryCall, eager and with CUDA graphs, and with kernels
// launched through the runtime (cudaLaunchKernel, whose record stands for its
// cuLaunchKernel) with the API records from either source.
func TestRunAPIRecordsFromCallbacks(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	const cycles = 40
	py := testenv.Interpreters(t)[0]
	cases := []struct {
		name, mode, source string
		runtime            bool // kernels launched through the stand-in runtime (cudaLaunchKernel), as PyTorch's
	}{
		{"graph", "graph", "callbacks", false},
		{"eager", "eager", "callbacks", false},
		{"eager-runtime", "eager", "callbacks", true},
		{"eager-runtime-activity", "eager", "activity", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib,
				"--events", filepath.Join(dir, "events.jsonl"), "--cycles-jsonl", "--cycles-kernels", "--",
				py.Path, filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", fmt.Sprint(cycles),
				"--mode", c.mode, "--stack-depth", "10", "--extra-thread", "--allreduce", "--log-interval", "8",
				"--proctitle", "sglang::scheduler_TP0", "--side-stream"}
			if c.runtime {
				args = append(args, "--runtime-launch")
			}
			cmd := exec.Command(bin, args...)
			mockStats := filepath.Join(dir, "mock.json")
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"),
				"SPECPROF_CUPTI_LIB="+mockCupti, "SPECPROF_CUPTI_API_SOURCE="+c.source, "SPECPROF_MOCK_CUPTI_STATS="+mockStats)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("specprof run: %v\n%s", err, out)
			}
			b, err := os.ReadFile(mockStats)
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				Records struct {
					Kernel, API int
					RuntimeAPI  int `json:"runtime_api"`
				}
				RuntimeCallbacks int `json:"runtime_callbacks"`
			}
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("mock stats %s: %v", b, err)
			}
			cuptiAPI := m.Records.API + m.Records.RuntimeAPI
			if m.Records.Kernel == 0 || (c.source == "callbacks") != (cuptiAPI == 0) {
				t.Errorf("mock CUPTI made %d API and %d kernel records with API records from %s", cuptiAPI,
					m.Records.Kernel, c.source)
			}
			if c.runtime && c.source == "callbacks" && m.RuntimeCallbacks == 0 {
				t.Errorf("no runtime callback: the runtime's launches were not seen")
			}
			rep := readReport(t, dir)

			checkReport(t, &rep, cycles)
			if l := rep.Loss; l.LaunchesWithoutAPI != 0 || l.GPUWithoutAPI != 0 || l.GPULate != 0 {
				t.Errorf("losses: %+v", l)
			}
			if g := rep.Processes[0].GPU; g == nil || g.DroppedBackpressure == nil || *g.DroppedBackpressure != 0 || g.DroppedNoAgent == nil || *g.DroppedNoAgent != 0 {
				t.Errorf("library drops: %+v", g)
			}
			checkKernels(t, filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "events.jsonl"))
			checkGPUBusy(t, filepath.Join(dir, "truth.jsonl"), &rep, c.mode == "eager")
			checkCycles(t, filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "cycles.jsonl"), &rep, cycles)
		})
	}
}

// checkReport: the main thread ran exactly `cycles` cycles, nothing was lost.
func checkReport(t *testing.T, rep *agent.Report, cycles int) {
	t.Helper()
	_, main := mainThread(t, rep)
	if main.Cycles != cycles {
		t.Errorf("main thread: %d cycles in report, workload ran %d", main.Cycles, cycles)
	}
	checkNoLoss(t, rep)
}

// mainThread returns the report's one process and its main thread.
func mainThread(t *testing.T, rep *agent.Report) (*agent.ProcessReport, *agent.ThreadReport) {
	t.Helper()
	if len(rep.Processes) != 1 {
		t.Fatalf("report has %d processes, want 1", len(rep.Processes))
	}
	p := rep.Processes[0]
	for _, th := range p.Threads {
		if th.TID == p.PID {
			return p, th
		}
	}
	t.Fatalf("no main thread in report")
	return nil, nil
}

// checkNoLoss: nothing dropped on the BPF side or left unattributed.
func checkNoLoss(t *testing.T, rep *agent.Report) {
	t.Helper()
	l := rep.Loss
	if l.RingBuf+l.Scratch+l.DecodeErrors+l.ReadErrors+l.Truncated+l.SymbolErrors+l.UnmatchedExit+l.NoThreadState != 0 {
		t.Errorf("losses: %+v", l)
	}
}

// checkKernels: every simulated kernel arrives exactly once through the
// injected CUPTI library, with the simulator's start and end (same clock,
// ns-exact) and the correlation id of the call that launched it.
func checkKernels(t *testing.T, truthPath, eventsPath string) {
	t.Helper()
	recs, err := testenv.ReadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		name       string
		start, end uint64
		corr       uint64
	}
	want := map[key]int{}
	n := 0
	for _, r := range recs {
		if r.Kind == "kernel" {
			want[key{r.Name, r.Start, r.End, r.Corr}]++
			n++
		}
	}
	f, err := os.Open(eventsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	got := 0
	for sc.Scan() {
		var k kernelLine
		if err := json.Unmarshal(sc.Bytes(), &k); err != nil || k.Kind != "kernel" {
			continue
		}
		got++
		kk := key{k.Name, k.Start, k.End, uint64(k.Corr)}
		if want[kk] == 0 {
			if got < 5 {
				t.Errorf("kernel record %+v matches no simulated kernel", k)
			}
			continue
		}
		want[kk]--
	}
	missing := 0
	for _, c := range want {
		missing += c
	}
	if n == 0 || got != n || missing != 0 {
		t.Errorf("GPU kernels: simulated %d, CUPTI records %d, unmatched simulated %d", n, got, missing)
	}
}

// checkGPUBusy: each phase's GPU busy time and kernel count (summed over the
// cycles of a thread) equal the simulated ground truth: the union of the
// intervals of the kernels its calls launched (same clock, ns-exact). In eager
// runs (--side-stream) verify also runs a kernel on a second stream at once:
// busy is then less than the sum of kernel times, and must equal the union.
func checkGPUBusy(t *testing.T, truthPath string, rep *agent.Report, wantOverlap bool) {
	t.Helper()
	recs, err := testenv.ReadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		tid int
		tag string
	}
	iv := map[key][][2]uint64{}
	for _, r := range recs {
		if r.Kind == "kernel" && strings.HasPrefix(r.Tag, "spec.") {
			k := key{int(r.Tid), r.Tag}
			iv[k] = append(iv[k], [2]uint64{r.Start, r.End})
		}
	}
	got := map[key][2]int64{}
	for _, p := range rep.Processes {
		for _, th := range p.Threads {
			for _, ph := range th.Phases {
				if strings.HasPrefix(ph.Phase, "spec.") {
					got[key{th.TID, ph.Phase}] = [2]int64{ph.GPUBusyNs, ph.GPUKernels}
				}
			}
		}
	}
	// Exact: launches are joined to their CUPTI record by containment, or,
	// when the thread was preempted between the uprobe and CUPTI's stamp,
	// by order (correlate.Options.InOrder).
	overlapped := false
	for k, xs := range iv {
		n := int64(len(xs))
		var sum int64
		for _, x := range xs {
			sum += int64(x[1] - x[0])
		}
		want := unionNs(xs)
		if k.tag == "spec.verify" && sum > want {
			overlapped = true // --side-stream: two streams at once
		}
		if g := got[k]; g != [2]int64{want, n} {
			t.Errorf("tid %d %s: GPU busy %d ns over %d kernels, simulated %d ns over %d kernels (unmatched launches %d)",
				k.tid, k.tag, g[0], g[1], want, n, rep.Loss.LaunchesWithoutAPI)
		}
	}
	if wantOverlap && !overlapped {
		t.Errorf("no phase ran kernels on two streams at once: the union-not-sum check proved nothing")
	}
}

// checkCopies: every simulated copy and set of a cycle phase lands in the
// phase of the call that made it (the call's tag), exactly: each hooked
// cuMemcpy* / cuMemset* joins its CUPTI memcpy / memset record as a launch
// joins its kernels. The blocking copies' time inside the call is their
// phase's sync wait: at least the simulated copy's own duration from the
// call's entry, whatever entry point it went through (cuMemcpyAsync's
// DtoH into pageable memory blocks like cuMemcpyDtoH). withPrepare: the graph
// runners' replay_prepare copies and sets must be among them.
func checkCopies(t *testing.T, truthPath string, rep *agent.Report, withPrepare bool) {
	t.Helper()
	recs, err := testenv.ReadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		tid int
		tag string
	}
	type tally struct{ copies, copyBytes, sets, setBytes int64 }
	want := map[key]*tally{}
	apiOf := map[uint64]string{}
	for _, r := range recs {
		if r.Kind == "api" {
			apiOf[r.Corr] = r.API
		}
	}
	kinds := map[string]bool{}
	for _, r := range recs {
		if (r.Kind != "memcpy" && r.Kind != "memset") || !strings.HasPrefix(r.Tag, "spec.") {
			continue
		}
		k := key{int(r.Tid), r.Tag}
		w := want[k]
		if w == nil {
			w = &tally{}
			want[k] = w
		}
		if r.Kind == "memcpy" {
			w.copies++
			w.copyBytes += int64(r.Bytes)
		} else {
			w.sets++
			w.setBytes += int64(r.Bytes)
		}
		kinds[apiOf[r.Corr]] = true
	}
	for _, api := range []string{"cuMemcpyAsync", "cuMemcpyDtoDAsync_v2", "cuMemsetD32Async", "cuMemcpyHtoDAsync_v2"} {
		if withPrepare && !kinds[api] {
			t.Errorf("no simulated copy or set of a cycle phase came from %s: the check proved nothing for it (%v)", api, kinds)
		}
	}
	got := map[key]tally{}
	for _, p := range rep.Processes {
		for _, th := range p.Threads {
			for _, ph := range th.Phases {
				if strings.HasPrefix(ph.Phase, "spec.") {
					got[key{th.TID, ph.Phase}] = tally{ph.GPUMemcpys, ph.GPUMemcpyBytes, ph.GPUMemsets, ph.GPUMemsetBytes}
				}
			}
		}
	}
	for k, w := range want {
		if g := got[k]; g != *w {
			t.Errorf("tid %d %s: %d copies (%d bytes), %d sets (%d bytes); simulated %d (%d), %d (%d)",
				k.tid, k.tag, g.copies, g.copyBytes, g.sets, g.setBytes, w.copies, w.copyBytes, w.sets, w.setBytes)
		}
	}
	// The accept copy blocks inside the copy call: spec.accept's sync wait
	// holds at least every accept copy's own GPU duration.
	for _, p := range rep.Processes {
		for _, th := range p.Threads {
			for _, ph := range th.Phases {
				if ph.Phase != "spec.accept" || ph.Cycles == 0 {
					continue
				}
				var copyNs int64
				for _, r := range recs {
					if r.Kind == "memcpy" && r.Tag == "spec.accept" && int(r.Tid) == th.TID {
						copyNs += int64(r.End - r.Start)
					}
				}
				if ph.SyncWaitNs < copyNs {
					t.Errorf("tid %d spec.accept: sync wait %d ns, less than its copies' own %d ns", th.TID, ph.SyncWaitNs, copyNs)
				}
			}
		}
	}
}

// checkCycles: the per-cycle timelines (what OTLP, Perfetto and pprof are
// fed) agree with the report and with the simulated ground truth: one per
// cycle; per phase, the cycles' GPU figures add up to the report's and
// every joined kernel is listed; every collective call carries its bytes
// and the GPU times of the NCCL kernel it launched; NCCL kernels replayed
// from CUDA graphs appear as collectives too.
func checkCycles(t *testing.T, truthPath, cyclesPath string, rep *agent.Report, cycles int) {
	t.Helper()
	recs, err := testenv.ReadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cyclesPath)
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Processes[0]
	type pk struct {
		tid   int
		phase string
	}
	sums := map[pk][2]int64{}
	perTID := map[int]int{}
	var colls []agent.Collective // main thread, in time order
	var ncclKernels []agent.Collective
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var c agent.CycleTrace
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("cycles.jsonl: %v", err)
		}
		perTID[c.TID]++
		if c.Rank != 0 || !strings.Contains(c.Process, "TP0") {
			t.Errorf("cycle %d: rank %d, process %q; want rank 0 from the title sglang::scheduler_TP0", c.Cycle, c.Rank, c.Process)
		}
		for _, ph := range c.Phases {
			k := pk{c.TID, ph.Phase}
			s := sums[k]
			s[0] += ph.Stats.GPUBusyNs
			s[1] += ph.Stats.GPUKernels
			sums[k] = s
			nk := int64(0)
			for _, g := range ph.GPU {
				if g.Kind == "kernel" {
					nk++
				}
			}
			if nk != ph.Stats.GPUKernels {
				t.Errorf("cycle %d %s: %d kernels listed, %d counted", c.Cycle, ph.Phase, nk, ph.Stats.GPUKernels)
			}
			if ph.Start < c.Start || ph.End > c.End || ph.End < ph.Start {
				t.Errorf("cycle %d %s: phase [%d, %d] outside cycle [%d, %d]", c.Cycle, ph.Phase, ph.Start, ph.End, c.Start, c.End)
			}
			for _, co := range ph.Collectives {
				if c.TID != p.PID {
					continue
				}
				if co.API != "" && !co.Captured {
					colls = append(colls, co)
				} else if strings.HasPrefix(co.Kernel, "ncclDevKernel") {
					ncclKernels = append(ncclKernels, co)
				}
			}
		}
	}
	if perTID[p.PID] != cycles {
		t.Errorf("main thread: %d cycle timelines, workload ran %d cycles", perTID[p.PID], cycles)
	}
	for _, th := range p.Threads {
		for _, ph := range th.Phases {
			if got := sums[pk{th.TID, ph.Phase}]; got != [2]int64{ph.GPUBusyNs, ph.GPUKernels} {
				t.Errorf("tid %d %s: cycles add up to GPU busy %d ns / %d kernels, report says %d / %d",
					th.TID, ph.Phase, got[0], got[1], ph.GPUBusyNs, ph.GPUKernels)
			}
		}
	}
	// Ground truth: collective calls made inside cycles, and their kernels.
	kernels := map[uint64]testenv.TruthRecord{}
	for _, r := range recs {
		if r.Kind == "kernel" {
			kernels[r.Corr] = r
		}
	}
	var want []testenv.TruthRecord
	var wantReplayed []testenv.TruthRecord
	for _, r := range recs {
		switch {
		case r.Kind == "coll" && strings.HasPrefix(r.Tag, "spec.") && int(r.Tid) == p.PID:
			want = append(want, r)
		case r.Kind == "kernel" && r.GraphID != 0 && strings.Contains(r.Name, "ncclDevKernel") && strings.HasPrefix(r.Tag, "spec.") &&
			int(r.Tid) == p.PID:
			wantReplayed = append(wantReplayed, r)
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Enter < want[j].Enter })
	unmatched := int(rep.Loss.LaunchesWithoutAPI)
	if len(colls) != len(want) {
		t.Errorf("%d collective calls in the timelines, workload made %d in cycles", len(colls), len(want))
	}
	bad := 0
	for i := 0; i < len(want) && i < len(colls); i++ {
		w, g := want[i], colls[i]
		k := kernels[w.KernelCorr]
		if g.Bytes != int64(w.Bytes) || g.Op != w.Op || g.Count != w.Count {
			t.Errorf("collective %d: %s %d elements %d bytes, workload made %s %d elements %d bytes", i, g.Op, g.Count, g.Bytes, w.Op, w.Count, w.Bytes)
		}
		// The simulation names kernels mangled, as CUPTI does NCCL's; reports show them demangled.
		if g.Kernel != demangle.Filter(k.Name) || !strings.HasSuffix(g.Kernel, "(ncclDevKernelArgsStorage<4096ul>)") ||
			g.GPUStart != k.Start || g.GPUEnd != k.End {
			bad++
			if bad <= 3 {
				t.Logf("collective %d: kernel %q [%d, %d], simulated %q [%d, %d]", i, g.Kernel, g.GPUStart, g.GPUEnd, k.Name, k.Start, k.End)
			}
		}
		if g.Algorithm != "RING" || g.Protocol != "LL" {
			t.Errorf("collective %d: algorithm %q protocol %q from kernel %q", i, g.Algorithm, g.Protocol, g.Kernel)
		}
	}
	if bad > unmatched {
		t.Errorf("%d collectives without the GPU times of their kernel (unmatched launches: %d)", bad, unmatched)
	}
	if d := len(wantReplayed) - len(ncclKernels); d < 0 || d > unmatched {
		t.Errorf("%d NCCL kernels replayed from graphs in cycles, %d shown as collectives", len(wantReplayed), len(ncclKernels))
	}
	// A replayed collective carries the arguments of the call captured into
	// its graph node: replayed kernel (graph, node) → the captured node →
	// its capturing launch → the collective call that made that launch.
	type gnode struct{ graph, node uint64 }
	capturedBy := map[gnode]uint64{} // node → capturing launch's corr
	collByLaunch := map[uint64]testenv.TruthRecord{}
	replayAt := map[[2]uint64]gnode{} // kernel [start, end] → its node
	for _, r := range recs {
		switch r.Kind {
		case "graph_node":
			capturedBy[gnode{r.GraphID, uint64(r.NodeID)}] = r.Corr
		case "coll":
			collByLaunch[r.KernelCorr] = r
		case "kernel":
			if r.GraphID != 0 {
				replayAt[[2]uint64{r.Start, r.End}] = gnode{r.GraphID, uint64(r.NodeID)}
			}
		}
	}
	withArgs := 0
	for i, co := range ncclKernels {
		n, ok := replayAt[[2]uint64{co.GPUStart, co.GPUEnd}]
		w, ok2 := collByLaunch[capturedBy[n]]
		if !ok || !ok2 {
			t.Errorf("replayed collective %d (%s [%d, %d]): no captured call in the simulation", i, co.Kernel, co.GPUStart, co.GPUEnd)
			continue
		}
		if !co.Captured || co.Bytes != int64(w.Bytes) || co.Count != w.Count || co.Op != w.Op || co.Site.IsZero() {
			t.Errorf("replayed collective %d: captured %v, %s %d elements %d bytes, site %q; captured call %s %d elements %d bytes",
				i, co.Captured, co.Op, co.Count, co.Bytes, co.Site, w.Op, w.Count, w.Bytes)
			continue
		}
		withArgs++
	}
	if len(wantReplayed) > 0 && withArgs == 0 {
		t.Errorf("no replayed collective carries its captured call's arguments")
	}
}

// checkActiveElapsed: each cycle's per-phase GPU active and elapsed time
// equal what the simulated ground truth gives (ns-exact, same clock). From
// the truth alone: every GPU operation's stream predecessor (the latest end
// among the operations that started before it on its stream); an operation
// whose launching call began before that end waited in the queue and counts
// from there, else from its start. Active is the union of those intervals
// over the phase's operations (listed by correlation id in the timeline),
// elapsed their first to last. It also asserts that the rule mattered: some
// phase's active time differs from its busy time, and, with needQueued, some
// operations were queued behind a predecessor with a gap (whether any are is a
// matter of timing: see TestRunAttributesEveryCall).
func checkActiveElapsed(t *testing.T, truthPath, cyclesPath string, rep *agent.Report, needQueued bool) {
	t.Helper()
	recs, err := testenv.ReadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	type sk struct {
		pid    uint32
		dev    int
		stream uint32
	}
	type ck struct {
		pid  uint32
		corr uint64
	}
	enter := map[ck]uint64{}
	var ops []testenv.TruthRecord
	for _, r := range recs {
		switch r.Kind {
		case "api":
			enter[ck{r.Pid, r.Corr}] = r.Enter
		case "kernel", "memcpy", "memset":
			ops = append(ops, r)
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
	type iv struct{ from, end uint64 }
	byCorr := map[ck][]iv{}
	last := map[sk]uint64{}
	queued := 0
	for _, r := range ops {
		k := sk{r.Pid, r.Device, r.StreamID}
		from, prev := r.Start, last[k]
		if e, ok := enter[ck{r.Pid, r.Corr}]; ok && prev != 0 && e < prev && prev <= r.Start {
			from = prev
			if prev < r.Start {
				queued++
			}
		}
		last[k] = max(prev, r.End)
		if r.End > r.Start {
			byCorr[ck{r.Pid, r.Corr}] = append(byCorr[ck{r.Pid, r.Corr}], iv{from, r.End})
		}
	}
	if queued == 0 && needQueued {
		t.Errorf("no simulated operation waited behind its stream predecessor: the active-time check proved nothing")
	}
	t.Logf("%d of %d simulated operations waited behind their stream predecessor", queued, len(ops))
	b, err := os.ReadFile(cyclesPath)
	if err != nil {
		t.Fatal(err)
	}
	checked, differs := 0, 0
	// Host gaps (agent.PhaseStats.GPUHostGapNs), from the simulated
	// intervals: per thread, in cycle order.
	type phaseIv struct {
		first, end uint64
		gap        int64 // what specprof says
		name       string
	}
	type cycleIvs struct {
		no  int
		gpu bool
		ph  []phaseIv
	}
	type tk struct{ pid, tid int }
	byThread := map[tk][]cycleIvs{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var c agent.CycleTrace
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("cycles.jsonl: %v", err)
		}
		ci := cycleIvs{no: c.Cycle, gpu: c.GPU}
		for _, ph := range c.Phases {
			if len(ph.GPU) == 0 {
				continue
			}
			seen := map[uint32]bool{}
			var xs [][2]uint64
			var first, lastEnd uint64
			for _, g := range ph.GPU {
				if seen[g.Corr] {
					continue // a graph replay lists each of its kernels under one id
				}
				seen[g.Corr] = true
				for _, x := range byCorr[ck{uint32(c.PID), uint64(g.Corr)}] {
					xs = append(xs, [2]uint64{x.from, x.end})
					if first == 0 || x.from < first {
						first = x.from
					}
					lastEnd = max(lastEnd, x.end)
				}
			}
			if first != 0 {
				ci.ph = append(ci.ph, phaseIv{first, lastEnd, ph.Stats.GPUHostGapNs, ph.Phase})
			}
			wantActive, wantElapsed := unionNs(xs), int64(lastEnd-first)
			if ph.Stats.GPUActiveNs != wantActive || ph.Stats.GPUElapsedNs != wantElapsed {
				t.Errorf("pid %d tid %d cycle %d %s: GPU active %d ns, elapsed %d ns; simulated %d, %d",
					c.PID, c.TID, c.Cycle, ph.Phase, ph.Stats.GPUActiveNs, ph.Stats.GPUElapsedNs, wantActive, wantElapsed)
			}
			if ph.Stats.GPUActiveNs != ph.Stats.GPUBusyNs {
				differs++
			}
			checked++
		}
		byThread[tk{c.PID, c.TID}] = append(byThread[tk{c.PID, c.TID}], ci)
	}
	gaps := 0
	for k, cs := range byThread {
		sort.Slice(cs, func(i, j int) bool { return cs[i].no < cs[j].no })
		var end uint64 // the thread's GPU work so far ended here (0: unknown)
		prevNo := 0
		for _, c := range cs {
			if !c.gpu || c.no != prevNo+1 {
				end = 0
			}
			prevNo = c.no
			if !c.gpu {
				continue
			}
			sort.Slice(c.ph, func(i, j int) bool { return c.ph[i].first < c.ph[j].first })
			for _, p := range c.ph {
				var want int64
				if end != 0 && p.first > end {
					want = int64(p.first - end)
				}
				if p.gap != want {
					t.Errorf("pid %d tid %d cycle %d %s: host gap %d ns, simulated %d", k.pid, k.tid, c.no, p.name, p.gap, want)
				}
				if want > 0 {
					gaps++
				}
				end = max(end, p.end)
			}
		}
	}
	if gaps == 0 {
		t.Errorf("no phase waited for the host on the simulated GPU: the host-gap check proved nothing")
	}
	if checked == 0 || differs == 0 {
		t.Errorf("%d phases checked, %d with active time other than busy time: the check proved nothing", checked, differs)
	}
	if n := rep.Loss.GPUStreamInversions; n != 0 {
		t.Errorf("%d GPU records out of stream order", n)
	}
}
