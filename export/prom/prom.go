package prom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultMaxProcesses bounds the processes that get their own label sets.
const DefaultMaxProcesses = 1024

// Options configure Metrics.
type Options struct {
	// Report returns the session's report so far (agent.Agent.Report); the
	// loss counters, the event count and the CUPTI library's counters are
	// read from it at every scrape. Nil: those series are absent.
	Report func() *model.Report
	// MaxProcesses bounds the processes with their own series (0: default).
	MaxProcesses int
	// ReportWait is how long a scrape waits for Report (which takes the
	// agent's lock) before it serves the previous report's counters
	// (0: DefaultReportWait).
	ReportWait time.Duration
}

// DefaultReportWait keeps scrapes well inside Prometheus' default 10 s
// timeout while the agent holds its lock (e.g. detaching probes).
const DefaultReportWait = time.Second

// durationBuckets span 10 µs to about 10 s, doubling.
var durationBuckets = prometheus.ExponentialBuckets(10e-6, 2, 21)

// Metrics holds specprof's metrics. Its methods are safe for concurrent use.
type Metrics struct {
	opts Options
	reg  *prometheus.Registry

	cycleDur           *prometheus.HistogramVec
	phaseCPU, phaseGPU *prometheus.HistogramVec
	phaseGPUActive     *prometheus.HistogramVec
	phaseGPUHostGap    *prometheus.CounterVec
	cycles             *prometheus.CounterVec
	launches, kernels  *prometheus.CounterVec
	syncs, syncWait    *prometheus.CounterVec
	colls, collBytes   *prometheus.CounterVec
	samples            *prometheus.CounterVec
	overflow           prometheus.Counter

	reports *reportCache

	mu    sync.Mutex
	procs map[int][3]string // pid → process, pid, rank labels
	spids map[int]bool      // pids with CPU samples
	drops map[string]func() uint64
}

var (
	procLabels  = []string{"process", "pid", "rank"}
	phaseLabels = []string{"process", "pid", "rank", "phase"}
)

// New returns Metrics on a new registry, with Go runtime and process
// metrics of specprof itself.
func New(opts Options) *Metrics {
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	if opts.ReportWait <= 0 {
		opts.ReportWait = DefaultReportWait
	}
	m := &Metrics{opts: opts, reg: prometheus.NewRegistry(), procs: map[int][3]string{}, spids: map[int]bool{}, drops: map[string]func() uint64{}}
	hist := func(name, help string, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "specprof", Name: name, Help: help, Buckets: durationBuckets}, labels)
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "specprof", Name: name, Help: help}, labels)
	}
	m.cycleDur = hist("cycle_duration_seconds", "Duration of decode cycles (first call to last call or sync return).", procLabels)
	m.phaseCPU = hist("phase_cpu_span_seconds", "Per cycle, a phase's CPU span: its first to its last driver call (including sync returns).", phaseLabels)
	m.phaseGPU = hist("phase_gpu_busy_seconds", "Per cycle, the GPU busy time of a phase's kernels (union of their intervals); only with GPU records.", phaseLabels)
	m.phaseGPUActive = hist("phase_gpu_active_seconds", "Per cycle, a phase's GPU active time: its kernels, copies and sets plus the GPU's hand-over gaps between queued work, without the time a stream waited for the CPU; only with GPU records.", phaseLabels)
	m.phaseGPUHostGap = counter("phase_gpu_host_gap_seconds_total", "Time the thread's GPU work sat idle before a phase's first GPU work, since its previous GPU work ended: the GPU waited for the host; only with GPU records.", phaseLabels)
	m.cycles = counter("cycles_total", "Decode cycles closed.", procLabels)
	m.launches = counter("launches_total", "Kernel and graph launches in cycles.", phaseLabels)
	m.kernels = counter("gpu_kernels_total", "GPU kernels launched in cycles (from CUPTI records).", phaseLabels)
	m.syncs = counter("syncs_total", "Blocking calls (syncs, synchronous device-to-host copies) in cycles.", phaseLabels)
	m.syncWait = counter("sync_wait_seconds_total", "CPU time blocked in those calls.", phaseLabels)
	m.colls = counter("collectives_total", "Collective calls in cycles.", phaseLabels)
	m.collBytes = counter("collective_bytes_total", "Bytes of collective calls in cycles.", phaseLabels)
	m.samples = counter("cpu_samples_total", "CPU samples of target threads (by pid: samples may come before a process's first cycle names it).",
		[]string{"pid", "phase"})
	m.overflow = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "specprof", Name: "metrics_overflow_total",
		Help: "Cycles and samples not in the metrics because their process came after the bound on processes."})
	if opts.Report != nil {
		m.reports = &reportCache{fn: opts.Report}
	}
	m.reg.MustRegister(m.cycleDur, m.phaseCPU, m.phaseGPU, m.phaseGPUActive, m.phaseGPUHostGap, m.cycles, m.launches, m.kernels, m.syncs, m.syncWait,
		m.colls, m.collBytes, m.samples, m.overflow, &reportCollector{m: m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "specprof"}))
	return m
}

// Registry is the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics (the /metrics endpoint).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// AddDropSource adds an exporter that can lose data on its way out (the
// OTLP queue, the Perfetto event cap): dropped, called at each scrape and
// safe for concurrent use, returns how many items it dropped so far.
func (m *Metrics) AddDropSource(exporter string, dropped func() uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drops[exporter] = dropped
}

// labels returns a process's label values, or false beyond the bound.
func (m *Metrics) labels(pid, rank int, title string) ([3]string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.procs[pid]; ok {
		return l, true
	}
	if len(m.procs) >= m.opts.MaxProcesses {
		m.overflow.Inc()
		return [3]string{}, false
	}
	l := [3]string{processLabel(title), strconv.Itoa(pid), strconv.Itoa(rank)}
	m.procs[pid] = l
	return l, true
}

// processLabel shortens a process title to its first 64 bytes.
func processLabel(title string) string {
	title = strings.TrimSpace(title)
	if len(title) > 64 {
		title = strings.ToValidUTF8(title[:64], "")
	}
	return title
}

// ObserveCycle records a closed cycle.
func (m *Metrics) ObserveCycle(c *model.CycleTrace) {
	l, ok := m.labels(c.PID, c.Rank, c.Process)
	if !ok {
		return
	}
	m.cycles.WithLabelValues(l[:]...).Inc()
	if c.End >= c.Start {
		m.cycleDur.WithLabelValues(l[:]...).Observe(float64(c.End-c.Start) / 1e9)
	}
	for _, ph := range c.Phases {
		st := ph.Stats
		if st == nil {
			continue
		}
		pl := []string{l[0], l[1], l[2], ph.Phase}
		m.phaseCPU.WithLabelValues(pl...).Observe(float64(st.CPUSpanNs) / 1e9)
		if c.GPU {
			m.phaseGPU.WithLabelValues(pl...).Observe(float64(st.GPUBusyNs) / 1e9)
			m.phaseGPUActive.WithLabelValues(pl...).Observe(float64(st.GPUActiveNs) / 1e9)
			m.phaseGPUHostGap.WithLabelValues(pl...).Add(float64(st.GPUHostGapNs) / 1e9)
		}
		m.launches.WithLabelValues(pl...).Add(float64(st.Launches))
		m.kernels.WithLabelValues(pl...).Add(float64(st.GPUKernels))
		m.syncs.WithLabelValues(pl...).Add(float64(st.Syncs))
		m.syncWait.WithLabelValues(pl...).Add(float64(st.SyncWaitNs) / 1e9)
		m.colls.WithLabelValues(pl...).Add(float64(st.Colls))
		m.collBytes.WithLabelValues(pl...).Add(float64(st.CollBytes))
	}
}

// ObserveSample records a CPU sample.
func (m *Metrics) ObserveSample(s *model.CPUSample) {
	m.mu.Lock()
	if !m.spids[s.PID] {
		if len(m.spids) >= m.opts.MaxProcesses {
			m.mu.Unlock()
			m.overflow.Inc()
			return
		}
		m.spids[s.PID] = true
	}
	m.mu.Unlock()
	m.samples.WithLabelValues(strconv.Itoa(s.PID), s.Phase).Inc()
}

// lossFields are the loss counters of agent.Loss, by their JSON names.
var lossFields = func() []struct {
	name  string
	index int
} {
	var out []struct {
		name  string
		index int
	}
	t := reflect.TypeFor[model.Loss]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || f.Type.Kind() != reflect.Uint64 {
			panic(fmt.Sprintf("agent.Loss.%s: loss counters must be uint64 with a JSON name", f.Name))
		}
		out = append(out, struct {
			name  string
			index int
		}{name, i})
	}
	return out
}()

// reportCollector reads the report's counters at scrape time.
type reportCollector struct{ m *Metrics }

var (
	lossDesc = prometheus.NewDesc("specprof_lost_total",
		"Events, records and stacks dropped or not attributed, by counter (the report's loss section).", []string{"counter"}, nil)
	eventsDesc = prometheus.NewDesc("specprof_events_total",
		"Driver and NCCL calls the agent received and attributed.", nil, nil)
	processesDesc = prometheus.NewDesc("specprof_traced_processes",
		"Processes traced (with threads or started by specprof).", nil, nil)
	cuptiRecordsDesc = prometheus.NewDesc("specprof_cupti_records_delivered_total",
		"Records the injected CUPTI library delivered, per process (its latest report).", []string{"pid"}, nil)
	cuptiDroppedDesc = prometheus.NewDesc("specprof_cupti_dropped_total",
		"Records the injected CUPTI library lost, per process and cause: cupti (CUPTI's own buffers), no_agent, backpressure, disconnect.",
		[]string{"pid", "reason"}, nil)
	cuptiKernelsDesc = prometheus.NewDesc("specprof_cupti_kernels_total",
		"GPU kernel records received from the CUPTI library, per process (in cycles or not).", []string{"pid"}, nil)
	reportAgeDesc = prometheus.NewDesc("specprof_report_age_seconds",
		"Age of the report the loss counters come from: 0 when read at this scrape, more when the agent was busy and a previous one is served.", nil, nil)
	exportDroppedDesc = prometheus.NewDesc("specprof_export_dropped_total",
		"Items an exporter dropped on its way out (queue full, event cap), by exporter.", []string{"exporter"}, nil)
	cyclesLeftOutDesc = prometheus.NewDesc("specprof_cycles_left_out_total",
		"Cycles left out of the figures, per process and reason: probe_window (cut by a probe window's edge, --probe-duty), lost_records (call records lost to a full ring buffer while they were open).",
		[]string{"pid", "reason"}, nil)
	probeWindowsDesc = prometheus.NewDesc("specprof_probe_windows_total",
		"Probe windows opened (--probe-duty).", nil, nil)
	probeShareDesc = prometheus.NewDesc("specprof_probe_window_share",
		"Share of the session's time the probes were in place (--probe-duty).", nil, nil)
)

func (r *reportCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lossDesc, eventsDesc, processesDesc, cuptiRecordsDesc, cuptiDroppedDesc,
		cuptiKernelsDesc, exportDroppedDesc, reportAgeDesc, cyclesLeftOutDesc, probeWindowsDesc, probeShareDesc} {
		ch <- d
	}
}

func (r *reportCollector) Collect(ch chan<- prometheus.Metric) {
	r.m.mu.Lock()
	names := make([]string, 0, len(r.m.drops))
	for n := range r.m.drops {
		names = append(names, n)
	}
	drops := make([]func() uint64, 0, len(names))
	sort.Strings(names)
	for _, n := range names {
		drops = append(drops, r.m.drops[n])
	}
	r.m.mu.Unlock()
	for i, n := range names {
		ch <- prometheus.MustNewConstMetric(exportDroppedDesc, prometheus.CounterValue, float64(drops[i]()), n)
	}
	if r.m.reports == nil {
		return
	}
	rep, at := r.m.reports.get(r.m.opts.ReportWait)
	if rep == nil {
		return // the first report is not ready yet
	}
	ch <- prometheus.MustNewConstMetric(reportAgeDesc, prometheus.GaugeValue, time.Since(at).Seconds())
	loss := reflect.ValueOf(rep.Loss)
	for _, f := range lossFields {
		ch <- prometheus.MustNewConstMetric(lossDesc, prometheus.CounterValue, float64(loss.Field(f.index).Uint()), f.name)
	}
	ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.CounterValue, float64(rep.Events))
	ch <- prometheus.MustNewConstMetric(processesDesc, prometheus.GaugeValue, float64(len(rep.Processes)))
	if pw := rep.ProbeWindows; pw != nil {
		ch <- prometheus.MustNewConstMetric(probeWindowsDesc, prometheus.CounterValue, float64(pw.Windows))
		ch <- prometheus.MustNewConstMetric(probeShareDesc, prometheus.GaugeValue, pw.Share)
	}
	for _, p := range rep.Processes {
		var cut, lost int
		for _, t := range p.Threads {
			cut += t.ProbeCut
			lost += t.LossCut
		}
		pid := strconv.Itoa(p.PID)
		ch <- prometheus.MustNewConstMetric(cyclesLeftOutDesc, prometheus.CounterValue, float64(cut), pid, "probe_window")
		ch <- prometheus.MustNewConstMetric(cyclesLeftOutDesc, prometheus.CounterValue, float64(lost), pid, "lost_records")
		g := p.GPU
		if g == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(cuptiKernelsDesc, prometheus.CounterValue, float64(g.Kernels), pid)
		// The library's counters are left out while unknown (no STATS yet, or
		// its connection ended without its final ones): a stale value would
		// read as no loss.
		if g.Delivered != nil {
			ch <- prometheus.MustNewConstMetric(cuptiRecordsDesc, prometheus.CounterValue, float64(*g.Delivered), pid)
		}
		for _, d := range []struct {
			reason string
			n      *uint64
		}{{"cupti", g.DroppedCUPTI}, {"no_agent", g.DroppedNoAgent}, {"backpressure", g.DroppedBackpressure},
			{"disconnect", g.DroppedDisconnect}} {
			if d.n != nil {
				ch <- prometheus.MustNewConstMetric(cuptiDroppedDesc, prometheus.CounterValue, float64(*d.n), pid, d.reason)
			}
		}
	}
}

// reportCache calls Report at most once at a time and keeps the latest
// result: a scrape waits for a fresh report up to a bound, then serves the
// previous one (the call goes on and refreshes the cache when it ends).
type reportCache struct {
	fn       func() *model.Report
	mu       sync.Mutex
	last     *model.Report
	at       time.Time
	inflight chan struct{} // closed when the running call ends
}

func (c *reportCache) get(wait time.Duration) (*model.Report, time.Time) {
	c.mu.Lock()
	if c.inflight == nil {
		done := make(chan struct{})
		c.inflight = done
		go func() {
			r := c.fn()
			c.mu.Lock()
			c.last, c.at, c.inflight = r, time.Now(), nil
			c.mu.Unlock()
			close(done)
		}()
	}
	done := c.inflight
	c.mu.Unlock()
	t := time.NewTimer(wait)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.at
}

// Server serves the metrics over HTTP at /metrics.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan error
}

// Listen starts serving the metrics on addr (host:port; port 0 picks one).
func (m *Metrics) Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// URL is the metrics endpoint's URL.
func (s *Server) URL() string {
	a := s.ln.Addr().(*net.TCPAddr)
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(a.Port)) + "/metrics"
}

// Shutdown stops the server, letting scrapes in progress finish until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("stop metrics server: %w", err)
	}
	if err := <-s.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics: %w", err)
	}
	return nil
}
