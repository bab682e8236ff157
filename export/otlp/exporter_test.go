package otlp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const offset = 1_700_000_000_000_000_000 // wall - monotonic in the tests

var clock = model.FixedClock(offset)

func wall(mono uint64) time.Time { return time.Unix(0, int64(mono)+offset) }

// testCycle is an SGLang-shaped cycle: draft (GPU kernels, one all-reduce on
// the GPU), verify (kernels, an all-reduce not seen on the GPU), accept (a
// blocking copy). base shifts every time.
func testCycle(pid, tid, cycle int, base uint64) *model.CycleTrace {
	site := model.Frame{Func: "EAGLEWorker.draft_forward", File: "/sglang/srt/speculative/eagle_worker.py", Line: 412}
	cyc := model.Frame{Func: "EAGLEWorker.forward_batch_speculative_generation", File: "/sglang/srt/speculative/eagle_worker.py", Line: 300}
	return &model.CycleTrace{
		PID: pid, TID: tid, Rank: 1, Process: "sglang::scheduler_TP1", Cycle: cycle,
		Start: base, End: base + 9_000, GPU: true,
		Phases: []*model.PhaseTrace{
			{
				Phase: "spec.draft", Start: base, End: base + 2_000,
				Func:  model.Frame{Func: "EAGLEWorker.draft", File: "/sglang/srt/speculative/eagle_worker.py", Line: 400},
				Cycle: cyc,
				Stats: &model.PhaseStats{Phase: "spec.draft", Cycles: 1, Launches: 3, GraphLaunch: 1, Colls: 1, CollBytes: 8192,
					GPUCycles: 1, GPUKernels: 2, GPUBusyNs: 1_500, GPUSpanNs: 1_700, GPUKernelNs: 1_500},
				GPU: []model.GPUActivity{
					{Kind: "kernel", Name: "gemm_bf16", Start: base + 300, End: base + 1_300, Stream: 7, Corr: 11, Launch: base + 100, Site: site},
					{Kind: "kernel", Name: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", Start: base + 1_500, End: base + 2_000, Stream: 7, Corr: 12, Launch: base + 1_200},
				},
				Collectives: []model.Collective{{
					Op: "AllReduce", API: "ncclAllReduce", Time: base + 1_200, Count: 4096, Dtype: "bf16", Reduce: "sum", Bytes: 8192,
					Peer: -1, Site: site, Kernel: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", GPUStart: base + 1_500, GPUEnd: base + 2_000,
					Algorithm: "RING", Protocol: "LL", Ranks: 2, AlgBWGBps: 16.384, BusBWGBps: 16.384,
				}},
			},
			{
				Phase: "spec.verify", Start: base + 2_500, End: base + 5_000,
				Stats: &model.PhaseStats{Phase: "spec.verify", Cycles: 1, Launches: 1, GraphLaunch: 1, Colls: 1, CollBytes: 4096,
					GPUCycles: 1, GPUKernels: 1, GPUBusyNs: 2_000, GPUSpanNs: 2_000, GPUKernelNs: 2_000},
				GPU: []model.GPUActivity{{Kind: "kernel", Name: "attn", Start: base + 3_000, End: base + 5_000, Stream: 7, Corr: 13, Launch: base + 2_600}},
				Collectives: []model.Collective{{
					Op: "AllGather", API: "ncclAllGather", Time: base + 4_000, Bytes: 4096, Peer: -1,
				}},
			},
			{
				Phase: "spec.accept", Start: base + 5_200, End: base + 9_000,
				Stats: &model.PhaseStats{Phase: "spec.accept", Cycles: 1, Launches: 1, Syncs: 2, SyncWaitNs: 3_000,
					GPUMemcpys: 1, GPUMemcpyBytes: 64, GPUMemcpyNs: 400},
				GPU: []model.GPUActivity{{Kind: "memcpy", Start: base + 8_000, End: base + 8_400, Bytes: 64, Corr: 14, Launch: base + 5_500}},
				Syncs: []model.SyncTrace{
					{API: "cuMemcpyDtoH", Start: base + 5_500, WaitNs: 3_000, Bytes: 64,
						Site: model.Frame{Func: "EAGLEWorker.verify", File: "/sglang/srt/speculative/eagle_worker.py", Line: 521}},
					{API: "cuStreamSynchronize", Start: base + 8_900, WaitNs: -1},
				},
			},
		},
	}
}

// keep keeps the in-memory exporter's spans past Shutdown (which resets it).
type keep struct{ *tracetest.InMemoryExporter }

func (keep) Shutdown(context.Context) error { return nil }

func newTest(t *testing.T, cfg Config, exp sdktrace.SpanExporter) *Exporter {
	t.Helper()
	cfg.Clock = clock
	if m, ok := exp.(*tracetest.InMemoryExporter); ok {
		exp = keep{m}
	}
	e, err := newExporter(cfg, exp, "test")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func shutdown(t *testing.T, e *Exporter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func wantAttr(t *testing.T, s tracetest.SpanStub, key string, want any) {
	t.Helper()
	v, ok := attrs(s)[attribute.Key(key)]
	if !ok {
		t.Errorf("span %s: no attribute %s", s.Name, key)
		return
	}
	if got := v.AsInterface(); got != want {
		t.Errorf("span %s: %s = %v (%T), want %v (%T)", s.Name, key, got, got, want, want)
	}
}

func wantTimes(t *testing.T, s tracetest.SpanStub, start, end uint64) {
	t.Helper()
	if !s.StartTime.Equal(wall(start)) || !s.EndTime.Equal(wall(end)) {
		t.Errorf("span %s: %v → %v, want %v → %v", s.Name, s.StartTime.UnixNano(), s.EndTime.UnixNano(),
			wall(start).UnixNano(), wall(end).UnixNano())
	}
}

// tree indexes one trace's spans.
type tree struct {
	root     tracetest.SpanStub
	children map[trace.SpanID][]tracetest.SpanStub
}

func byTrace(t *testing.T, spans tracetest.SpanStubs) map[trace.TraceID]*tree {
	t.Helper()
	out := map[trace.TraceID]*tree{}
	for _, s := range spans {
		tr := out[s.SpanContext.TraceID()]
		if tr == nil {
			tr = &tree{children: map[trace.SpanID][]tracetest.SpanStub{}}
			out[s.SpanContext.TraceID()] = tr
		}
		if !s.Parent.IsValid() {
			if tr.root.Name != "" {
				t.Fatalf("trace %s has two roots", s.SpanContext.TraceID())
			}
			tr.root = s
			continue
		}
		tr.children[s.Parent.SpanID()] = append(tr.children[s.Parent.SpanID()], s)
	}
	for _, tr := range out {
		for _, cs := range tr.children {
			sort.SliceStable(cs, func(i, j int) bool { return cs[i].StartTime.Before(cs[j].StartTime) })
		}
	}
	return out
}

func names(ss []tracetest.SpanStub) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestSpanTree(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	e := newTest(t, Config{ServiceName: "svc-test"}, mem)
	c1 := testCycle(4242, 4243, 7, 1_000_000)
	c2 := testCycle(4242, 4243, 8, 2_000_000)
	want := e.spanCount(c1) + e.spanCount(c2)
	e.Cycle(c1)
	e.Cycle(c2)
	shutdown(t, e)
	spans := mem.GetSpans()
	if len(spans) != want || want != 2*11 {
		t.Fatalf("%d spans, want %d (= 2 × 11)", len(spans), want)
	}
	st := e.Stats()
	if st.Cycles != 2 || st.Spans != uint64(want) || st.SpansExported != uint64(want) || st.Lost() != 0 {
		t.Errorf("stats %+v", st)
	}
	traces := byTrace(t, spans)
	if len(traces) != 2 {
		t.Fatalf("%d traces, want one per cycle (2)", len(traces))
	}
	for _, tr := range traces {
		r := tr.root
		if r.Name != SpanCycle {
			t.Fatalf("root span %q, want %q", r.Name, SpanCycle)
		}
		num := attrs(r)["specprof.cycle"].AsInt64()
		c := c1
		if num == 8 {
			c = c2
		} else if num != 7 {
			t.Fatalf("cycle attribute %d", num)
		}
		wantTimes(t, r, c.Start, c.End)
		wantAttr(t, r, "thread.id", int64(4243))
		wantAttr(t, r, "specprof.tp_rank", int64(1))
		wantAttr(t, r, "specprof.gpu.busy_ns", int64(3_500))
		wantAttr(t, r, "specprof.gpu.kernels", int64(3))
		wantAttr(t, r, "specprof.sync.wait_ns", int64(3_000))
		wantAttr(t, r, "code.function.name", "EAGLEWorker.forward_batch_speculative_generation")

		res := map[attribute.Key]attribute.Value{}
		for _, kv := range r.Resource.Attributes() {
			res[kv.Key] = kv.Value
		}
		if res["service.name"].AsString() != "svc-test" || res["process.pid"].AsInt64() != 4242 ||
			res["specprof.tp_rank"].AsInt64() != 1 || res["host.name"].AsString() == "" ||
			res["process.command_line"].AsString() == "" {
			t.Errorf("resource %v", r.Resource.Attributes())
		}
		if r.InstrumentationScope.Name != ScopeName {
			t.Errorf("scope %q", r.InstrumentationScope.Name)
		}

		phases := tr.children[r.SpanContext.SpanID()]
		if got := strings.Join(names(phases), ","); got != "spec.draft,spec.verify,spec.accept" {
			t.Fatalf("phase spans %s", got)
		}
		for i, ps := range phases {
			p := c.Phases[i]
			wantTimes(t, ps, p.Start, p.End)
			wantAttr(t, ps, "specprof.phase", p.Phase)
			wantAttr(t, ps, "specprof.cpu_span_ns", int64(p.End-p.Start))
			wantAttr(t, ps, "specprof.gpu.busy_ns", p.Stats.GPUBusyNs)
			wantAttr(t, ps, "specprof.gpu.active_ns", p.Stats.GPUActiveNs)
			wantAttr(t, ps, "specprof.gpu.elapsed_ns", p.Stats.GPUElapsedNs)
			wantAttr(t, ps, "specprof.gpu.host_gap_ns", p.Stats.GPUHostGapNs)
			wantAttr(t, ps, "specprof.gpu.kernels", p.Stats.GPUKernels)
			wantAttr(t, ps, "specprof.sync.wait_ns", p.Stats.SyncWaitNs)
			wantAttr(t, ps, "specprof.launches", p.Stats.Launches)
		}
		wantAttr(t, phases[0], "code.function.name", "EAGLEWorker.draft")
		wantAttr(t, phases[0], "code.line.number", int64(400))

		// draft: gpu (first kernel start → last end), the all-reduce at its GPU times.
		draft := tr.children[phases[0].SpanContext.SpanID()]
		if got := strings.Join(names(draft), ","); got != "gpu,AllReduce" {
			t.Fatalf("draft children %s", got)
		}
		wantTimes(t, draft[0], c.Start+300, c.Start+2_000)
		wantAttr(t, draft[0], "specprof.gpu.busy_ns", int64(1_500))
		if k := tr.children[draft[0].SpanContext.SpanID()]; len(k) != 0 {
			t.Errorf("kernel spans without Config.Kernels: %v", names(k))
		}
		ar := draft[1]
		wantTimes(t, ar, c.Start+1_500, c.Start+2_000)
		wantAttr(t, ar, "specprof.collective.bytes", int64(8192))
		wantAttr(t, ar, "specprof.collective.dtype", "bf16")
		wantAttr(t, ar, "specprof.collective.algorithm", "RING")
		wantAttr(t, ar, "specprof.collective.busbw_gbps", 16.384)
		wantAttr(t, ar, "specprof.collective.on_gpu", true)
		wantAttr(t, ar, "code.file.path", "/sglang/srt/speculative/eagle_worker.py")

		// verify: the all-gather has no GPU side: a point (1 ns) at its call.
		verify := tr.children[phases[1].SpanContext.SpanID()]
		if got := strings.Join(names(verify), ","); got != "gpu,AllGather" {
			t.Fatalf("verify children %s", got)
		}
		wantTimes(t, verify[1], c.Start+4_000, c.Start+4_001)
		wantAttr(t, verify[1], "specprof.collective.on_gpu", false)
		wantAttr(t, verify[1], "specprof.collective.bytes", int64(4096))

		// accept: two syncs, the second never returned; a gpu span for the copy.
		accept := tr.children[phases[2].SpanContext.SpanID()]
		if got := strings.Join(names(accept), ","); got != "cuMemcpyDtoH,gpu,cuStreamSynchronize" {
			t.Fatalf("accept children %s", got)
		}
		wantTimes(t, accept[1], c.Start+8_000, c.Start+8_400)
		wantAttr(t, accept[1], "specprof.gpu.busy_ns", int64(0))
		wantAttr(t, phases[2], "specprof.gpu.memcpy_bytes", int64(64))
		accept = []tracetest.SpanStub{accept[0], accept[2]}
		wantTimes(t, accept[0], c.Start+5_500, c.Start+8_500)
		wantAttr(t, accept[0], "specprof.sync.wait_ns", int64(3_000))
		wantAttr(t, accept[0], "code.function.name", "EAGLEWorker.verify")
		wantAttr(t, accept[0], "code.line.number", int64(521))
		wantAttr(t, accept[0], "specprof.sync.bytes", int64(64))
		wantTimes(t, accept[1], c.Start+8_900, c.Start+8_901)
		wantAttr(t, accept[1], "specprof.sync.returned", false)
	}
}

func TestKernelSpans(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	e := newTest(t, Config{Kernels: true}, mem)
	c := testCycle(10, 10, 1, 5_000_000)
	e.Cycle(c)
	shutdown(t, e)
	if n := len(mem.GetSpans()); n != 11+4 {
		t.Fatalf("%d spans, want 15 (11 + 3 kernels + 1 copy)", n)
	}
	for _, tr := range byTrace(t, mem.GetSpans()) {
		draft := tr.children[tr.root.SpanContext.SpanID()][0]
		gpu := tr.children[draft.SpanContext.SpanID()][0]
		ks := tr.children[gpu.SpanContext.SpanID()]
		if got := strings.Join(names(ks), ","); got != "gemm_bf16,ncclDevKernel_AllReduce_Sum_bf16_RING_LL" {
			t.Fatalf("kernel spans %s", got)
		}
		wantTimes(t, ks[0], c.Start+300, c.Start+1_300)
		wantAttr(t, ks[0], "specprof.gpu.stream", int64(7))
		wantAttr(t, ks[0], "specprof.gpu.correlation_id", int64(11))
		wantAttr(t, ks[0], "specprof.gpu.launch_to_start_ns", int64(200))
		wantAttr(t, ks[0], "code.function.name", "EAGLEWorker.draft_forward")
		accept := tr.children[tr.root.SpanContext.SpanID()][2]
		cp := tr.children[tr.children[accept.SpanContext.SpanID()][1].SpanContext.SpanID()]
		if len(cp) != 1 || cp[0].Name != "memcpy" {
			t.Fatalf("copy spans %v", names(cp))
		}
		wantTimes(t, cp[0], c.Start+8_000, c.Start+8_400)
		wantAttr(t, cp[0], "specprof.gpu.kind", "memcpy")
		wantAttr(t, cp[0], "specprof.gpu.bytes", int64(64))
	}
}

// Each traced process gets its own resource; its cycles their own traces.
func TestResourcePerProcess(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	e := newTest(t, Config{}, mem)
	e.res.proc = t.TempDir() // pid 100: a command line; pid 200: exited
	if err := os.MkdirAll(filepath.Join(e.res.proc, "100"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.res.proc, "100", "cmdline"), []byte("python3\x00-m\x00sglang.launch_server\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := testCycle(100, 100, 1, 1_000)
	b := testCycle(200, 201, 1, 1_000)
	b.Rank = -1
	e.Cycle(a)
	e.Cycle(b)
	shutdown(t, e)
	pids := map[int64]bool{}
	for _, tr := range byTrace(t, mem.GetSpans()) {
		res := map[attribute.Key]attribute.Value{}
		for _, kv := range tr.root.Resource.Attributes() {
			res[kv.Key] = kv.Value
		}
		pid := res["process.pid"].AsInt64()
		pids[pid] = true
		_, hasRank := res["specprof.tp_rank"]
		if (pid == 100) != hasRank {
			t.Errorf("pid %d: rank attribute present %v", pid, hasRank)
		}
		if res["service.name"].AsString() != DefaultServiceName {
			t.Errorf("service.name %q", res["service.name"].AsString())
		}
		want := map[int64]string{100: "python3 -m sglang.launch_server", 200: "sglang::scheduler_TP1"}[pid]
		if got := res["process.command_line"].AsString(); got != want {
			t.Errorf("pid %d: command line %q, want %q", pid, got, want)
		}
	}
	if len(pids) != 2 {
		t.Errorf("resources for pids %v, want 100 and 200", pids)
	}
}

// TestResourceGPUs: the GPUs a process runs on join its resource once
// known (the first cycles may come before NVML lists the process).
func TestResourceGPUs(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	e := newTest(t, Config{}, mem)
	first := testCycle(100, 100, 1, 1_000)
	second := testCycle(100, 100, 2, 1_000)
	second.Devices = []model.Device{{Index: 3, Name: "NVIDIA H200", UUID: "GPU-1234"}}
	e.Cycle(first)
	e.Cycle(second)
	shutdown(t, e)
	var with, without int
	for _, tr := range byTrace(t, mem.GetSpans()) {
		res := map[attribute.Key]attribute.Value{}
		for _, kv := range tr.root.Resource.Attributes() {
			res[kv.Key] = kv.Value
		}
		if v, ok := res[AttrGPUUUID]; ok {
			with++
			if got := v.AsStringSlice(); len(got) != 1 || got[0] != "GPU-1234" || res[AttrGPUName].AsStringSlice()[0] != "NVIDIA H200" ||
				res[AttrGPUIndex].AsInt64Slice()[0] != 3 {
				t.Errorf("GPU attributes %v %v %v", got, res[AttrGPUName], res[AttrGPUIndex])
			}
		} else {
			without++
		}
	}
	if with != 1 || without != 1 {
		t.Errorf("%d traces with GPU attributes, %d without; want 1 and 1", with, without)
	}
}

// blockingExporter holds every export until released.
type blockingExporter struct {
	release chan struct{}
	spans   atomic.Int64
}

func (b *blockingExporter) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.spans.Add(int64(len(s)))
	return nil
}

func (b *blockingExporter) Shutdown(context.Context) error { return nil }

// A stalled endpoint never blocks Cycle: the queue fills, cycles are
// dropped and counted, and every span is accounted for.
func TestFullQueueDropsNeverBlocks(t *testing.T) {
	b := &blockingExporter{release: make(chan struct{})}
	e := newTest(t, Config{QueueCycles: 8}, b)
	const n = 20000
	c := testCycle(1, 1, 1, 1_000)
	per := uint64(e.spanCount(c))
	var slowest time.Duration
	t0 := time.Now()
	for i := 0; i < n; i++ {
		s := time.Now()
		e.Cycle(testCycle(1, 1, i+1, uint64(i)*10_000))
		slowest = max(slowest, time.Since(s))
	}
	total := time.Since(t0)
	st := e.Stats()
	if st.Cycles != n || st.CyclesDropped == 0 {
		t.Fatalf("stats with the endpoint stalled: %+v", st)
	}
	// The batch processor holds bspQueueSpans + one batch, the converter one
	// cycle, the queue 8: everything else must have been dropped.
	if held := (n - st.CyclesDropped) * per; held > bspQueueSpans+bspBatchSpans+9*per {
		t.Errorf("%d spans held with the endpoint stalled", held)
	}
	if st.SpansDropped != st.CyclesDropped*per {
		t.Errorf("spans dropped %d, want %d × %d", st.SpansDropped, st.CyclesDropped, per)
	}
	if total > 2*time.Second || slowest > 100*time.Millisecond {
		t.Errorf("Cycle blocked: %d calls took %v, slowest %v", n, total, slowest)
	}
	t.Logf("%d cycles in %v (slowest call %v), %d dropped", n, total, slowest, st.CyclesDropped)
	close(b.release)
	shutdown(t, e)
	st = e.Stats()
	if st.SpansExported+st.SpansDropped != n*per || st.Pending() != 0 || uint64(b.spans.Load()) != st.SpansExported {
		t.Errorf("after release: %+v (want exported + dropped = %d)", st, n*per)
	}
	e.Cycle(c)
	if st2 := e.Stats(); st2.CyclesDropped != st.CyclesDropped+1 {
		t.Errorf("a cycle after Shutdown is not counted as dropped: %+v", st2)
	}
	if !strings.Contains(st.String(), "dropped with the queue full") {
		t.Errorf("summary line %q", st)
	}
}

type failingExporter struct{ calls atomic.Int64 }

func (f *failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	f.calls.Add(1)
	return errors.New("connection refused")
}
func (f *failingExporter) Shutdown(context.Context) error { return nil }

// syncBuffer is a log destination safe for the exporter's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Failed exports are counted per span and logged once.
func TestExportFailureLoggedOnce(t *testing.T) {
	var buf syncBuffer
	f := &failingExporter{}
	e := newTest(t, Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))}, f)
	const n = 3000 // several batches
	var want uint64
	for i := 0; i < n; i++ {
		c := testCycle(1, 1, i+1, uint64(i)*10_000)
		want += uint64(e.spanCount(c))
		e.Cycle(c)
		if i%500 == 0 {
			time.Sleep(5 * time.Millisecond) // let the converter keep up: no drops here
		}
	}
	shutdown(t, e)
	st := e.Stats()
	if f.calls.Load() < 2 {
		t.Fatalf("%d export calls, want several", f.calls.Load())
	}
	if st.SpansFailed+st.SpansDropped != want || st.SpansExported != 0 || st.ExportErrors != uint64(f.calls.Load()) {
		t.Errorf("stats %+v, want %d spans failed or dropped over %d calls", st, want, f.calls.Load())
	}
	if st.FirstError != "connection refused" {
		t.Errorf("first error %q", st.FirstError)
	}
	if got := strings.Count(buf.String(), "OTLP export failed"); got != 1 {
		t.Errorf("failure logged %d times, want once:\n%s", got, buf.String())
	}
	line := st.String()
	if !strings.Contains(line, "failed exports") || !strings.Contains(line, "connection refused") {
		t.Errorf("summary line %q", line)
	}
}

// A dead endpoint never holds up the exit beyond Shutdown's deadline.
func TestShutdownDeadline(t *testing.T) {
	b := &blockingExporter{release: make(chan struct{})}
	e := newTest(t, Config{}, b)
	for i := 0; i < 100; i++ {
		e.Cycle(testCycle(1, 1, i+1, uint64(i)*10_000))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := e.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want the deadline", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Shutdown took %v past a 300 ms deadline", d)
	}
	st := e.Stats()
	if st.Pending() == 0 || st.SpansExported != 0 || !strings.Contains(st.String(), "unsent at exit") {
		t.Errorf("stats %+v / %q", st, st)
	}
	close(b.release)
}

// BenchmarkConvert measures cycles → spans → batch processor (in-memory
// exporter): the converter's throughput.
func BenchmarkConvert(b *testing.B) {
	e, err := newExporter(Config{Clock: clock, QueueCycles: 1 << 16}, discard{}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	cs := make([]*model.CycleTrace, 1024)
	for i := range cs {
		cs[i] = testCycle(1, 1, i+1, uint64(i)*10_000)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := cs[i%len(cs)]
		e.spans.Add(uint64(e.emit(c)))
	}
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Shutdown(ctx)
	st := e.Stats()
	b.ReportMetric(float64(st.Spans)/b.Elapsed().Seconds(), "spans/s")
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// TestRanksShareTrace: cycles compared across tensor-parallel ranks (TP
// set) put the same cycle of every rank in one trace, each rank's cycle a
// root under its own process, with the straggler and the arrival figures;
// uncompared cycles keep a trace of their own.
func TestRanksShareTrace(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	e := newTest(t, Config{}, mem)
	var cs []*model.CycleTrace
	for cycle := 1; cycle <= 2; cycle++ {
		for rank := 0; rank < 2; rank++ {
			c := testCycle(100+rank, 100+rank, cycle, uint64(cycle)*100_000)
			c.Rank = rank
			c.TP = &model.CycleTP{Ranks: 2, Collectives: 1, Straggler: 1, SpreadNs: 300, WaitNs: int64(300 * (1 - rank))}
			c.Phases[0].Collectives[0].Arrival = &model.Arrival{LastRank: 1, WaitNs: c.TP.WaitNs, SpreadNs: 300}
			cs = append(cs, c)
		}
	}
	lone := testCycle(100, 100, 3, 900_000)
	cs = append(cs, lone)
	for _, c := range cs {
		e.Cycle(c)
	}
	shutdown(t, e)
	roots := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	var lastRank []int64
	for _, s := range mem.GetSpans().Snapshots() {
		if !s.Parent().IsValid() {
			roots[s.SpanContext().TraceID()] = append(roots[s.SpanContext().TraceID()], s)
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "specprof.collective.last_rank" {
				lastRank = append(lastRank, kv.Value.AsInt64())
			}
		}
	}
	if len(roots) != 3 {
		t.Fatalf("%d traces, want 3 (two cycles of two ranks, one lone cycle)", len(roots))
	}
	for id, rs := range roots {
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range rs[0].Attributes() {
			attrs[kv.Key] = kv.Value
		}
		if attrs["specprof.cycle"].AsInt64() == 3 {
			if len(rs) != 1 {
				t.Errorf("lone cycle: %d roots", len(rs))
			}
			if _, ok := attrs["specprof.tp.straggler_rank"]; ok {
				t.Errorf("lone cycle has a straggler")
			}
			continue
		}
		if len(rs) != 2 {
			t.Fatalf("trace %s: %d cycle roots, want one per rank", id, len(rs))
		}
		pids := map[int64]bool{}
		for _, r := range rs {
			for _, kv := range r.Resource().Attributes() {
				if kv.Key == "process.pid" {
					pids[kv.Value.AsInt64()] = true
				}
			}
			a := map[attribute.Key]attribute.Value{}
			for _, kv := range r.Attributes() {
				a[kv.Key] = kv.Value
			}
			if a["specprof.tp.straggler_rank"].AsInt64() != 1 || a["specprof.tp.ranks"].AsInt64() != 2 {
				t.Errorf("cycle root attributes %v", a)
			}
		}
		if len(pids) != 2 {
			t.Errorf("trace %s: processes %v, want both ranks", id, pids)
		}
	}
	if len(lastRank) != 4 {
		t.Errorf("collective last_rank on %d spans, want 4", len(lastRank))
	}
}
