package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/internal/testenv"
)

// OTLP traces into a real Jaeger (internal/tools/jaeger, built by
// `make jaeger`): the SGLang-shaped demo under `specprof run --otlp-endpoint`,
// then Jaeger's query API is compared with the report.

// jaegerBinary finds the Jaeger built by internal/tools/jaeger/install.sh:
// $SPECPROF_JAEGER, else the install script's cache. Missing: a skip, or a
// failure under CI=true (.ci/run installs it).
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SPECPROF_JAEGER"); p != "" {
		return p
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "internal/tools/jaeger/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/jaegertracing/jaeger (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("internal/tools/jaeger/go.mod does not require github.com/jaegertracing/jaeger")
	}
	name := "jaeger-" + string(m[1])
	dirs := []string{"/var/cache/specprof"}
	if c := os.Getenv("SPECPROF_CACHE"); c != "" {
		dirs = []string{c}
	}
	if h, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(h, ".cache/specprof"))
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return filepath.Join(d, name)
		}
	}
	msg := fmt.Sprintf("%s not found in %v: build it with 'make jaeger' (internal/tools/jaeger/install.sh)", name, dirs)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; .ci/run should have")
	}
	t.Skip(msg)
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	return freePorts(t, 1)[0]
}

// freePorts returns n distinct free loopback ports: all stay bound until
// every one is chosen (one by one, the kernel handed Jaeger's query and OTLP
// receiver the same port once in CI).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// jaeger is one running Jaeger on loopback.
type jaeger struct {
	bin                       string
	otlpGRPC, otlpHTTP, query int
	queryGRPC                 int
	cmd                       *exec.Cmd
	log                       *lockedBuffer
	exited                    chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newJaeger(t *testing.T) *jaeger {
	ports := freePorts(t, 4)
	j := &jaeger{bin: jaegerBinary(t), otlpGRPC: ports[0], otlpHTTP: ports[1], query: ports[2], queryGRPC: ports[3]}
	j.start(t)
	t.Cleanup(func() {
		j.stop()
		if t.Failed() {
			t.Logf("jaeger log (tail):\n%s", tail(j.log.String(), 4000))
		}
	})
	return j
}

// start runs Jaeger (again, on the same ports) and waits until it serves.
func (j *jaeger) start(t *testing.T) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	j.log = &lockedBuffer{}
	j.cmd = exec.Command(j.bin, "--config", filepath.Join(root, "testdata/jaeger/e2e.yaml"))
	j.cmd.Env = append(os.Environ(),
		"SPECPROF_JAEGER_OTLP_GRPC_PORT="+itoa(j.otlpGRPC),
		"SPECPROF_JAEGER_OTLP_HTTP_PORT="+itoa(j.otlpHTTP),
		"SPECPROF_JAEGER_QUERY_PORT="+itoa(j.query),
		"SPECPROF_JAEGER_QUERY_GRPC_PORT="+itoa(j.queryGRPC))
	j.cmd.Stdout, j.cmd.Stderr = j.log, j.log
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("start jaeger: %v", err)
	}
	j.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(j.cmd, j.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, p := range []int{j.otlpGRPC, j.otlpHTTP} {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+itoa(p), time.Second)
			if err != nil {
				ok = false
				break
			}
			c.Close()
		}
		if ok {
			if _, err := j.get("/api/services"); err == nil {
				return
			}
		}
		select {
		case <-j.exited:
			t.Fatalf("jaeger exited at start:\n%s", tail(j.log.String(), 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not serving after 30 s:\n%s", tail(j.log.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (j *jaeger) stop() {
	if j.cmd == nil || j.cmd.Process == nil {
		return
	}
	_ = j.cmd.Process.Kill()
	<-j.exited
	j.cmd = nil
}

func (j *jaeger) get(path string) ([]byte, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", j.query, path))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s: %s", path, resp.Status, tail(string(b), 500))
	}
	return b, nil
}

func (j *jaeger) services(t *testing.T) []string {
	t.Helper()
	b, err := j.get("/api/services")
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Data []string }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("/api/services: %v: %s", err, b)
	}
	return r.Data
}

// v1Trace is a trace of Jaeger's UI API (/api/traces; times in µs).
type v1Trace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []struct {
			RefType string `json:"refType"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		StartTime int64  `json:"startTime"`
		Duration  int64  `json:"duration"`
		ProcessID string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
		Tags        []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"processes"`
}

func (j *jaeger) v1Traces(t *testing.T, service string, since time.Time) []v1Trace {
	t.Helper()
	q := url.Values{"service": {service}, "limit": {"100000"},
		"start": {strconv.FormatInt(since.UnixMicro(), 10)}, "end": {strconv.FormatInt(time.Now().Add(time.Minute).UnixMicro(), 10)}}
	b, err := j.get("/api/traces?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Data   []v1Trace
		Errors any
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("/api/traces: %v", err)
	}
	return r.Data
}

// otlpSpan is a span of the API v3 (/api/v3/traces: OTLP JSON, ns times).
type otlpSpan struct {
	TraceID      string   `json:"traceId"`
	SpanID       string   `json:"spanId"`
	ParentSpanID string   `json:"parentSpanId"`
	Name         string   `json:"name"`
	Start        string   `json:"startTimeUnixNano"`
	End          string   `json:"endTimeUnixNano"`
	Attributes   []otlpKV `json:"attributes"`
	res          []otlpKV // the resource's attributes
	kids         []*otlpSpan
	start, end   int64
	attrs        map[string]any
}

type otlpKV struct {
	Key   string `json:"key"`
	Value struct {
		String *string  `json:"stringValue"`
		Int    *string  `json:"intValue"` // int64 as a JSON string
		Bool   *bool    `json:"boolValue"`
		Double *float64 `json:"doubleValue"`
	} `json:"value"`
}

func kvMap(kvs []otlpKV) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value; {
		case v.String != nil:
			m[kv.Key] = *v.String
		case v.Int != nil:
			n, _ := strconv.ParseInt(*v.Int, 10, 64)
			m[kv.Key] = n
		case v.Bool != nil:
			m[kv.Key] = *v.Bool
		case v.Double != nil:
			m[kv.Key] = *v.Double
		}
	}
	return m
}

func (s *otlpSpan) int(key string) int64 { n, _ := s.attrs[key].(int64); return n }

// v3Roots returns the cycle spans of the service's traces, with their
// subtrees.
func (j *jaeger) v3Roots(t *testing.T, service string, since time.Time) []*otlpSpan {
	t.Helper()
	q := url.Values{"query.service_name": {service}, "query.num_traces": {"100000"},
		"query.start_time_min": {since.UTC().Format(time.RFC3339Nano)},
		"query.start_time_max": {time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)}}
	b, err := j.get("/api/v3/traces?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Result struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []otlpKV `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []*otlpSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("/api/v3/traces: %v", err)
	}
	byID := map[string]*otlpSpan{}
	var all []*otlpSpan
	for _, rs := range r.Result.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				s.res = rs.Resource.Attributes
				s.attrs = kvMap(s.Attributes)
				s.start, _ = strconv.ParseInt(s.Start, 10, 64)
				s.end, _ = strconv.ParseInt(s.End, 10, 64)
				byID[s.TraceID+"/"+s.SpanID] = s
				all = append(all, s)
			}
		}
	}
	var roots []*otlpSpan
	for _, s := range all {
		if s.ParentSpanID == "" {
			roots = append(roots, s)
			continue
		}
		p := byID[s.TraceID+"/"+s.ParentSpanID]
		if p == nil {
			t.Errorf("span %s %q: parent %s missing", s.SpanID, s.Name, s.ParentSpanID)
			continue
		}
		p.kids = append(p.kids, s)
	}
	for _, s := range all {
		sort.SliceStable(s.kids, func(a, b int) bool { return s.kids[a].start < s.kids[b].start })
	}
	return roots
}

// otlpRun runs the demo under specprof with the given OTLP flags.
type otlpRun struct {
	out    string
	dir    string
	rep    *model.Report
	start  time.Time
	wall   time.Duration
	cycles int
}

// demoCmd is `specprof run` of the demo (--allreduce, --extra-thread, a TP0
// process title) with the given OTLP flags and extra workload arguments.
func demoCmd(t *testing.T, cycles int, workload []string, otlpArgs ...string) (*exec.Cmd, *otlpRun) {
	t.Helper()
	injLib, mockCupti, std := testenv.BuildInjection(t)
	bin := specprofBin(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	py := testenv.Interpreters(t)[0]
	dir := t.TempDir()
	args := append([]string{"run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib}, otlpArgs...)
	args = append(args, "--", py.Path, filepath.Join(root, "testdata/workloads/sglang_demo.py"),
		"--cycles", itoa(cycles), "--mode", "graph", "--allreduce", "--extra-thread",
		"--proctitle", "sglang::scheduler_TP0", "--log-interval", "10")
	cmd := exec.Command(bin, append(args, workload...)...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti)
	return cmd, &otlpRun{dir: dir, cycles: cycles}
}

// finish checks the run's exit and reads its report.
func (r *otlpRun) finish(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, r.out)
	}
	rep := readReport(t, r.dir)
	r.rep = &rep
}

func runDemoOTLP(t *testing.T, cycles int, workload []string, otlpArgs ...string) *otlpRun {
	t.Helper()
	cmd, r := demoCmd(t, cycles, workload, otlpArgs...)
	r.start = time.Now()
	out, err := cmd.CombinedOutput()
	r.wall = time.Since(r.start)
	r.out = string(out)
	r.finish(t, err)
	return r
}

var otlpLine = regexp.MustCompile(`otlp: (\d+) of (\d+) spans \((\d+) cycles\) exported to (\S+ [^;\s]+)(; not delivered: .*)?`)

// otlpAccount parses specprof's closing OTLP line.
func otlpAccount(t *testing.T, out string) (exported, total, cycles int, rest string) {
	t.Helper()
	m := otlpLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no OTLP account line in the output:\n%s", out)
	}
	return atoi(m[1]), atoi(m[2]), atoi(m[3]), m[5]
}

// threadCycles returns the report's threads that ran cycles: the main thread
// and the --extra-thread worker, each with the workload's cycle count.
func threadCycles(t *testing.T, rep *model.Report, cycles int) map[int]*model.ThreadReport {
	t.Helper()
	if len(rep.Processes) != 1 {
		t.Fatalf("report has %d processes, want 1", len(rep.Processes))
	}
	p := rep.Processes[0]
	out := map[int]*model.ThreadReport{}
	for _, th := range p.Threads {
		if th.Cycles > 0 {
			out[th.TID] = th
			if th.Cycles != cycles {
				t.Errorf("report: thread %d ran %d cycles, the workload %d", th.TID, th.Cycles, cycles)
			}
		}
	}
	if out[p.PID] == nil || len(out) != 2 {
		t.Fatalf("report: threads with cycles %v, want the main thread %d and the extra one", keys(out), p.PID)
	}
	return out
}

func keys[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func TestJaegerOTLP(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	j := newJaeger(t)
	const cycles = 40
	for _, proto := range []string{"grpc", "http"} {
		t.Run(proto, func(t *testing.T) {
			svc := "specprof-e2e-" + proto
			var args []string
			if proto == "grpc" {
				args = []string{"--otlp-endpoint", "127.0.0.1:" + itoa(j.otlpGRPC), "--otlp-insecure"}
			} else {
				args = []string{"--otlp-endpoint", "http://127.0.0.1:" + itoa(j.otlpHTTP), "--otlp-protocol", "http", "--otlp-kernels"}
			}
			// gRPC: eager mode (an ncclAllReduce call per layer, bytes known);
			// HTTP: CUDA graphs (the all-reduce kernels replayed, known by
			// name), with a span per kernel.
			mode := map[string]string{"grpc": "eager", "http": "graph"}[proto]
			since := time.Now().Add(-time.Minute)
			r := runDemoOTLP(t, cycles, []string{"--mode", mode}, append(args, "--service-name", svc)...)
			threads := threadCycles(t, r.rep, cycles)
			total := 0
			for _, th := range threads {
				total += th.Cycles
			}
			exported, spans, sent, lost := otlpAccount(t, r.out)
			if exported != spans || sent != total || lost != "" || spans < total*4 {
				t.Fatalf("OTLP account: %d of %d spans of %d cycles exported%s; the report has %d cycles\n%s",
					exported, spans, sent, lost, total, r.out)
			}

			// Jaeger's UI API: the service, one trace per cycle.
			var v1 []v1Trace
			deadline := time.Now().Add(15 * time.Second)
			for {
				if has(j.services(t), svc) {
					v1 = j.v1Traces(t, svc, since)
					if len(v1) >= total || time.Now().After(deadline) {
						break
					}
				} else if time.Now().After(deadline) {
					t.Fatalf("service %q not in Jaeger's /api/services: %v", svc, j.services(t))
				}
				time.Sleep(200 * time.Millisecond)
			}
			if len(v1) != total {
				t.Fatalf("Jaeger has %d traces for %s, the workload ran %d cycles", len(v1), svc, total)
			}
			nspans := 0
			for _, tr := range v1 {
				nspans += len(tr.Spans)
				for _, s := range tr.Spans {
					if s.OperationName == "cycle" && len(s.References) == 0 {
						if p := tr.Processes[s.ProcessID]; p.ServiceName != svc {
							t.Errorf("trace %s: service %q", tr.TraceID, p.ServiceName)
						}
					}
				}
			}
			if nspans != spans {
				t.Errorf("Jaeger holds %d spans, specprof exported %d", nspans, spans)
			}

			// API v3 (ns times): the tree against the report, per thread and phase.
			checkJaegerTraces(t, j.v3Roots(t, svc, since), r.rep, threads, mode == "eager", proto == "http")
			t.Logf("%s: %d cycles, %d spans in Jaeger; run took %v", proto, total, nspans, r.wall.Round(time.Millisecond))
		})
	}
}

func has(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// checkJaegerTraces compares the cycle traces with the report: per thread,
// one trace per cycle, numbered 1..n; phase spans one after the other inside
// the cycle, the named phases in the preset's order (a catch-all "…other"
// phase falls anywhere); their CPU spans (ns) summed per phase equal the
// report's, as do GPU busy time and the collective calls with their bytes.
// With calls, the verify phase has collective spans carrying bytes; with
// kernels, each gpu span holds one span per kernel the phase launched.
func checkJaegerTraces(t *testing.T, roots []*otlpSpan, rep *model.Report, threads map[int]*model.ThreadReport, calls, kernels bool) {
	t.Helper()
	order := map[string]int{}
	for i, p := range rep.Phases {
		order[p] = i
	}
	type sums struct {
		cpu, busy, calls, callBytes, collKernels, kernels int64
		spans                                             int
	}
	got := map[int]map[string]*sums{}
	seen := map[int]map[int64]bool{}
	cycleNs := map[int]int64{}
	proc := rep.Processes[0]
	// dur is a span's length; Jaeger stores a zero-length span as 1 ns (a
	// phase of one call), so the attribute decides.
	dur := func(s *otlpSpan) int64 {
		d := s.end - s.start
		if a, ok := s.attrs["specprof.cpu_span_ns"].(int64); ok && a == 0 && d == 1 {
			return 0
		}
		return d
	}
	for _, root := range roots {
		if root.Name != "cycle" {
			t.Fatalf("root span %q", root.Name)
		}
		tid := int(root.int("thread.id"))
		th := threads[tid]
		if th == nil {
			t.Fatalf("trace of thread %d, which has no cycles in the report", tid)
		}
		res := kvMap(root.res)
		if res["process.pid"] != int64(proc.PID) || res["specprof.tp_rank"] != int64(0) || res["host.name"] == nil {
			t.Errorf("resource %v (pid %d, rank 0 from the title)", res, proc.PID)
		}
		n := root.int("specprof.cycle")
		if seen[tid] == nil {
			seen[tid] = map[int64]bool{}
			got[tid] = map[string]*sums{}
		}
		if seen[tid][n] || n < 1 || n > int64(th.Cycles) {
			t.Errorf("thread %d: cycle %d twice or out of 1..%d", tid, n, th.Cycles)
		}
		seen[tid][n] = true
		if root.int("specprof.cpu_span_ns") != dur(root) {
			t.Errorf("cycle span %d ns, attribute %d", root.end-root.start, root.int("specprof.cpu_span_ns"))
		}
		cycleNs[tid] += dur(root)
		prev := root.start
		last, lastName := -1, ""
		for _, ph := range root.kids {
			name := ph.Name
			o, ok := order[name]
			if !ok {
				t.Errorf("phase span %q not in the report's phase order %v", name, rep.Phases)
			}
			if !strings.HasSuffix(name, "other") {
				if o <= last {
					t.Errorf("thread %d cycle %d: phase %s after %s (order %v)", tid, n, name, lastName, rep.Phases)
				}
				last, lastName = o, name
			}
			if ph.start < prev || ph.end < ph.start || ph.end > root.end {
				t.Errorf("thread %d cycle %d: phase %s [%d, %d] overlaps the previous one or leaves the cycle [%d, %d]",
					tid, n, name, ph.start, ph.end, root.start, root.end)
			}
			prev = ph.end
			if ph.int("specprof.cpu_span_ns") != dur(ph) {
				t.Errorf("phase %s: span %d ns, attribute %d", name, ph.end-ph.start, ph.int("specprof.cpu_span_ns"))
			}
			s := got[tid][name]
			if s == nil {
				s = &sums{}
				got[tid][name] = s
			}
			s.cpu += dur(ph)
			s.spans++
			for _, k := range ph.kids {
				switch {
				case k.Name == "gpu":
					s.busy += k.int("specprof.gpu.busy_ns")
					if k.int("specprof.gpu.busy_ns") > k.end-k.start || k.end <= k.start {
						t.Errorf("gpu span of %s: busy %d ns in [%d, %d]", name, k.int("specprof.gpu.busy_ns"), k.start, k.end)
					}
					for _, g := range k.kids {
						if g.attrs["specprof.gpu.kind"] == "kernel" {
							s.kernels++
						}
						if g.start < k.start || g.end > k.end {
							t.Errorf("kernel span %s [%d, %d] outside its gpu span [%d, %d]", g.Name, g.start, g.end, k.start, k.end)
						}
					}
					if !kernels && len(k.kids) > 0 {
						t.Errorf("kernel spans without --otlp-kernels")
					}
				case k.attrs["specprof.collective.api"] != nil: // an NCCL call
					s.calls++
					b := k.int("specprof.collective.bytes")
					s.callBytes += b
					if b <= 0 || k.attrs["specprof.collective.dtype"] == nil || k.Name != "AllReduce" {
						t.Errorf("collective span %s in %s: bytes %d, dtype %v", k.Name, name, b, k.attrs["specprof.collective.dtype"])
					}
				case k.attrs["specprof.collective.op"] != nil: // a collective kernel (graph replay)
					s.collKernels++
					if k.attrs["specprof.collective.on_gpu"] != true || k.end <= k.start {
						t.Errorf("collective kernel span %s in %s: not on the GPU [%d, %d]", k.Name, name, k.start, k.end)
					}
				}
			}
		}
	}
	for tid, th := range threads {
		if len(seen[tid]) != th.Cycles {
			t.Errorf("thread %d: %d cycle traces, report %d cycles", tid, len(seen[tid]), th.Cycles)
		}
		if cycleNs[tid] != th.CycleNs {
			t.Errorf("thread %d: cycle spans sum to %d ns, report %d", tid, cycleNs[tid], th.CycleNs)
		}
		var colls int64
		for _, ps := range th.Phases {
			s := got[tid][ps.Phase]
			if s == nil {
				s = &sums{}
			}
			if s.spans != ps.Cycles || s.cpu != ps.CPUSpanNs || s.busy != ps.GPUBusyNs || s.calls != ps.Colls || s.callBytes != ps.CollBytes {
				t.Errorf("thread %d %s: traces have %d spans, CPU %d ns, GPU busy %d ns, %d collective calls of %d bytes; "+
					"report %d cycles, CPU %d ns, GPU busy %d ns, %d collectives of %d bytes", tid, ps.Phase,
					s.spans, s.cpu, s.busy, s.calls, s.callBytes, ps.Cycles, ps.CPUSpanNs, ps.GPUBusyNs, ps.Colls, ps.CollBytes)
			}
			colls += s.calls + s.collKernels
			if kernels && s.kernels != ps.GPUKernels {
				t.Errorf("thread %d %s: %d kernel spans, report %d kernels", tid, ps.Phase, s.kernels, ps.GPUKernels)
			}
		}
		if calls && (colls == 0 || got[tid]["spec.verify"] == nil || got[tid]["spec.verify"].callBytes == 0) {
			t.Errorf("thread %d: no collective call with bytes in spec.verify (--allreduce, eager)", tid)
		}
		if !calls && colls == 0 {
			t.Errorf("thread %d: no collective span (--allreduce, graph replays)", tid)
		}
	}
}

// Jaeger down: specprof profiles as usual, says once what failed, counts
// every span as not delivered, and writes the complete report in time.
func TestJaegerDown(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	port := freePort(t) // closed again: nothing listens there
	const cycles = 40
	r := runDemoOTLP(t, cycles, nil, "--otlp-endpoint", "127.0.0.1:"+itoa(port), "--otlp-insecure")
	threads := threadCycles(t, r.rep, cycles)
	total := 0
	for _, th := range threads {
		total += th.Cycles
	}
	exported, spans, sent, lost := otlpAccount(t, r.out)
	if exported != 0 || sent != total || spans < 4*total || !strings.Contains(lost, "not delivered") ||
		!strings.Contains(lost, "connection refused") {
		t.Errorf("OTLP account: %d of %d spans, %d cycles%s (report: %d cycles)", exported, spans, sent, lost, total)
	}
	// The failure is said once while running (or not at all when the
	// first export outlasts the run), then accounted for in one line.
	if n := strings.Count(r.out, "OTLP export failed"); n > 1 {
		t.Errorf("failure logged %d times:\n%s", n, r.out)
	}
	if n := strings.Count(r.out, "127.0.0.1:"+itoa(port)); n > 2 {
		t.Errorf("the endpoint is named %d times (want the warning and the account):\n%s", n, r.out)
	}
	if !strings.Contains(r.out, "report: ") {
		t.Errorf("no report line:\n%s", r.out)
	}
	// The exit waits at most otlpFlushTimeout for the dead endpoint.
	t.Logf("run took %v; %s", r.wall.Round(time.Millisecond), strings.TrimSpace(otlpLine.FindString(r.out)))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Jaeger restarted mid-run (its in-memory store emptied): specprof keeps
// profiling, reconnects, the new Jaeger receives the later cycles, and the
// account still covers every span.
func TestJaegerRestart(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	j := newJaeger(t)
	svc := "specprof-e2e-restart"
	const cycles = 600
	since := time.Now().Add(-time.Minute)
	// Slower kernels: the run lasts several seconds.
	cmd, r := demoCmd(t, cycles, []string{"--kernel-us", "200"}, "--otlp-endpoint", "127.0.0.1:"+itoa(j.otlpGRPC),
		"--otlp-insecure", "--service-name", svc)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	r.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	// Once the first traces are in, restart Jaeger.
	deadline := time.Now().Add(60 * time.Second)
	before := 0
	for before == 0 {
		if has(j.services(t), svc) {
			before = len(j.v1Traces(t, svc, since))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trace reached Jaeger within 60 s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	j.stop()
	time.Sleep(time.Second)
	j.start(t)
	restarted := time.Now()
	select {
	case err := <-done:
		r.wall = time.Since(r.start)
		r.out = out.String()
		r.finish(t, err)
	case <-time.After(5 * time.Minute):
		t.Fatalf("specprof run did not end in 5 minutes:\n%s", out.String())
	}
	threads := threadCycles(t, r.rep, cycles)
	total := 0
	for _, th := range threads {
		total += th.Cycles
	}
	exported, spans, sent, lost := otlpAccount(t, r.out)
	if sent != total || exported > spans {
		t.Errorf("OTLP account: %d of %d spans of %d cycles%s; report %d cycles", exported, spans, sent, lost, total)
	}
	if n := strings.Count(r.out, "OTLP export failed"); n > 1 {
		t.Errorf("failure logged %d times", n)
	}
	ended := r.start.Add(r.wall)
	if ended.Before(restarted) {
		t.Fatalf("the run (%v) ended before Jaeger came back: make it longer", r.wall)
	}
	var after []v1Trace
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if has(j.services(t), svc) {
			after = j.v1Traces(t, svc, since)
		}
	}
	if len(after) == 0 {
		t.Fatalf("the restarted Jaeger received no trace (the run lasted %v after the restart)\n%s", ended.Sub(restarted), r.out)
	}
	if len(after) > total {
		t.Errorf("%d traces after the restart, more than the %d cycles", len(after), total)
	}
	t.Logf("run %v, restart after %v; %d traces before the restart, %d after; %s", r.wall.Round(time.Millisecond),
		restarted.Sub(r.start).Round(time.Millisecond), before, len(after), strings.TrimSpace(otlpLine.FindString(r.out)))
}
