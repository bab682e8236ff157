package prom

import (
	"context"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/specprof/specprof/export/internal/exporttest"
)

// series finds the metric of family name whose labels include want.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no family %s", name)
	}
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if ok {
			return m
		}
	}
	t.Fatalf("no series %s%v", name, want)
	return nil
}

func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// lossReport is a report whose loss counters are all different (field i
// is 100+i), with a CUPTI-connected process.
func lossReport() *model.Report {
	r := &model.Report{Events: 12345}
	v := reflect.ValueOf(&r.Loss).Elem()
	for i := range v.NumField() {
		v.Field(i).SetUint(uint64(100 + i))
	}
	n := func(v uint64) *uint64 { return &v }
	r.Processes = []*model.ProcessReport{{PID: 4242, GPU: &model.GPUStats{Kernels: 77, Delivered: n(500),
		DroppedCUPTI: n(1), DroppedNoAgent: n(2), DroppedBackpressure: n(3), DroppedDisconnect: n(4)},
		Threads: []*model.ThreadReport{{TID: 4242, ProbeCut: 5, LossCut: 6}, {TID: 4243, ProbeCut: 1}}}}
	r.ProbeWindows = &model.ProbeWindowStats{Windows: 12, Share: 0.05}
	return r
}

func TestCycleMetrics(t *testing.T) {
	m := New(Options{})
	const n = 4
	var busy, active, gap, kernels, wait float64
	for i := 1; i <= n; i++ {
		c := exporttest.Cycle(4242, 4242, i, uint64(i)*2_000_000)
		for _, ph := range c.Phases {
			if ph.Phase == "spec.verify" {
				busy += float64(ph.Stats.GPUBusyNs) / 1e9
				active += float64(ph.Stats.GPUActiveNs) / 1e9
				gap += float64(ph.Stats.GPUHostGapNs) / 1e9
				kernels += float64(ph.Stats.GPUKernels)
			}
			if ph.Phase == "spec.accept" {
				wait += float64(ph.Stats.SyncWaitNs) / 1e9
			}
		}
		m.ObserveCycle(c)
	}
	fams := gather(t, m)
	proc := map[string]string{"process": "sglang::scheduler_TP0", "pid": "4242", "rank": "0"}
	h := series(t, fams, "specprof_cycle_duration_seconds", proc).GetHistogram()
	if h.GetSampleCount() != n || !near(h.GetSampleSum(), n*exporttest.CycleNs/1e9) {
		t.Errorf("cycle histogram: %d cycles, %g s", h.GetSampleCount(), h.GetSampleSum())
	}
	if v := series(t, fams, "specprof_cycles_total", proc).GetCounter().GetValue(); v != n {
		t.Errorf("cycles_total %g", v)
	}
	verify := map[string]string{"pid": "4242", "phase": "spec.verify"}
	g := series(t, fams, "specprof_phase_gpu_busy_seconds", verify).GetHistogram()
	if g.GetSampleCount() != n || !near(g.GetSampleSum(), busy) || busy == 0 {
		t.Errorf("verify GPU busy: %d observations, %g s, want %g s", g.GetSampleCount(), g.GetSampleSum(), busy)
	}
	if v := series(t, fams, "specprof_phase_gpu_host_gap_seconds_total", verify).GetCounter().GetValue(); !near(v, gap) || gap == 0 {
		t.Errorf("verify host gap: %g s, want %g s", v, gap)
	}
	ga := series(t, fams, "specprof_phase_gpu_active_seconds", verify).GetHistogram()
	if ga.GetSampleCount() != n || !near(ga.GetSampleSum(), active) || active <= busy {
		t.Errorf("verify GPU active: %d observations, %g s, want %g s (busy %g s)", ga.GetSampleCount(), ga.GetSampleSum(), active, busy)
	}
	c := series(t, fams, "specprof_phase_cpu_span_seconds", verify).GetHistogram()
	if c.GetSampleCount() != n || !near(c.GetSampleSum(), n*500e-6) {
		t.Errorf("verify CPU span: %d observations, %g s", c.GetSampleCount(), c.GetSampleSum())
	}
	if v := series(t, fams, "specprof_gpu_kernels_total", verify).GetCounter().GetValue(); v != kernels {
		t.Errorf("verify kernels %g, want %g", v, kernels)
	}
	if v := series(t, fams, "specprof_sync_wait_seconds_total", map[string]string{"phase": "spec.accept"}).GetCounter().GetValue(); !near(v, wait) || wait == 0 {
		t.Errorf("accept sync wait %g, want %g", v, wait)
	}
	if v := series(t, fams, "specprof_collective_bytes_total", verify).GetCounter().GetValue(); v != n*8192 {
		t.Errorf("collective bytes %g", v)
	}
	m.ObserveSample(exporttest.Sample(4242, 4242, 1))
	fams = gather(t, m)
	if v := series(t, fams, "specprof_cpu_samples_total", verify).GetCounter().GetValue(); v != 1 {
		t.Errorf("cpu samples %g", v)
	}
}

// TestLosses: every loss counter of agent.Loss, the CUPTI drops and the
// exporters' drops are served, read at scrape time.
func TestLosses(t *testing.T) {
	var mu sync.Mutex
	rep := lossReport()
	m := New(Options{Report: func() *model.Report { mu.Lock(); defer mu.Unlock(); c := *rep; return &c }})
	var otlp uint64 = 9
	m.AddDropSource("otlp", func() uint64 { mu.Lock(); defer mu.Unlock(); return otlp })
	fams := gather(t, m)
	lt := reflect.TypeFor[model.Loss]()
	if got := len(fams["specprof_lost_total"].GetMetric()); got != lt.NumField() {
		t.Errorf("%d loss series, agent.Loss has %d counters", got, lt.NumField())
	}
	for i := range lt.NumField() {
		name, _, _ := strings.Cut(lt.Field(i).Tag.Get("json"), ",")
		if v := series(t, fams, "specprof_lost_total", map[string]string{"counter": name}).GetCounter().GetValue(); v != float64(100+i) {
			t.Errorf("lost_total{counter=%s} = %g, want %d", name, v, 100+i)
		}
	}
	for reason, want := range map[string]float64{"cupti": 1, "no_agent": 2, "backpressure": 3, "disconnect": 4} {
		if v := series(t, fams, "specprof_cupti_dropped_total", map[string]string{"pid": "4242", "reason": reason}).GetCounter().GetValue(); v != want {
			t.Errorf("cupti_dropped_total{reason=%s} = %g", reason, v)
		}
	}
	for reason, want := range map[string]float64{"probe_window": 6, "lost_records": 6} {
		if v := series(t, fams, "specprof_cycles_left_out_total", map[string]string{"pid": "4242", "reason": reason}).GetCounter().GetValue(); v != want {
			t.Errorf("cycles_left_out_total{reason=%s} = %g, want %g", reason, v, want)
		}
	}
	if v := series(t, fams, "specprof_probe_windows_total", nil).GetCounter().GetValue(); v != 12 {
		t.Errorf("probe_windows_total %g", v)
	}
	if v := series(t, fams, "specprof_probe_window_share", nil).GetGauge().GetValue(); v != 0.05 {
		t.Errorf("probe_window_share %g", v)
	}
	if v := series(t, fams, "specprof_events_total", nil).GetCounter().GetValue(); v != 12345 {
		t.Errorf("events_total %g", v)
	}
	if v := series(t, fams, "specprof_export_dropped_total", map[string]string{"exporter": "otlp"}).GetCounter().GetValue(); v != 9 {
		t.Errorf("export_dropped_total %g", v)
	}
	// Read at scrape time: a later change shows at the next scrape.
	mu.Lock()
	rep.Loss.RingBuf = 5000
	otlp = 10
	mu.Unlock()
	fams = gather(t, m)
	if v := series(t, fams, "specprof_lost_total", map[string]string{"counter": "ringbuf_full"}).GetCounter().GetValue(); v != 5000 {
		t.Errorf("ringbuf_full after update: %g", v)
	}
	if v := series(t, fams, "specprof_export_dropped_total", nil).GetCounter().GetValue(); v != 10 {
		t.Errorf("export drops after update: %g", v)
	}
}

func TestBoundedProcesses(t *testing.T) {
	m := New(Options{MaxProcesses: 2})
	for pid := 1; pid <= 5; pid++ {
		m.ObserveCycle(exporttest.Cycle(pid, pid, 1, 1000))
	}
	fams := gather(t, m)
	if n := len(fams["specprof_cycles_total"].GetMetric()); n != 2 {
		t.Errorf("%d processes with series, bound 2", n)
	}
	if v := series(t, fams, "specprof_metrics_overflow_total", nil).GetCounter().GetValue(); v != 3 {
		t.Errorf("overflow %g, want 3", v)
	}
}

// TestServe scrapes /metrics over HTTP while cycles are observed
// concurrently, then shuts the server down.
func TestServe(t *testing.T) {
	m := New(Options{Report: lossReport})
	srv, err := m.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m.ObserveCycle(exporttest.Cycle(7, 7, i, uint64(i)*2_000_000))
		}
	}()
	var fams map[string]*dto.MetricFamily
	for range 5 {
		resp, err := http.Get(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", srv.URL(), resp.StatusCode, err)
		}
		p := expfmt.NewTextParser(prommodel.UTF8Validation)
		if fams, err = p.TextToMetricFamilies(strings.NewReader(string(body))); err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	for _, name := range []string{"specprof_cycles_total", "specprof_phase_gpu_busy_seconds", "specprof_lost_total",
		"specprof_cupti_dropped_total", "specprof_process_resident_memory_bytes", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(srv.URL()); err == nil {
		t.Error("server still answers after Shutdown")
	}
	if _, err := m.Listen("256.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "listen for metrics") {
		t.Errorf("bad address: %v", err)
	}
}

func BenchmarkObserveCycle(b *testing.B) {
	m := New(Options{})
	cs := make([]*model.CycleTrace, 64)
	for i := range cs {
		cs[i] = exporttest.Cycle(4242, 4242, i+1, uint64(i+1)*2_000_000)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.ObserveCycle(cs[i%len(cs)])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

// TestBusyAgent: while Report blocks (the agent holds its lock), a scrape
// returns after ReportWait with the previous report's counters and their
// age; the blocked call refreshes the cache when it ends.
func TestBusyAgent(t *testing.T) {
	gate := make(chan struct{})
	var mu sync.Mutex
	ringbuf := uint64(1)
	m := New(Options{ReportWait: 50 * time.Millisecond, Report: func() *model.Report {
		<-gate
		mu.Lock()
		defer mu.Unlock()
		return &model.Report{Loss: model.Loss{RingBuf: ringbuf}}
	}})
	start := time.Now()
	fams := gather(t, m)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("scrape took %v while the agent was busy", d)
	}
	if fams["specprof_lost_total"] != nil {
		t.Error("loss series without any report")
	}
	gate <- struct{}{} // the first call returns
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	ringbuf = 2
	mu.Unlock()
	fams = gather(t, m) // starts a second call, which blocks; serves the first report
	if v := series(t, fams, "specprof_lost_total", map[string]string{"counter": "ringbuf_full"}).GetCounter().GetValue(); v != 1 {
		t.Errorf("ringbuf_full %g, want the previous report's 1", v)
	}
	if age := series(t, fams, "specprof_report_age_seconds", nil).GetGauge().GetValue(); age < 0.02 {
		t.Errorf("report age %g s, want at least the wait", age)
	}
	gate <- struct{}{}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	fams = gather(t, m)
	if v := series(t, fams, "specprof_lost_total", map[string]string{"counter": "ringbuf_full"}).GetCounter().GetValue(); v != 2 {
		t.Errorf("ringbuf_full %g after the agent is free, want 2", v)
	}
}
