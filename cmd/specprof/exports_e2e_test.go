package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/google/pprof/profile"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/specprof/specprof/export/perfetto"
	"github.com/specprof/specprof/export/pprof"
	"github.com/specprof/specprof/internal/testenv"
)

// TestRunExports runs the SGLang-shaped demo under `specprof run` with the
// mock CUPTI and checks the default exports against the report: the three
// pprof profiles through `go tool pprof` (frames, kernel names, totals),
// the Perfetto timeline through the format checker, and /metrics scraped
// while the session runs.
func TestRunExports(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	py := newestInterpreter(t) // 3.11+ code objects carry qualified names (EAGLEWorker.verify)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	release := filepath.Join(dir, "scraped")
	const cycles = 100
	// The session (and its metrics server) lasts as long as the command:
	// after the workload, the shell waits until the test has scraped
	// /metrics (at most 60 s).
	// Cycles reach the exporters once their GPU side is final (the join's
	// 2 s horizon): slow kernels make the workload last longer than that,
	// so the metrics see cycles while it runs.
	script := fmt.Sprintf(`%s %s --cycles %d --kernel-us 200 --mode eager --allreduce --extra-thread --draft-sync --log-interval 10 `+
		`--proctitle sglang::scheduler_TP0 || exit $?; i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`,
		py.Path, filepath.Join(root, "testdata/workloads/sglang_demo.py"), cycles, release)
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", out, "--cupti", "on", "--cupti-lib", injLib,
		"--metrics-addr", "127.0.0.1:0", "--", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urlc := make(chan string, 1)
	var errLog bytes.Buffer
	var errMu sync.Mutex
	go func() {
		re := regexp.MustCompile(`url=(http://\S+/metrics)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			errMu.Lock()
			errLog.WriteString(sc.Text() + "\n")
			errMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		close(urlc)
	}()
	live := scrapeWhileRunning(t, urlc)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	errMu.Lock()
	logs := stdout.String() + errLog.String()
	errMu.Unlock()
	if waitErr != nil {
		t.Fatalf("specprof run: %v\n%s", waitErr, logs)
	}
	for _, f := range []string{pprof.GPUTimeFile, pprof.SyncWaitFile, pprof.CPUFile, perfetto.FileName} {
		if !strings.Contains(logs, "wrote: "+filepath.Join(out, f)) {
			t.Errorf("no 'wrote: %s' line:\n%s", f, logs)
		}
	}

	rep := readReport(t, out)
	var target *model.ProcessReport
	for _, p := range rep.Processes {
		if len(p.Threads) > 0 {
			if target != nil {
				t.Fatalf("two processes with threads: %d and %d", target.PID, p.PID)
			}
			target = p
		}
	}
	if target == nil {
		t.Fatalf("no traced process with threads in the report:\n%s", logs)
	}
	want := phaseTotals(target)
	if want["spec.verify"].GPUKernelNs == 0 || want["spec.draft"].GPUKernelNs == 0 || want["spec.verify"].Colls == 0 {
		t.Fatalf("the report has no GPU kernels or collectives in draft/verify: %+v", want)
	}
	checkGPUTimeProfile(t, filepath.Join(out, pprof.GPUTimeFile), target, want)
	checkSyncWaitProfile(t, filepath.Join(out, pprof.SyncWaitFile), want)
	checkCPUProfile(t, filepath.Join(out, pprof.CPUFile))
	checkTimeline(t, filepath.Join(out, perfetto.FileName), target, want)
	checkLiveMetrics(t, live, target, want)
}

// phaseTotals sums each phase over the threads of a process (in cycles).
func phaseTotals(p *model.ProcessReport) map[string]model.PhaseStats {
	out := map[string]model.PhaseStats{}
	for _, th := range p.Threads {
		for _, ph := range th.Phases {
			s := out[ph.Phase]
			s.Phase = ph.Phase
			s.Cycles += ph.Cycles
			s.GPUKernels += ph.GPUKernels
			s.GPUKernelNs += ph.GPUKernelNs
			s.Syncs += ph.Syncs
			s.SyncWaitNs += ph.SyncWaitNs
			s.Colls += ph.Colls
			s.Launches += ph.Launches
			out[ph.Phase] = s
		}
	}
	return out
}

// goPprof runs `go tool pprof` with args and returns its output.
func goPprof(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"tool", "pprof"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// pprofShown reads the total of the nodes shown ("Showing nodes accounting
// for N", with -unit=ns "Nns"): with -nodefraction=0 and a tag filter, the
// filtered total.
func pprofShown(t *testing.T, top string) int64 {
	t.Helper()
	m := regexp.MustCompile(`Showing nodes accounting for ([0-9]+)ns`).FindStringSubmatch(top)
	if m == nil {
		t.Fatalf("no total in:\n%s", top)
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// checkGPUTimeProfile: per phase, the kernels and GPU ns equal the report's
// (exactly, from the parsed profile, and through go tool pprof's totals);
// the frames and kernel names show in -top and -traces.
func checkGPUTimeProfile(t *testing.T, path string, target *model.ProcessReport, want map[string]model.PhaseStats) {
	p := readProfile(t, path)
	got := map[string][2]int64{}
	for _, s := range p.Sample {
		ph := s.Label["phase"]
		if len(ph) != 1 {
			t.Fatalf("gpu_time sample without one phase label: %v", s.Label)
		}
		if pid := s.NumLabel["pid"]; len(pid) != 1 || pid[0] != int64(target.PID) {
			t.Errorf("gpu_time sample of pid %v, the workload is %d", pid, target.PID)
		}
		g := got[ph[0]]
		got[ph[0]] = [2]int64{g[0] + s.Value[0], g[1] + s.Value[1]}
	}
	for ph, w := range want {
		if g := got[ph]; g[0] != w.GPUKernels || g[1] != w.GPUKernelNs {
			t.Errorf("gpu_time %s: %d kernels %d ns; report: %d kernels, gpu_kernel_ns %d", ph, g[0], g[1], w.GPUKernels, w.GPUKernelNs)
		}
	}
	for _, ph := range []string{"spec.draft", "spec.verify"} {
		top := goPprof(t, "-top", "-unit=ns", "-nodefraction=0", "-sample_index=gpu", "-tagfocus=phase=^"+regexp.QuoteMeta(ph)+"$", path)
		if n := pprofShown(t, top); n != want[ph].GPUKernelNs {
			t.Errorf("go tool pprof -tagfocus=phase=%s: total %d ns, report gpu_kernel_ns %d\n%s", ph, n, want[ph].GPUKernelNs, top)
		}
	}
	top := goPprof(t, "-top", "-cum", "-nodefraction=0", "-sample_index=gpu", path)
	for _, s := range []string{"EAGLEWorker.verify", "EAGLEWorker.forward_batch_generation", "EAGLEWorker.forward_draft_extend_after_decode",
		"nvjet_gemm_qkv_proj", "BatchDecodeWithPagedKVCacheKernel", "verify_tree_greedy"} {
		if !strings.Contains(top, s) {
			t.Errorf("go tool pprof -top gpu_time lacks %s:\n%s", s, top)
		}
	}
	// -traces: each stack, leaf first. A verify GEMM's stack runs from the
	// kernel up through EAGLEWorker.verify to the cycle function; a draft
	// kernel's passes through one of the draft phase's functions.
	var verifyStack, draftStack bool
	draftFunc := regexp.MustCompile(`^EAGLEWorker\.(draft|draft_forward|_draft_preprocess_decode)$`)
	for _, st := range parseTraces(goPprof(t, "-traces", "-sample_index=gpu", path)) {
		fr := st.frames
		if len(fr) < 3 || fr[len(fr)-1] != "EAGLEWorker.forward_batch_generation" {
			continue
		}
		switch st.labels["phase"] {
		case "spec.verify":
			verifyStack = verifyStack || strings.HasPrefix(fr[0], "nvjet_gemm") && slices.Contains(fr, "EAGLEWorker.verify")
		case "spec.draft":
			draftStack = draftStack || slices.ContainsFunc(fr, draftFunc.MatchString)
		}
	}
	if !verifyStack || !draftStack {
		t.Errorf("go tool pprof -traces: verify GEMM stack kernel → … → EAGLEWorker.verify → EAGLEWorker.forward_batch_generation %v; "+
			"draft stack through a draft function %v", verifyStack, draftStack)
	}
}

// pprofStack is one stack of `go tool pprof -traces`: labels and frames,
// leaf first.
type pprofStack struct {
	labels map[string]string
	frames []string
}

// parseTraces reads `go tool pprof -traces` output: blocks separated by
// dashed lines, label lines ("  phase:  spec.verify"), then the frames,
// the first one preceded by the sample's value.
func parseTraces(out string) []pprofStack {
	var stacks []pprofStack
	label := regexp.MustCompile(`^\s*(\w+):\s+(.*)$`)
	for _, block := range regexp.MustCompile(`(?m)^-+\+-+$`).Split(out, -1)[1:] {
		st := pprofStack{labels: map[string]string{}}
		for _, l := range strings.Split(block, "\n") {
			if strings.TrimSpace(l) == "" {
				continue
			}
			if m := label.FindStringSubmatch(l); m != nil && len(st.frames) == 0 {
				st.labels[m[1]] = m[2]
				continue
			}
			f := strings.Fields(l)
			st.frames = append(st.frames, f[len(f)-1])
		}
		stacks = append(stacks, st)
	}
	return stacks
}

// newestInterpreter is the newest CPython of the machine's.
func newestInterpreter(t *testing.T) testenv.Interpreter {
	var best testenv.Interpreter
	bestMinor := -1
	for _, in := range testenv.Interpreters(t) {
		if m := regexp.MustCompile(`3\.(\d+)`).FindStringSubmatch(in.Name); m != nil {
			if minor, _ := strconv.Atoi(m[1]); minor > bestMinor {
				best, bestMinor = in, minor
			}
		}
	}
	if bestMinor < 11 {
		t.Fatalf("no CPython 3.11 or later among %v", testenv.Interpreters(t))
	}
	return best
}

// checkSyncWaitProfile: per phase, the blocked ns equal the report's.
func checkSyncWaitProfile(t *testing.T, path string, want map[string]model.PhaseStats) {
	p := readProfile(t, path)
	got := map[string]int64{}
	for _, s := range p.Sample {
		got[s.Label["phase"][0]] += s.Value[1]
	}
	for ph, w := range want {
		if got[ph] != w.SyncWaitNs {
			t.Errorf("sync_wait %s: %d ns; report sync_wait_ns %d", ph, got[ph], w.SyncWaitNs)
		}
	}
	top := goPprof(t, "-top", "-unit=ns", "-nodefraction=0", "-sample_index=wait", path)
	var total int64
	for _, w := range want {
		total += w.SyncWaitNs
	}
	if n := pprofShown(t, top); total == 0 || n != total {
		t.Errorf("go tool pprof sync_wait: total %d ns, report %d ns\n%s", n, total, top)
	}
	for _, s := range []string{"cuMemcpyDtoH", "EAGLEWorker.forward_batch_generation"} {
		if !strings.Contains(top, s) {
			t.Errorf("sync_wait -top lacks %s:\n%s", s, top)
		}
	}
}

// checkCPUProfile: a valid profile with cpu nanoseconds; when the sampler
// delivered samples, their period and frames.
func checkCPUProfile(t *testing.T, path string) {
	p := readProfile(t, path)
	if len(p.SampleType) != 2 || p.SampleType[1].Type != "cpu" || p.SampleType[1].Unit != "nanoseconds" {
		t.Fatalf("cpu sample types %v", p.SampleType)
	}
	if len(p.Sample) == 0 {
		t.Logf("cpu.pb.gz has no samples (%q)", p.Comments)
		return
	}
	if p.Period <= 0 {
		t.Errorf("cpu profile period %d", p.Period)
	}
	top := goPprof(t, "-top", "-cum", path)
	if !strings.Contains(top, "EAGLEWorker") {
		t.Errorf("cpu profile shows no EAGLEWorker frame:\n%s", top)
	}
}

// checkTimeline: the Perfetto JSON passes the format checks; it has one
// cycle slice per cycle, a kernel slice per joined kernel, with launch
// arrows, on "GPU n / stream s" tracks, and collective slices with bytes.
func checkTimeline(t *testing.T, path string, target *model.ProcessReport, want map[string]model.PhaseStats) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := perfetto.Check(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(p.Unnamed) > 0 {
		t.Errorf("unnamed tracks %v", p.Unnamed)
	}
	var cyc, kernels int64
	for _, th := range target.Threads {
		cyc += int64(th.Cycles)
	}
	for _, w := range want {
		kernels += w.GPUKernels
	}
	if n := int64(len(p.Slices("cycle"))); n != cyc {
		t.Errorf("%d cycle slices, report %d cycles", n, cyc)
	}
	ks := p.Slices("kernel")
	if int64(len(ks)) != kernels {
		t.Errorf("%d kernel slices, report %d kernels in cycles", len(ks), kernels)
	}
	for _, k := range ks {
		if tn := p.ThreadNames[perfetto.Track{Pid: k.Pid, Tid: k.Tid}]; !regexp.MustCompile(`^GPU \d+ / stream \d+`).MatchString(tn) {
			t.Errorf("kernel %s on track %q", k.Name, tn)
			break
		}
	}
	gpu := len(ks) + len(p.Slices("memcpy")) + len(p.Slices("memset"))
	skipped, _ := p.OtherData["flows_without_arrow"].(json.Number).Int64()
	if p.Flows+int(skipped) != gpu || p.Flows == 0 {
		t.Errorf("%d launch arrows (+%d without), %d GPU slices", p.Flows, skipped, gpu)
	}
	colls := p.Slices("collective")
	if int64(len(colls)) != want["spec.verify"].Colls+want["spec.draft"].Colls+want["spec.draft_extend"].Colls {
		t.Logf("collective slices %d (report: verify %d)", len(colls), want["spec.verify"].Colls)
	}
	if len(colls) == 0 {
		t.Fatal("no collective slices")
	}
	for _, c := range colls {
		if n, _ := c.Args["bytes"].(json.Number).Int64(); n <= 0 {
			t.Errorf("collective slice without bytes: %+v", c)
			break
		}
	}
	if pn := p.ProcessNames[int64(target.PID)]; !strings.Contains(pn, "sglang::scheduler_TP0") {
		t.Errorf("process track named %q", pn)
	}
}

// scrapeWhileRunning scrapes /metrics until the cycle counters have
// settled (the workload has finished its cycles), and returns the last
// scrape.
func scrapeWhileRunning(t *testing.T, urlc <-chan string) map[string]*dto.MetricFamily {
	t.Helper()
	var url string
	select {
	case u, ok := <-urlc:
		if !ok {
			t.Fatal("specprof exited without serving metrics")
		}
		url = u
	case <-time.After(60 * time.Second):
		t.Fatal("no metrics URL logged within 60 s")
	}
	deadline := time.Now().Add(60 * time.Second)
	var last float64 = -1
	stable := 0
	for time.Now().Before(deadline) {
		fams, err := scrape(url)
		if err != nil {
			t.Fatalf("scrape %s: %v", url, err)
		}
		n := sumCounter(fams["specprof_cycles_total"])
		if n > 0 && n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
		if stable >= 5 {
			return fams
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("cycles_total did not settle within 60 s (last %g)", last)
	return nil
}

func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(prommodel.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

func sumCounter(f *dto.MetricFamily) float64 {
	var s float64
	if f == nil {
		return 0
	}
	for _, m := range f.Metric {
		s += m.GetCounter().GetValue()
	}
	return s
}

func label(m *dto.Metric, k string) string {
	for _, l := range m.Label {
		if l.GetName() == k {
			return l.GetValue()
		}
	}
	return ""
}

// checkLiveMetrics: the scrape taken while the session ran has the cycle,
// phase and loss series, consistent with the final report (cycles whose
// GPU side is not final when the workload ends reach the exporters when
// the session ends).
func checkLiveMetrics(t *testing.T, fams map[string]*dto.MetricFamily, target *model.ProcessReport, want map[string]model.PhaseStats) {
	var cyc float64
	for _, th := range target.Threads {
		cyc += float64(th.Cycles)
	}
	if n := sumCounter(fams["specprof_cycles_total"]); n <= 0 || n > cyc {
		t.Errorf("cycles_total %g while running; report: %g cycles", n, cyc)
	}
	for _, m := range fams["specprof_cycles_total"].GetMetric() {
		if label(m, "pid") != strconv.Itoa(target.PID) || label(m, "rank") != "0" || !strings.Contains(label(m, "process"), "TP0") {
			t.Errorf("cycles_total series labels %v", m.Label)
		}
	}
	var busy *dto.Histogram
	for _, m := range fams["specprof_phase_gpu_busy_seconds"].GetMetric() {
		if label(m, "phase") == "spec.verify" {
			busy = m.GetHistogram()
		}
	}
	if busy == nil || busy.GetSampleCount() == 0 || busy.GetSampleSum() <= 0 {
		t.Errorf("no spec.verify GPU busy observations: %v", busy)
	}
	var kernels float64
	for _, m := range fams["specprof_gpu_kernels_total"].GetMetric() {
		if label(m, "phase") == "spec.verify" {
			kernels += m.GetCounter().GetValue()
		}
	}
	if kernels <= 0 || kernels > float64(want["spec.verify"].GPUKernels) {
		t.Errorf("gpu_kernels_total{phase=spec.verify} %g while running; report %d", kernels, want["spec.verify"].GPUKernels)
	}
	losses := map[string]bool{}
	for _, m := range fams["specprof_lost_total"].GetMetric() {
		losses[label(m, "counter")] = true
	}
	for _, c := range []string{"ringbuf_full", "launches_without_cupti_api_record", "gpu_records_late", "events_without_python"} {
		if !losses[c] {
			t.Errorf("no specprof_lost_total{counter=%q}", c)
		}
	}
	dropped := map[string]bool{}
	for _, m := range fams["specprof_export_dropped_total"].GetMetric() {
		dropped[label(m, "exporter")] = true
	}
	if !dropped["perfetto"] || !dropped["pprof"] {
		t.Errorf("export_dropped_total exporters %v", dropped)
	}
	if fams["specprof_cupti_dropped_total"] == nil || sumCounter(fams["specprof_events_total"]) <= 0 {
		t.Error("no CUPTI drop series or no events counted")
	}
}
