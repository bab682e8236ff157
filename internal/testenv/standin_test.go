package testenv

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Simulator defaults (simgpu.h).
const (
	defLatency = 4000
	defGap     = 1000
	copyBPUS   = 20000
)

// tools compiles the test driver (testdata/simdriver.c) and injection library once.
var (
	toolsOnce              sync.Once
	toolsDir               string
	driverPath, injectPath string
	toolsErr               error
	toolsStandins          string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if toolsDir != "" {
		os.RemoveAll(toolsDir)
	}
	os.Exit(code)
}

func tools(t *testing.T) (dir, driver, inject string) {
	t.Helper()
	dir = BuildStandins(t)
	toolsOnce.Do(func() {
		toolsDir, toolsErr = os.MkdirTemp("", "simgpu-test-")
		if toolsErr != nil {
			return
		}
		driverPath = filepath.Join(toolsDir, "simdriver")
		injectPath = filepath.Join(toolsDir, "inject.so")
		CompileC(t, dir, driverPath, "testdata/simdriver.c")
		CompileC(t, dir, injectPath, "-shared", "-fPIC", "testdata/inject.c")
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	if _, err := os.Stat(injectPath); err != nil {
		t.Fatal("test tools were not built")
	}
	return dir, driverPath, injectPath
}

type run struct {
	out    map[string]any
	recs   []TruthRecord
	stderr string
}

// runScenario runs simdriver SCENARIO with the stand-ins and extra environment, and returns its
// JSON output and the truth records.
func runScenario(t *testing.T, scenario string, env ...string) run {
	t.Helper()
	dir, driver, _ := tools(t)
	truth := filepath.Join(t.TempDir(), "truth.jsonl")
	cmd := exec.Command(driver, scenario)
	cmd.Env = SimEnv(dir, append([]string{"SPECPROF_SIM_TRUTH=" + truth}, env...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("simdriver %s: %v\nstdout: %s\nstderr: %s", scenario, err, stdout.String(), stderr.String())
	}
	var r run
	r.stderr = stderr.String()
	if err := json.Unmarshal(stdout.Bytes(), &r.out); err != nil {
		t.Fatalf("simdriver %s output %q: %v", scenario, stdout.String(), err)
	}
	recs, err := ReadTruth(truth)
	if err != nil {
		t.Fatal(err)
	}
	r.recs = recs
	checkInvariants(t, recs, latencyFrom(env))
	return r
}

func latencyFrom(env []string) uint64 {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "SPECPROF_SIM_LAUNCH_LATENCY_NS="); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return defLatency
}

func (r run) num(t *testing.T, key string) float64 {
	t.Helper()
	v, ok := r.out[key].(float64)
	if !ok {
		t.Fatalf("driver output has no number %q: %v", key, r.out)
	}
	return v
}

func (r run) u64(t *testing.T, key string) uint64 { return uint64(r.num(t, key)) }

func (r run) api(corr uint64) *TruthRecord {
	for i := range r.recs {
		if r.recs[i].Kind == "api" && r.recs[i].Corr == corr {
			return &r.recs[i]
		}
	}
	return nil
}

func (r run) filter(f func(*TruthRecord) bool) []*TruthRecord {
	var out []*TruthRecord
	for i := range r.recs {
		if f(&r.recs[i]) {
			out = append(out, &r.recs[i])
		}
	}
	return out
}

func (r run) kind(kind string) []*TruthRecord {
	return r.filter(func(x *TruthRecord) bool { return x.Kind == kind })
}

func (r run) apis(name string) []*TruthRecord {
	return r.filter(func(x *TruthRecord) bool { return x.Kind == "api" && x.API == name })
}

func (r run) kernelsTagged(tag string) []*TruthRecord {
	return r.filter(func(x *TruthRecord) bool { return x.Kind == "kernel" && x.Tag == tag })
}

// checkInvariants checks what holds in every truth file: unique correlation ids, exit >= enter,
// and every GPU operation belongs to an API call of the same thread that submitted it within
// [enter, exit] and started no earlier than one launch latency after the submission.
func checkInvariants(t *testing.T, recs []TruthRecord, lat uint64) {
	t.Helper()
	apis := map[uint64]*TruthRecord{}
	for i := range recs {
		r := &recs[i]
		if r.Kind != "api" {
			continue
		}
		if apis[r.Corr] != nil {
			t.Errorf("correlation id %d used twice", r.Corr)
		}
		apis[r.Corr] = r
		if r.Exit < r.Enter {
			t.Errorf("api %d %s: exit %d < enter %d", r.Corr, r.API, r.Exit, r.Enter)
		}
	}
	for i := range recs {
		r := &recs[i]
		if !r.IsGPUOp() {
			continue
		}
		a := apis[r.Corr]
		if a == nil {
			t.Errorf("%s %q corr %d has no api record", r.Kind, r.Name, r.Corr)
			continue
		}
		if a.API != r.API || a.Tid != r.Tid || a.Tag != r.Tag {
			t.Errorf("%s corr %d: api %s/%d/%q, record says %s/%d/%q", r.Kind, r.Corr, a.API, a.Tid, a.Tag, r.API, r.Tid, r.Tag)
		}
		if r.Submit < a.Enter || r.Submit > a.Exit {
			t.Errorf("%s corr %d: submit %d outside its call [%d, %d]", r.Kind, r.Corr, r.Submit, a.Enter, a.Exit)
		}
		if r.Start < r.Submit+lat || r.End < r.Start {
			t.Errorf("%s corr %d: start %d end %d, submitted %d (latency %d)", r.Kind, r.Corr, r.Start, r.End, r.Submit, lat)
		}
	}
}

// ------------------------------------------------------------------------------------------

var wantCudaExports = []string{
	"cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName", "cuDeviceGetAttribute",
	"cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxCreate_v2",
	"cuCtxDestroy_v2", "cuCtxSetCurrent", "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxSynchronize",
	"cuCtxSynchronize_v2", "cuGetErrorString", "cuGetErrorName", "cuModuleLoadData", "cuModuleLoad",
	"cuModuleUnload", "cuModuleGetFunction", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH",
	"cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2",
	"cuMemcpyDtoHAsync_v2_ptsz", "cuMemsetD8_v2",
	"cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpy", "cuMemcpyAsync", "cuMemcpyAsync_ptsz", "cuMemcpyDtoD_v2", "cuMemcpyDtoDAsync_v2",
	"cuMemcpyDtoDAsync_v2_ptsz", "cuMemsetD8Async", "cuMemsetD8Async_ptsz", "cuMemsetD32Async", "cuMemsetD32Async_ptsz", "cuStreamCreate", "cuStreamCreateWithPriority",
	"cuStreamDestroy_v2", "cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuStreamWaitEvent", "cuStreamQuery",
	"cuEventCreate", "cuEventDestroy_v2", "cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags",
	"cuEventSynchronize", "cuEventQuery", "cuEventElapsedTime", "cuLaunchKernel", "cuLaunchKernel_ptsz",
	"cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuStreamBeginCapture", "cuStreamBeginCapture_v2",
	"cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2_ptsz", "cuStreamEndCapture", "cuStreamEndCapture_ptsz",
	"cuStreamIsCapturing", "cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
	"cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphExecDestroy", "cuGraphDestroy", "cuGetProcAddress",
	"cuGetProcAddress_v2",
	"simgpu_register_observer", "simgpu_set_tag", "simgpu_get_tag", "simgpu_set_function_duration",
	"simgpu_get_function_duration", "simgpu_last_correlation_id", "simgpu_stream_free_at", "simgpu_get_config",
	"simgpu_truth_line", "simgpu_flush_truth", "simgpu_runtime_enter", "simgpu_runtime_exit",
}

var wantCudartExports = []string{"cudaLaunchKernel"}

var wantNcclExports = []string{
	"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitAll", "ncclCommDestroy", "ncclCommAbort",
	"ncclCommCount", "ncclCommUserRank", "ncclCommCuDevice", "ncclGetErrorString", "ncclAllReduce", "ncclAllGather",
	"ncclReduceScatter", "ncclBroadcast", "ncclReduce", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
}

// TestExportsStartWithPushRBP checks the sonames, the exported names, and that every exported
// function's first byte is 0x55 (push %rbp), as at the real driver's entry points.
func TestExportsStartWithPushRBP(t *testing.T) {
	dir := BuildStandins(t)
	for _, lib := range []struct {
		file, soname string
		want         []string
	}{
		{"libcuda.so.1", "libcuda.so.1", wantCudaExports},
		{"libnccl.so.2", "libnccl.so.2", wantNcclExports},
		{"libcudart.so.13", "libcudart.so.13", wantCudartExports},
	} {
		t.Run(lib.file, func(t *testing.T) {
			f, err := elf.Open(filepath.Join(dir, lib.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if so, err := f.DynString(elf.DT_SONAME); err != nil || len(so) != 1 || so[0] != lib.soname {
				t.Errorf("soname %v (%v), want %s", so, err, lib.soname)
			}
			syms, err := f.DynamicSymbols()
			if err != nil {
				t.Fatal(err)
			}
			exported := map[string]bool{}
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
					continue
				}
				exported[s.Name] = true
				sec := f.Sections[s.Section]
				b := make([]byte, 1)
				if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
					t.Fatalf("%s: %v", s.Name, err)
				}
				if b[0] != 0x55 {
					t.Errorf("%s (%s) starts with %#02x, want 0x55 (push %%rbp)", s.Name, sec.Name, b[0])
				}
			}
			for _, name := range lib.want {
				if !exported[name] {
					t.Errorf("%s does not export %s", lib.file, name)
				}
			}
			if len(exported) != len(lib.want) {
				var extra []string
				for name := range exported {
					if !slices.Contains(lib.want, name) {
						extra = append(extra, name)
					}
				}
				t.Errorf("unexpected exports: %v", extra)
			}
		})
	}
	t.Run("make check", func(t *testing.T) {
		src, err := StandinSourceDir()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("make", "-s", "-C", src, "OUT="+dir, "check")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make check: %v\n%s", err, b)
		}
	})
}

// TestStreamFIFO: kernel start = max(submit + latency, stream free), end = start + duration, on
// created, legacy and per-thread default streams.
func TestStreamFIFO(t *testing.T) {
	t.Parallel()
	const lat = 7000
	r := runScenario(t, "fifo", fmt.Sprintf("SPECPROF_SIM_LAUNCH_LATENCY_NS=%d", lat))
	s1 := r.u64(t, "stream")
	ks := r.filter(func(x *TruthRecord) bool { return x.Kind == "kernel" && x.Stream == s1 })
	if len(ks) != 3 {
		t.Fatalf("%d kernels on the stream, want 3", len(ks))
	}
	var free uint64
	for i, k := range ks {
		if k.Name != "k_fifo" || k.API != "cuLaunchKernel" || k.Tag != "fifo" || k.Block != [3]uint32{128, 1, 1} {
			t.Errorf("kernel %d: %+v", i, *k)
		}
		want := max(k.Submit+lat, free)
		if k.Start != want || k.End != k.Start+20_000_000 {
			t.Errorf("kernel %d: start %d end %d, want start %d (submit %d, free %d)", i, k.Start, k.End, want, k.Submit, free)
		}
		if i > 0 && k.Start != ks[i-1].End {
			t.Errorf("kernel %d did not queue behind the 20 ms kernel before it", i)
		}
		free = k.End
	}
	legacy := r.filter(func(x *TruthRecord) bool { return x.Kind == "kernel" && x.Name == "k_legacy" })
	if len(legacy) != 3 {
		t.Fatalf("%d k_legacy kernels, want 3", len(legacy))
	}
	if legacy[0].Stream != 0 || legacy[0].API != "cuLaunchKernel" {
		t.Errorf("cuLaunchKernel(stream 0) ran on stream %d, want the legacy stream 0", legacy[0].Stream)
	}
	pt1, pt2 := legacy[1], legacy[2]
	if pt1.Stream == 0 || pt1.Stream != pt2.Stream || pt1.StreamID != pt2.StreamID || pt1.StreamID == legacy[0].StreamID {
		t.Errorf("per-thread default stream: _ptsz(0) on %d/%d, CU_STREAM_PER_THREAD on %d/%d, legacy %d/%d",
			pt1.Stream, pt1.StreamID, pt2.Stream, pt2.StreamID, legacy[0].Stream, legacy[0].StreamID)
	}
	if a := r.api(pt1.Corr); a == nil || a.API != "cuLaunchKernel_ptsz" || a.Stream != 0 {
		t.Errorf("api record of the _ptsz launch: %+v", a)
	}
	if a := r.api(pt2.Corr); a == nil || a.Stream != 2 {
		t.Errorf("api record of the CU_STREAM_PER_THREAD launch: %+v", a)
	}
	if want := max(pt2.Submit+lat, pt1.End); pt2.Start != want {
		t.Errorf("per-thread stream FIFO: start %d, want %d", pt2.Start, want)
	}
	if legacy[0].Start != legacy[0].Submit+lat {
		t.Errorf("idle legacy stream: start %d, want submit+latency %d", legacy[0].Start, legacy[0].Submit+lat)
	}
	// cuCtxSynchronize waited for everything.
	cs := r.apis("cuCtxSynchronize")
	if len(cs) != 1 || cs[0].Exit < ks[2].End || cs[0].Exit < pt2.End {
		t.Errorf("cuCtxSynchronize %+v returned before the last kernel ended (%d)", cs, ks[2].End)
	}
}

// TestStreamsOverlap: kernels on different streams run concurrently; cuLaunchKernelEx reads the
// config with the real layout.
func TestStreamsOverlap(t *testing.T) {
	t.Parallel()
	r := runScenario(t, "overlap")
	s1, s2 := r.u64(t, "s1"), r.u64(t, "s2")
	ks := r.kernelsTagged("overlap")
	if len(ks) != 2 {
		t.Fatalf("%d kernels, want 2", len(ks))
	}
	a, b := ks[0], ks[1]
	if a.Stream != s1 || b.Stream != s2 || a.Name != "k_a" || b.Name != "k_b" {
		t.Fatalf("kernels %+v %+v", *a, *b)
	}
	if b.API != "cuLaunchKernelEx" || b.Grid != [3]uint32{4, 1, 1} || b.Block != [3]uint32{256, 1, 1} {
		t.Errorf("cuLaunchKernelEx kernel: api %s grid %v block %v", b.API, b.Grid, b.Block)
	}
	if api := r.api(b.Corr); api == nil || api.Stream != s2 {
		t.Errorf("cuLaunchKernelEx api record stream: %+v, want %d", api, s2)
	}
	if b.Start != b.Submit+defLatency || a.Start != a.Submit+defLatency {
		t.Errorf("idle streams: starts %d %d, submits %d %d", a.Start, b.Start, a.Submit, b.Submit)
	}
	if !(b.Start < a.End && a.Start < b.End) {
		t.Errorf("kernels on two streams do not overlap: [%d,%d] [%d,%d]", a.Start, a.End, b.Start, b.End)
	}
	for _, s := range r.apis("cuStreamSynchronize") {
		k := a
		if s.Stream == s2 {
			k = b
		}
		if s.Exit < k.End {
			t.Errorf("cuStreamSynchronize(%d) returned at %d, before its kernel ended at %d", s.Stream, s.Exit, k.End)
		}
	}
}

// TestGraphReplay: capture appends nodes without running them; each replay runs the nodes back
// to back (plus the node gap) with the graph launch's correlation id, the graph id and node ids.
func TestGraphReplay(t *testing.T) {
	t.Parallel()
	const gap = 2500
	r := runScenario(t, "graph", fmt.Sprintf("SPECPROF_SIM_GRAPH_NODE_GAP_NS=%d", gap))
	if r.num(t, "capturing") != 1 {
		t.Error("cuStreamIsCapturing did not report an active capture")
	}
	if r.num(t, "sync_during_capture") != 900 {
		t.Errorf("cuStreamSynchronize during capture returned %v, want 900", r.out["sync_during_capture"])
	}
	if ks := r.kernelsTagged("capture"); len(ks) != 0 {
		t.Errorf("%d kernels ran during capture", len(ks))
	}
	names := []string{"fmha_fwd", "gemm", "rmsnorm"}
	durs := []uint64{100000, 50000, 30000}
	nodes := r.kind("graph_node")
	if len(nodes) != 3 {
		t.Fatalf("%d graph_node records, want 3", len(nodes))
	}
	for i, n := range nodes {
		if n.GraphID != 1 || n.NodeID != uint32(i+1) || n.Name != names[i] || n.Duration != durs[i] || n.Tag != "capture" {
			t.Errorf("node %d: %+v", i, *n)
		}
		if a := r.api(n.Corr); a == nil || !strings.HasPrefix(a.API, "cuLaunchKernel") {
			t.Errorf("node %d: capturing call %+v", i, a)
		}
	}
	launches := r.apis("cuGraphLaunch")
	if len(launches) != 2 {
		t.Fatalf("%d cuGraphLaunch calls, want 2", len(launches))
	}
	var free uint64
	for li, l := range launches {
		ks := r.filter(func(x *TruthRecord) bool { return x.Kind == "kernel" && x.Corr == l.Corr })
		if len(ks) != 3 {
			t.Fatalf("replay %d: %d kernels with its correlation id, want 3", li, len(ks))
		}
		for i, k := range ks {
			if k.API != "cuGraphLaunch" || k.GraphID != 1 || k.GraphExecID != 1 || k.NodeID != uint32(i+1) ||
				k.Name != names[i] || k.Tag != "replay" || k.CaptureTag != "capture" || k.Stream != l.Stream {
				t.Errorf("replay %d kernel %d: %+v", li, i, *k)
			}
			var want uint64
			if i == 0 {
				want = max(k.Submit+defLatency, free)
			} else {
				want = ks[i-1].End + gap
			}
			if k.Start != want || k.End-k.Start != durs[i] {
				t.Errorf("replay %d node %d: [%d,%d] want start %d duration %d", li, i+1, k.Start, k.End, want, durs[i])
			}
		}
		free = ks[2].End
	}
	if s := r.apis("cuStreamSynchronize"); len(s) != 2 || s[1].Exit < free {
		t.Errorf("cuStreamSynchronize after the replays: %+v, last node ended %d", s, free)
	}
}

// TestSyncBlocks: stream, event and context synchronization really block until the GPU work
// ends; events complete with their stream; cuStreamWaitEvent orders streams.
func TestSyncBlocks(t *testing.T) {
	t.Parallel()
	r := runScenario(t, "sync")
	s1, s2 := r.u64(t, "s1"), r.u64(t, "s2")
	k := r.kernelsTagged("stream_sync")
	if len(k) != 1 {
		t.Fatalf("%d stream_sync kernels", len(k))
	}
	if w := r.u64(t, "stream_sync_wall"); w < 20_000_000 {
		t.Errorf("launch + cuStreamSynchronize took %d ns, less than the 20 ms kernel", w)
	}
	ss := r.filter(func(x *TruthRecord) bool { return x.API == "cuStreamSynchronize" && x.Tag == "stream_sync" })
	if len(ss) != 1 || ss[0].Exit < k[0].End || ss[0].Stream != s1 {
		t.Errorf("cuStreamSynchronize %+v, kernel end %d", ss, k[0].End)
	}

	ek := r.kernelsTagged("event_sync")
	if len(ek) != 1 || ek[0].Stream != s2 {
		t.Fatalf("event_sync kernels: %v", ek)
	}
	if r.num(t, "event_query_before") != 600 || r.num(t, "event_query_after") != 0 {
		t.Errorf("cuEventQuery before/after: %v/%v, want 600/0", r.out["event_query_before"], r.out["event_query_after"])
	}
	es := r.apis("cuEventSynchronize")
	if len(es) != 1 || es[0].Exit < ek[0].End {
		t.Errorf("cuEventSynchronize %+v returned before the kernel ended at %d", es, ek[0].End)
	}
	rec := r.filter(func(x *TruthRecord) bool { return x.API == "cuEventRecord" && x.Tag == "event_sync" })
	if len(rec) != 2 {
		t.Fatalf("%d cuEventRecord calls", len(rec))
	}
	// e0 completes at its record time + latency; e1 when the kernel ends.
	ms := r.num(t, "elapsed_ms")
	lo := float64(ek[0].End-rec[0].Exit-defLatency) / 1e6
	hi := float64(ek[0].End-rec[0].Enter-defLatency) / 1e6
	if ms < lo-1e-3 || ms > hi+1e-3 || ms < 10 {
		t.Errorf("cuEventElapsedTime %.6f ms, want in [%.6f, %.6f]", ms, lo, hi)
	}

	wk := r.kernelsTagged("wait_event")
	if len(wk) != 2 || wk[0].Stream != s1 || wk[1].Stream != s2 {
		t.Fatalf("wait_event kernels %v", wk)
	}
	if wk[1].Start < wk[0].End {
		t.Errorf("kernel after cuStreamWaitEvent started at %d, before the event's work ended at %d", wk[1].Start, wk[0].End)
	}

	var lastEnd uint64
	cs := r.apis("cuCtxSynchronize")
	if len(cs) != 1 {
		t.Fatalf("%d cuCtxSynchronize", len(cs))
	}
	for _, x := range r.kind("kernel") {
		if x.Corr < cs[0].Corr {
			lastEnd = max(lastEnd, x.End)
		}
	}
	if cs[0].Exit < lastEnd {
		t.Errorf("cuCtxSynchronize returned at %d, before the last kernel ended at %d", cs[0].Exit, lastEnd)
	}
	if w := r.u64(t, "ctx_sync_wall"); w < lastEnd-r.u64(t, "t4") {
		t.Errorf("cuCtxSynchronize blocked %d ns, want >= %d", w, lastEnd-r.u64(t, "t4"))
	}
	cs2 := r.apis("cuCtxSynchronize_v2")
	last := r.kind("kernel")
	if len(cs2) != 1 || cs2[0].Exit < last[len(last)-1].End {
		t.Errorf("cuCtxSynchronize_v2 %+v returned before the last kernel ended", cs2)
	}
	if r.num(t, "stream_query_after") != 0 {
		t.Errorf("cuStreamQuery after a context sync: %v", r.out["stream_query_after"])
	}
}

// TestDtoHCopy: a synchronous DtoH copy is a legacy-stream operation queued behind earlier
// work, lasting bytes / bandwidth, and blocks until its end; data round-trips; an async DtoH copy into
// pageable memory blocks too (the stand-in has no pinned memory); memsets do not block.
func TestDtoHCopy(t *testing.T) {
	t.Parallel()
	r := runScenario(t, "dtoh")
	n := r.u64(t, "bytes")
	if r.num(t, "same") != 1 {
		t.Error("data did not round-trip through cuMemcpyHtoD/cuMemcpyDtoH")
	}
	if r.num(t, "memset_ok") != 1 {
		t.Error("cuMemsetD8 did not set the bytes")
	}
	if r.num(t, "bad_range") != 1 || r.num(t, "double_free") != 1 {
		t.Errorf("out-of-range copy / double free: %v %v, want 1 1", r.out["bad_range"], r.out["double_free"])
	}
	copyDur := max(uint64(1000), n*1000/copyBPUS)
	h := r.filter(func(x *TruthRecord) bool { return x.Kind == "memcpy" && x.CopyKind == "HtoD" })
	if len(h) != 1 || h[0].Bytes != n || h[0].Stream != 0 || h[0].API != "cuMemcpyHtoD_v2" {
		t.Errorf("HtoD copies: %v", h)
	}
	k := r.kernelsTagged("dtoh")
	d := r.filter(func(x *TruthRecord) bool { return x.Kind == "memcpy" && x.Tag == "dtoh" })
	if len(k) != 1 || len(d) != 1 {
		t.Fatalf("dtoh: %d kernels, %d copies", len(k), len(d))
	}
	c := d[0]
	if c.API != "cuMemcpyDtoH_v2" || c.CopyKind != "DtoH" || c.Bytes != n || c.Stream != 0 || k[0].Stream != 0 {
		t.Errorf("DtoH copy %+v", *c)
	}
	if want := max(c.Submit+defLatency, k[0].End); c.Start != want || c.End != c.Start+copyDur {
		t.Errorf("DtoH copy [%d,%d], want start %d (after the legacy-stream kernel) and %d ns", c.Start, c.End, want, copyDur)
	}
	if a := r.api(c.Corr); a == nil || a.Exit < c.End {
		t.Errorf("cuMemcpyDtoH_v2 returned before its copy ended: %+v, end %d", a, c.End)
	}
	if w := r.u64(t, "sync_wall"); w < c.End-k[0].Start {
		t.Errorf("cuMemcpyDtoH_v2 blocked %d ns, want >= %d", w, c.End-k[0].Start)
	}

	ms := r.kind("memset")
	if len(ms) != 1 || ms[0].Bytes != n/2 || ms[0].Value != 0xab || ms[0].Stream != 0 || ms[0].API != "cuMemsetD8_v2" {
		t.Errorf("memsets: %v", ms)
	}
	ak := r.kernelsTagged("async")
	ac := r.filter(func(x *TruthRecord) bool { return x.Kind == "memcpy" && x.Tag == "async" })
	if len(ak) != 1 || len(ac) != 1 {
		t.Fatalf("async: %d kernels %d copies", len(ak), len(ac))
	}
	if ac[0].API != "cuMemcpyDtoHAsync_v2" || ac[0].Stream != ak[0].Stream || ac[0].Start != max(ac[0].Submit+defLatency, ak[0].End) {
		t.Errorf("async copy %+v after kernel ending %d", *ac[0], ak[0].End)
	}
	// Into pageable host memory (the stand-in has no other) an async DtoH
	// copy returns only once it is done, as on the real driver.
	if a := r.api(ac[0].Corr); a == nil || a.Exit < ac[0].End {
		t.Errorf("cuMemcpyDtoHAsync_v2 returned before its copy into pageable memory ended: %+v, copy ends %d", a, ac[0].End)
	}
}

// TestNCCL: each collective launches its NCCL-named kernel through cuLaunchKernelEx on the
// calling thread, lasting base + bytes*1000/bandwidth; groups defer to the outermost
// ncclGroupEnd and fuse p2p operations.
func TestNCCL(t *testing.T) {
	t.Parallel()
	const base, bpus = 5000, 50000
	r := runScenario(t, "nccl", fmt.Sprintf("SPECPROF_SIM_NCCL_BASE_NS=%d", base),
		fmt.Sprintf("SPECPROF_SIM_NCCL_BYTES_PER_US=%d", bpus))
	if r.num(t, "version") != 22803 || r.num(t, "count") != 2 || r.num(t, "rank") != 0 || r.num(t, "device") != 0 {
		t.Errorf("version/count/rank/device: %v", r.out)
	}
	if r.num(t, "bad_comm") != 4 || r.num(t, "bad_type") != 4 || r.num(t, "bad_end") != 5 {
		t.Errorf("errors: bad comm %v, bad type %v, unmatched group end %v", r.out["bad_comm"], r.out["bad_type"], r.out["bad_end"])
	}
	stream := r.u64(t, "stream")
	want := []struct {
		tag, op, kernel string
		bytes           uint64
		peer, root      int
		stream          uint64
	}{
		{"allreduce", "AllReduce", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 2 << 20, -1, -1, stream},
		{"allgather", "AllGather", "ncclDevKernel_AllGather_RING_LL", 1000 * 4 * 2, -1, -1, stream},
		{"reducescatter", "ReduceScatter", "ncclDevKernel_ReduceScatter_Max_f32_RING_LL", 4096 * 4 * 2, -1, -1, stream},
		{"broadcast", "Broadcast", "ncclDevKernel_Broadcast_RING_LL", 100, -1, 1, stream},
		{"reduce", "Reduce", "ncclDevKernel_Reduce_Prod_f16_RING_LL", 10000, -1, 0, stream},
		{"group", "Send", "ncclDevKernel_SendRecv", 4000, 1, -1, stream},
		{"group", "Recv", "ncclDevKernel_SendRecv", 4000, 1, -1, stream},
		{"group", "AllReduce", "ncclDevKernel_AllReduce_Min_i32_RING_LL", 40, -1, -1, 0},
	}
	colls := r.kind("coll")
	if len(colls) != len(want) {
		t.Fatalf("%d coll records, want %d", len(colls), len(want))
	}
	for i, w := range want {
		c := colls[i]
		// CUPTI names NCCL's kernels mangled; the stand-in does too.
		mk := fmt.Sprintf("_Z%d%s24ncclDevKernelArgsStorageILm4096EE", len(w.kernel), w.kernel)
		if c.Tag != w.tag || c.Op != w.op || c.Kernel != mk || c.Bytes != w.bytes || c.Peer != w.peer ||
			c.Root != w.root || c.Stream != w.stream || c.Nranks != 2 || c.Rank != 0 || c.Grouped != (w.tag == "group") {
			t.Errorf("coll %d: %+v, want %+v", i, *c, w)
		}
		kbytes := w.bytes
		if w.kernel == "ncclDevKernel_SendRecv" {
			kbytes = 8000 // the fused Send+Recv
		}
		dur := base + kbytes*1000/bpus
		if c.KernelDuration != dur {
			t.Errorf("coll %d: kernel duration %d, want %d", i, c.KernelDuration, dur)
		}
		ks := r.filter(func(x *TruthRecord) bool { return x.Kind == "kernel" && x.Corr == c.KernelCorr })
		if len(ks) != 1 {
			t.Fatalf("coll %d: %d kernels with corr %d", i, len(ks), c.KernelCorr)
		}
		k := ks[0]
		if k.Name != mk || k.End-k.Start != dur || k.API != "cuLaunchKernelEx" || k.Tid != c.Tid || k.Stream != w.stream {
			t.Errorf("coll %d: kernel %+v, want %s lasting %d", i, *k, w.kernel, dur)
		}
		if a := r.api(c.KernelCorr); a == nil || a.Enter < c.Enter || a.Tid != c.Tid {
			t.Errorf("coll %d: launching call %+v, collective entered at %d", i, a, c.Enter)
		}
	}
	if colls[5].KernelCorr != colls[6].KernelCorr {
		t.Error("Send and Recv of one group were not fused into one kernel")
	}
	if colls[7].KernelCorr <= r.u64(t, "corr_before_group_end") {
		t.Error("the grouped AllReduce was launched before the outermost ncclGroupEnd")
	}
	// Byte-dependent: the 2 MiB all-reduce lasts longer than the 100-byte broadcast.
	if colls[0].KernelDuration <= colls[3].KernelDuration {
		t.Error("kernel duration does not grow with bytes")
	}
}

// TestThreadTags: records of two threads carry their own tags and thread ids; per-thread default
// streams are distinct FIFOs.
func TestThreadTags(t *testing.T) {
	t.Parallel()
	r := runScenario(t, "threads")
	if r.num(t, "ok_a") != 1 || r.num(t, "ok_b") != 1 {
		t.Fatalf("threads failed: %v", r.out)
	}
	tids := map[string]map[uint32]bool{}
	for _, x := range r.recs {
		if x.Tag == "" {
			continue
		}
		if tids[x.Tag] == nil {
			tids[x.Tag] = map[uint32]bool{}
		}
		tids[x.Tag][x.Tid] = true
	}
	if len(tids) != 2 || len(tids["thread-A"]) != 1 || len(tids["thread-B"]) != 1 {
		t.Fatalf("tags -> tids: %v", tids)
	}
	var ta, tb uint32
	for id := range tids["thread-A"] {
		ta = id
	}
	for id := range tids["thread-B"] {
		tb = id
	}
	if ta == tb {
		t.Fatal("both tags on one thread")
	}
	for _, x := range r.recs {
		if (x.Tid == ta && x.Tag != "thread-A") || (x.Tid == tb && x.Tag != "thread-B") {
			t.Errorf("record of thread %d with tag %q: %+v", x.Tid, x.Tag, x)
		}
	}
	ptStreams := map[string]uint64{}
	for _, tag := range []string{"thread-A", "thread-B"} {
		var pt []*TruthRecord
		for _, k := range r.kernelsTagged(tag) {
			if k.API == "cuLaunchKernel_ptsz" {
				pt = append(pt, k)
			}
		}
		if len(pt) != 200 {
			t.Fatalf("%s: %d per-thread-stream kernels, want 200", tag, len(pt))
		}
		var free uint64
		var lastCorr uint64
		for i, k := range pt {
			if k.Name != tag || k.Stream != pt[0].Stream || k.Stream == 0 {
				t.Fatalf("%s kernel %d: %+v", tag, i, *k)
			}
			if want := max(k.Submit+defLatency, free); k.Start != want {
				t.Errorf("%s kernel %d: start %d, want %d", tag, i, k.Start, want)
			}
			if k.Corr <= lastCorr {
				t.Errorf("%s: correlation ids not increasing", tag)
			}
			free, lastCorr = k.End, k.Corr
		}
		ptStreams[tag] = pt[0].Stream
	}
	if ptStreams["thread-A"] == ptStreams["thread-B"] {
		t.Error("two threads share one per-thread default stream")
	}
}

// TestInjection: cuInit loads CUDA_INJECTION64_PATH and calls InitializeInjection, whose observer
// then sees the same API calls and GPU operations as the truth file.
func TestInjection(t *testing.T) {
	t.Parallel()
	_, _, inject := tools(t)
	obs := filepath.Join(t.TempDir(), "observer.txt")
	r := runScenario(t, "inject", "CUDA_INJECTION64_PATH="+inject, "SIMGPU_TEST_INJECT_OUT="+obs)
	b, err := os.ReadFile(obs)
	if err != nil {
		t.Fatalf("InitializeInjection was not called: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "init" {
		t.Fatalf("observer output starts with %q", lines[0])
	}
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		seen[l] = true
	}
	// cuDriverGetVersion, called from inside InitializeInjection, is observed too.
	if a := r.apis("cuDriverGetVersion"); len(a) != 1 || !seen[fmt.Sprintf("api %d cuDriverGetVersion 0", a[0].Corr)] {
		t.Errorf("nested cuDriverGetVersion: truth %v, observer %v", a, lines)
	}
	ks := r.kernelsTagged("observed")
	if len(ks) != 2 {
		t.Fatalf("%d observed kernels", len(ks))
	}
	for _, k := range ks {
		if l := fmt.Sprintf("gpu %d k_observed %d %d observed", k.Corr, k.Start, k.End); !seen[l] {
			t.Errorf("observer missed %q", l)
		}
		if l := fmt.Sprintf("api %d cuLaunchKernel 0", k.Corr); !seen[l] {
			t.Errorf("observer missed %q", l)
		}
	}
	n := 0
	for _, x := range r.recs {
		if x.Kind == "api" { // cuInit included: its exit follows InitializeInjection
			if !seen[fmt.Sprintf("api %d %s %d", x.Corr, x.API, x.Result)] {
				t.Errorf("observer missed api %d %s", x.Corr, x.API)
			}
			n++
		}
	}
	if n == 0 {
		t.Error("no api records")
	}

	t.Run("missing library", func(t *testing.T) {
		r := runScenario(t, "inject", "CUDA_INJECTION64_PATH=/nonexistent/libinject.so")
		if !strings.Contains(r.stderr, "CUDA_INJECTION64_PATH") {
			t.Errorf("no warning on stderr: %q", r.stderr)
		}
		if len(r.kernelsTagged("observed")) != 2 {
			t.Error("the workload did not run on after a failed injection")
		}
	})
}

// TestBadInput: NULL pointers and unknown handles return errors, never crash.
func TestBadInput(t *testing.T) {
	t.Parallel()
	r := runScenario(t, "badinput")
	want := []float64{3, 1, 101, 400, 400, 1, 400, 1, 400, 1, 1, 1, 400, 1, 1, 201, 1, 0, 900, 1, 1, 0, 201}
	got, _ := r.out["codes"].([]any)
	if len(got) != len(want) {
		t.Fatalf("codes %v, want %v", got, want)
	}
	for i := range want {
		if got[i].(float64) != want[i] {
			t.Errorf("call %d returned %v, want %v", i, got[i], want[i])
		}
	}
	if r.out["not_ready_str"] != "device not ready" {
		t.Errorf("cuGetErrorString(600) = %v", r.out["not_ready_str"])
	}
	for _, a := range r.kind("api") {
		if a.API == "cuDeviceGet" && a.Result == 3 {
			return
		}
	}
	t.Error("no api record of the failing cuDeviceGet before cuInit")
}

// TestProcAddress: cuGetProcAddress returns the exported entry points (versioned and per-thread
// variants), and calls through them are recorded.
func TestProcAddress(t *testing.T) {
	t.Parallel()
	r := runScenario(t, "procaddr")
	for _, k := range []string{"launch", "launch_pt", "dtoh", "dtoh_pt", "inst", "missing_null"} {
		if r.num(t, k) != 1 {
			t.Errorf("%s: %v", k, r.out[k])
		}
	}
	if r.num(t, "status") != 0 || r.num(t, "missing") != 500 || r.num(t, "missing_status") != 1 || r.num(t, "version") != 13000 {
		t.Errorf("results: %v", r.out)
	}
	if len(r.apis("cuDriverGetVersion")) != 1 || len(r.apis("cuGetProcAddress_v2")) != 3 {
		t.Errorf("api records: %d cuDriverGetVersion, %d cuGetProcAddress_v2", len(r.apis("cuDriverGetVersion")), len(r.apis("cuGetProcAddress_v2")))
	}
}

// TestReadTruthRejectsGarbage keeps ReadTruth strict.
func TestReadTruthRejectsGarbage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(p, []byte("{\"kind\":\"api\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTruth(p); err == nil {
		t.Error("ReadTruth accepted a broken line")
	}
}
