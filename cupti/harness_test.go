package cupti

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specprof/specprof/internal/testenv"
)

// buildInjection builds build/libspecprof_cupti.so and build/standin/libcupti.so.13 (with the
// stand-in libcuda/libnccl) and returns (library, mock libcupti, stand-in directory).
func buildInjection(t testing.TB) (lib, mock, standins string) {
	t.Helper()
	return testenv.BuildInjection(t)
}

func python(t testing.TB) string {
	t.Helper()
	return testenv.Interpreters(t)[0].Path
}

func workloadPath(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "testdata", "workloads", "sglang_demo.py")
}

// injectEnv is the environment of a workload with the library injected against the mock.
func injectEnv(t testing.TB, socket string, extra ...string) []string {
	lib, mock, standins := buildInjection(t)
	env := []string{"CUDA_INJECTION64_PATH=" + lib, "SPECPROF_CUPTI_LIB=" + mock, "SPECPROF_SOCKET=" + socket}
	return testenv.SimEnv(standins, append(env, extra...)...)
}

// plainEnv is the environment of a workload on the stand-ins without injection.
func plainEnv(t testing.TB, extra ...string) []string {
	_, _, standins := buildInjection(t)
	return testenv.SimEnv(standins, append([]string{"CUDA_INJECTION64_PATH="}, extra...)...)
}

type runResult struct {
	stdout, stderr string
	code           int
	wall           time.Duration
}

func runWorkload(t testing.TB, env []string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python(t), append([]string{workloadPath(t)}, args...)...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := runResult{stdout: out.String(), stderr: errb.String(), wall: time.Since(start)}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else {
			t.Fatalf("running the workload: %v", err)
		}
	}
	return r
}

var throughputRE = regexp.MustCompile(`gen throughput \(token/s\): [0-9.]+`)
var logTimeRE = regexp.MustCompile(`^\[[0-9-]+ [0-9:]+ `)

// normalize removes what differs between two runs of the same seed: times, throughputs, ids.
func normalize(t testing.TB, out string) string {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(line, "{") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("workload summary is not JSON: %v: %s", err, line)
			}
			for _, k := range []string{"wall_s", "gen_throughput", "pid", "tid"} {
				delete(m, k)
			}
			if x, ok := m["extra_thread"].(map[string]any); ok {
				delete(x, "tid")
				delete(x, "wall_s")
			}
			j, _ := json.Marshal(m)
			line = string(j)
		}
		line = throughputRE.ReplaceAllString(line, "gen throughput (token/s): X")
		line = logTimeRE.ReplaceAllString(line, "[T ")
		b.WriteString(line + "\n")
	}
	return b.String()
}

// Baseline runs (no injection), cached by arguments.
var (
	baselineMu sync.Mutex
	baselines  = map[string]runResult{}
)

func baseline(t testing.TB, args ...string) runResult {
	t.Helper()
	key := strings.Join(args, " ")
	baselineMu.Lock()
	defer baselineMu.Unlock()
	if r, ok := baselines[key]; ok {
		return r
	}
	r := runWorkload(t, plainEnv(t), args...)
	if r.code != 0 {
		t.Fatalf("baseline workload failed (%d): %s", r.code, r.stderr)
	}
	baselines[key] = r
	return r
}

// sameOutput fails the test unless got's stdout equals the baseline's, normalized.
func sameOutput(t testing.TB, got runResult, args ...string) {
	t.Helper()
	if got.code != 0 {
		t.Fatalf("workload exited %d; stderr:\n%s", got.code, got.stderr)
	}
	want := baseline(t, args...)
	if a, b := normalize(t, got.stdout), normalize(t, want.stdout); a != b {
		t.Fatalf("workload output differs from the run without injection:\n--- injected\n%s--- plain\n%s", a, b)
	}
}

// specprofLines returns the library's stderr lines.
func specprofLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "specprof-cupti:") {
			out = append(out, l)
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// collector: a Handler that keeps everything.

type connData struct {
	allAPI     bool // the library ran with SPECPROF_CUPTI_API=all (set by the test)
	cbAPI      bool // the library made the API records in callbacks (SPECPROF_CUPTI_API_SOURCE=callbacks)
	conn       *Conn
	info       ConnInfo
	kernels    []Kernel
	memcpys    []Memcpy
	memsets    []Memset
	apis       []API
	syncs      []Sync
	graphNodes []GraphNode
	overheads  []Overhead
	lib        LibStats
	final      bool
	acks       int
	closeErr   error
	closed     chan struct{}
}

type collector struct {
	mu     sync.Mutex
	conns  []*connData
	byID   map[uint64]*connData
	opened chan *connData
}

func newCollector() *collector {
	return &collector{byID: map[uint64]*connData{}, opened: make(chan *connData, 16)}
}

func (c *collector) Open(conn *Conn) {
	d := &connData{conn: conn, info: conn.Info(), closed: make(chan struct{})}
	c.mu.Lock()
	c.conns = append(c.conns, d)
	c.byID[conn.ID()] = d
	c.mu.Unlock()
	c.opened <- d
}

func (c *collector) Records(conn *Conn, b *Batch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.byID[conn.ID()]
	d.kernels = append(d.kernels, b.Kernels...)
	d.memcpys = append(d.memcpys, b.Memcpys...)
	d.memsets = append(d.memsets, b.Memsets...)
	d.apis = append(d.apis, b.APIs...)
	d.syncs = append(d.syncs, b.Syncs...)
	d.graphNodes = append(d.graphNodes, b.GraphNodes...)
	d.overheads = append(d.overheads, b.Overheads...)
	if b.Stats != nil {
		d.lib = *b.Stats
	}
	d.final = d.final || b.Final
	if b.FlushAck {
		d.acks++
	}
}

func (c *collector) Close(conn *Conn, err error) {
	c.mu.Lock()
	d := c.byID[conn.ID()]
	c.mu.Unlock()
	if d == nil { // closed before its HELLO
		return
	}
	d.closeErr = err
	close(d.closed)
}

func (c *collector) waitOpen(t testing.TB, timeout time.Duration) *connData {
	t.Helper()
	select {
	case d := <-c.opened:
		return d
	case <-time.After(timeout):
		t.Fatalf("no library connected within %v", timeout)
		return nil
	}
}

func (d *connData) waitClosed(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-d.closed:
	case <-time.After(timeout):
		t.Fatalf("connection %d did not close within %v", d.info.ID, timeout)
	}
}

// startReceiver listens on a fresh socket in a temporary directory and serves h.
func startReceiver(t testing.TB, h Handler) (*Receiver, string) {
	t.Helper()
	return startReceiverConfig(t, h, Config{Path: filepath.Join(t.TempDir(), "cupti.sock")})
}

// startReceiverConfig listens as cfg says and serves h until the test ends.
func startReceiverConfig(t testing.TB, h Handler, cfg Config) (*Receiver, string) {
	t.Helper()
	r, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Serve(h) }()
	t.Cleanup(func() {
		r.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return r, r.Path()
}

// ---------------------------------------------------------------------------------------------
// Truth comparison

type truthSet struct {
	kernels, memcpys, memsets, apis, graphNodes []testenv.TruthRecord
	apiByCorr                                   map[uint64]*testenv.TruthRecord
}

func readTruth(t testing.TB, path string) *truthSet {
	t.Helper()
	recs, err := testenv.ReadTruth(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := &truthSet{apiByCorr: map[uint64]*testenv.TruthRecord{}}
	for i := range recs {
		r := &recs[i]
		switch r.Kind {
		case "kernel":
			ts.kernels = append(ts.kernels, *r)
		case "memcpy":
			ts.memcpys = append(ts.memcpys, *r)
		case "memset":
			ts.memsets = append(ts.memsets, *r)
		case "api", "rtapi":
			ts.apis = append(ts.apis, *r)
			ts.apiByCorr[r.Corr] = r
		case "graph_node":
			ts.graphNodes = append(ts.graphNodes, *r)
		}
	}
	return ts
}

// The mock's graph node ids (testdata/mockcupti/mockcupti.c).
func mockOrigNode(graph uint64, node uint32) uint64 { return graph<<32 | uint64(node) }
func mockCloneNode(exec uint64, node uint32) uint64 {
	return 1<<63 | exec<<32 | uint64(node)
}

type kkey struct {
	corr uint32
	node uint64
}

// checkTruth compares one connection's records with the simulator's ground truth: every kernel
// and copy exactly once with ns-exact times (tolerance > 0 only for the offset clock), and the
// API calls, graph nodes and synchronizations of the run. since: only GPU work submitted after
// this CLOCK_MONOTONIC time is required (late agent); 0 requires everything.
func checkTruth(t *testing.T, ts *truthSet, d *connData, tolerance uint64, since uint64) {
	t.Helper()
	near := func(a, b uint64) bool {
		if a > b {
			a, b = b, a
		}
		return b-a <= tolerance
	}
	// Kernels.
	got := map[kkey][]Kernel{}
	for _, k := range d.kernels {
		got[kkey{k.CorrelationID, k.GraphNodeID}] = append(got[kkey{k.CorrelationID, k.GraphNodeID}], k)
	}
	ctxMap := map[uint64]uint32{}
	matched, bad := 0, 0
	for _, tk := range ts.kernels {
		node := uint64(0)
		if tk.GraphExecID != 0 {
			node = mockCloneNode(tk.GraphExecID, tk.NodeID)
		}
		ks := got[kkey{uint32(tk.Corr), node}]
		if tk.Submit < since {
			continue
		}
		if len(ks) != 1 {
			if bad++; bad <= 5 {
				t.Errorf("truth kernel %s corr %d node %d: %d decoded records", tk.Name, tk.Corr, tk.NodeID, len(ks))
			}
			continue
		}
		k := ks[0]
		name := d.conn.Name(k.NameID)
		if !near(k.Start, tk.Start) || !near(k.End, tk.End) || k.Stream != tk.StreamID || name != tk.Name ||
			uint64(k.GraphID) != tk.GraphID || k.Device != uint32(tk.Device) || k.Grid != tk.Grid ||
			k.Block != tk.Block || k.DynamicShared != tk.SharedMem {
			if bad++; bad <= 5 {
				t.Errorf("kernel corr %d: decoded %+v name %q; truth %+v", tk.Corr, k, name, tk)
			}
		}
		if c, ok := ctxMap[tk.Context]; ok && c != k.Context {
			t.Errorf("context %#x decoded as both %d and %d", tk.Context, c, k.Context)
		}
		ctxMap[tk.Context] = k.Context
		matched++
	}
	if extra := len(d.kernels) - matched; since == 0 && extra != 0 {
		t.Errorf("%d decoded kernels are not in the truth", extra)
	}
	// Copies.
	mc := map[uint32][]Memcpy{}
	for _, m := range d.memcpys {
		mc[m.CorrelationID] = append(mc[m.CorrelationID], m)
	}
	for _, tm := range ts.memcpys {
		if tm.Submit < since {
			continue
		}
		ms := mc[uint32(tm.Corr)]
		kind := uint8(2)
		if tm.CopyKind == "HtoD" {
			kind = 1
		}
		if len(ms) != 1 || !near(ms[0].Start, tm.Start) || !near(ms[0].End, tm.End) || ms[0].Bytes != tm.Bytes ||
			ms[0].Stream != tm.StreamID || ms[0].CopyKind != kind {
			t.Errorf("memcpy corr %d: decoded %+v; truth %+v", tm.Corr, ms, tm)
		}
	}
	// API records: right thread and times for every decoded one; every call after the first
	// decoded one is there (the calls before cuInit ran without the library).
	var minCorr uint32 = ^uint32(0)
	apiSeen := map[uint32]int{}
	for _, a := range d.apis {
		ta := ts.apiByCorr[uint64(a.CorrelationID)]
		if ta == nil {
			t.Errorf("API record corr %d has no truth call", a.CorrelationID)
			continue
		}
		// Made in CUPTI's callbacks, the times are those of the callbacks: the enter callback runs
		// after the call began, the exit callback after it ended. A call that entered before the
		// callbacks were on has a record of its exit only (start == end).
		times := near(a.Start, ta.Enter) && near(a.End, ta.Exit)
		if d.cbAPI {
			times = (a.Start >= ta.Enter && a.Start <= ta.Exit || a.Start == a.End) && a.End >= ta.Exit &&
				a.End-ta.Exit < 50_000_000
		}
		domain := uint16(DomainDriver)
		if ta.Kind == "rtapi" {
			domain = DomainRuntime
		}
		if a.Tid != ta.Tid || a.Pid != ta.Pid || !times || a.Cbid == 0 || a.Domain != domain {
			t.Errorf("API corr %d (%s): decoded %+v; truth tid %d enter %d exit %d", a.CorrelationID, ta.API, a, ta.Tid,
				ta.Enter, ta.Exit)
		}
		apiSeen[a.CorrelationID]++
		minCorr = min(minCorr, a.CorrelationID)
	}
	if len(d.apis) == 0 {
		t.Errorf("no API records")
	}
	if since == 0 {
		missing := 0
		for _, ta := range ts.apis {
			want := 0
			switch {
			case ta.Parent != 0: // part of a runtime call, whose record stands for both (as CUPTI's)
			case ta.Kind == "rtapi":
				want = 1 // the stand-in runtime makes only work calls
			case d.allAPI || workAPI.MatchString(ta.API):
				want = 1
			}
			if uint32(ta.Corr) >= minCorr && apiSeen[uint32(ta.Corr)] != want {
				if missing++; missing <= 3 {
					t.Errorf("API call %s corr %d: %d records, want %d", ta.API, ta.Corr, apiSeen[uint32(ta.Corr)], want)
				}
			}
		}
	}
	// Graph nodes: every captured node maps to its capturing launch; every replayed clone to it.
	created := map[uint64]GraphNode{}
	cloned := map[uint64]GraphNode{}
	for _, g := range d.graphNodes {
		switch g.Op {
		case GraphNodeCreated:
			created[g.NodeID] = g
		case GraphNodeCloned:
			cloned[g.NodeID] = g
		default:
			t.Errorf("graph node record with op %d", g.Op)
		}
	}
	for _, tg := range ts.graphNodes {
		g, ok := created[mockOrigNode(tg.GraphID, tg.NodeID)]
		wantCorr := uint32(tg.Corr)
		if since != 0 {
			wantCorr = 0 // captured before the agent connected: no driver callbacks then
		}
		if !ok || uint64(g.GraphID) != tg.GraphID || g.CorrelationID != wantCorr || g.Tid != tg.Tid {
			t.Errorf("graph node %d/%d (corr %d): decoded %+v (found %v)", tg.GraphID, tg.NodeID, tg.Corr, g, ok)
		}
	}
	for _, tk := range ts.kernels {
		if tk.GraphExecID == 0 || tk.Submit < since {
			continue
		}
		g, ok := cloned[mockCloneNode(tk.GraphExecID, tk.NodeID)]
		if !ok || g.OriginalNodeID != mockOrigNode(tk.GraphID, tk.NodeID) {
			t.Errorf("replayed node %d/%d: clone record %+v (found %v)", tk.GraphID, tk.NodeID, g, ok)
			break
		}
	}
	// Synchronizations: one per synchronizing call, with its times.
	syncs := map[uint32]Sync{}
	for _, s := range d.syncs {
		syncs[s.CorrelationID] = s
	}
	for _, ta := range ts.apis {
		if !strings.HasPrefix(ta.API, "cuStreamSynchronize") || uint32(ta.Corr) < minCorr {
			continue
		}
		s, ok := syncs[uint32(ta.Corr)]
		if !ok || s.Kind != 3 || !near(s.Start, ta.Enter) || !near(s.End, ta.Exit) {
			t.Errorf("sync %s corr %d: decoded %+v (found %v)", ta.API, ta.Corr, s, ok)
			break
		}
	}
	t.Logf("connection %d (pid %d, CUPTI %d): %d kernels, %d memcpys, %d APIs, %d syncs, %d graph-node records, %d overhead; library stats %+v",
		d.info.ID, d.info.Pid, d.info.CuptiVersion, len(d.kernels), len(d.memcpys), len(d.apis), len(d.syncs),
		len(d.graphNodes), len(d.overheads), d.lib)
}

// readMockStats parses the mock's SPECPROF_MOCK_CUPTI_STATS file.
type mockStats struct {
	Version          uint32            `json:"version"`
	EverEnabled      bool              `json:"ever_enabled"`
	Records          map[string]uint64 `json:"records"`
	Dropped          uint64            `json:"dropped"`
	DriverCB         uint64            `json:"driver_callbacks"`
	ResourceCB       uint64            `json:"resource_callbacks"`
	RuntimeCallbacks uint64            `json:"runtime_callbacks"`
	Warnings         []string          `json:"warnings"`
	// Detach (SPECPROF_CUPTI_DETACH).
	Subscribes         int `json:"subscribes"`
	Finalizes          int `json:"finalizes"`
	FinalizeOutside    int `json:"finalize_outside_exit_callback"`
	CallsWhileDetached int `json:"calls_while_detached"`
	FinalizeWithGraphs int `json:"finalize_with_graphs"` // after graphs were built under CUPTI
}

func readMockStats(t testing.TB, path string) mockStats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the mock CUPTI's stats: %v", err)
	}
	var s mockStats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("parsing the mock CUPTI's stats %s: %v", b, err)
	}
	return s
}

// lineWaiter reads a pipe line by line into a buffer and reports the first line containing a
// string.
type lineWaiter struct {
	mu    sync.Mutex
	buf   strings.Builder
	found map[string]chan struct{}
	done  chan struct{}
}

func newLineWaiter(r interface{ Read([]byte) (int, error) }, wants ...string) *lineWaiter {
	w := &lineWaiter{found: map[string]chan struct{}{}, done: make(chan struct{})}
	for _, s := range wants {
		w.found[s] = make(chan struct{})
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			w.buf.WriteString(line + "\n")
			for s, ch := range w.found {
				if strings.Contains(line, s) {
					close(ch)
					delete(w.found, s)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *lineWaiter) wait(t testing.TB, s string, timeout time.Duration) {
	t.Helper()
	w.mu.Lock()
	ch, ok := w.found[s]
	w.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%q not seen within %v; output so far:\n%s", s, timeout, w.String())
	}
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// workAPI matches the driver calls whose API records the library keeps by
// default (cupti/lib/api_filter.h): those that make, wait for or capture
// GPU work. With SPECPROF_CUPTI_API=all (connData.allAPI) every call has one.
var workAPI = regexp.MustCompile(`^cu(Launch|GraphLaunch|Memcpy|Memset|StreamSynchronize|CtxSynchronize|EventSynchronize|EventRecord|StreamWaitEvent|StreamBeginCapture|StreamEndCapture|GraphInstantiate|MemPrefetchAsync)`)
