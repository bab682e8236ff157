package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/internal/testenv"
)

// cpuWorkload is testdata/workloads/cpu_phases.py, started and ready for
// commands.
type cpuWorkload struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	pid   int
	tid   int
	file  string
	lines map[string]int // def line of each function of the file
}

func startCPUWorkload(t testing.TB, python string) *cpuWorkload {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "testdata/workloads/cpu_phases.py")
	cmd := exec.Command(python, file)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+testenv.BuildStandins(t))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &cpuWorkload{cmd: cmd, in: in, out: bufio.NewScanner(stdout), file: file, lines: map[string]int{}}
	t.Cleanup(w.stop)
	var ready struct{ PID, TID int }
	if !w.out.Scan() || json.Unmarshal(w.out.Bytes(), &ready) != nil || ready.PID != cmd.Process.Pid {
		t.Fatalf("cpu_phases.py did not start: %q", w.out.Text())
	}
	w.pid, w.tid = ready.PID, ready.TID
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(l), "def "); ok {
			name, _, _ = strings.Cut(name, "(")
			w.lines[name] = i + 1
		}
	}
	return w
}

// do sends one command and decodes its answer into v.
func (w *cpuWorkload) do(t testing.TB, v any, format string, args ...any) {
	t.Helper()
	fmt.Fprintf(w.in, format+"\n", args...)
	if !w.out.Scan() {
		t.Fatalf("cpu_phases.py: no answer to %q: %v", fmt.Sprintf(format, args...), w.out.Err())
	}
	if err := json.Unmarshal(w.out.Bytes(), v); err != nil {
		t.Fatalf("cpu_phases.py answer %q: %v", w.out.Text(), err)
	}
}

func (w *cpuWorkload) stop() {
	_, _ = io.WriteString(w.in, "quit\n")
	w.in.Close()
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-done
	}
}

// sampledAgent traces a running workload with the CPU sampler's samples
// collected.
type sampledAgent struct {
	tr      *bpf.Tracer
	ag      *agent.Agent
	mu      sync.Mutex
	samples []*model.CPUSample
	cancel  context.CancelFunc
	done    chan error
}

func newSampledAgent(t testing.TB, preset *phase.Preset, pid int) *sampledAgent {
	t.Helper()
	tr, err := bpf.Load()
	if err != nil {
		t.Fatal(err)
	}
	s := &sampledAgent{tr: tr, done: make(chan error, 1)}
	s.ag, err = agent.New(tr, agent.Options{Preset: preset, OnSample: func(c *model.CPUSample) {
		s.mu.Lock()
		s.samples = append(s.samples, c)
		s.mu.Unlock()
	}})
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	if err := s.ag.AttachRunning(pid); err != nil {
		tr.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- s.ag.Run(ctx) }()
	return s
}

// finish stops the sampler, drains the ring buffer and closes the cycles.
func (s *sampledAgent) finish(t testing.TB) *model.Report {
	t.Helper()
	s.tr.StopSampler()
	s.cancel()
	if err := <-s.done; err != nil {
		t.Fatal(err)
	}
	s.ag.Finish()
	r := s.ag.Report()
	s.tr.Close()
	return r
}

// TestSamplerAttributesCPU runs CPU-bound phases of known CPU time under
// the sampler at 999 Hz, on every interpreter, and checks that the samples
// land in the functions that burn the CPU, with the phase, cycle and line
// they ran in, that the other thread's samples are told apart, and that the
// CPU time per phase in the report matches the time the workload measured
// for itself.
func TestSamplerAttributesCPU(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	preset, err := phase.LoadRulesFile(filepath.Join(root, "testdata/workloads/cpu_phases.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range testenv.Interpreters(t) {
		t.Run(py.Name, func(t *testing.T) { checkSampledPhases(t, py.Path, preset) })
	}
}

func checkSampledPhases(t *testing.T, python string, preset *phase.Preset) {
	w := startCPUWorkload(t, python)
	sa := newSampledAgent(t, preset, w.pid)
	const hz = 999
	if err := sa.tr.StartSampler(hz); err != nil {
		t.Fatal(err)
	}
	const cycles = 12
	var truth struct {
		DraftNs  int64 `json:"draft_ns"`
		VerifyNs int64 `json:"verify_ns"`
		BgNs     int64 `json:"bg_ns"`
		BgTID    int   `json:"bg_tid"`
	}
	w.do(t, &truth, "run %d 40 80 1", cycles)
	rep := sa.finish(t)

	period := int64(1_000_000_000 / hz)
	type tally struct{ n, busy, wrongPhase, wrongStack, wrongCycle, lineOK, native, named int }
	var main, bg tally
	var mainPython int64
	busyLine := func(fn string, line int) bool { return line > w.lines[fn] && line <= w.lines[fn]+6 }
	for _, s := range sa.samples {
		if s.PID != w.pid {
			t.Fatalf("sample of pid %d; only %d is traced", s.PID, w.pid)
		}
		if s.Weight != period {
			t.Errorf("sample weight %d ns at %d Hz, want %d", s.Weight, hz, period)
		}
		if len(s.Stack) == 0 {
			continue
		}
		leaf := s.Stack[0]
		funcs := make([]string, len(s.Stack))
		for i, f := range s.Stack {
			funcs[i] = f.Func
		}
		chain := strings.Join(funcs, " < ")
		var tl *tally
		switch s.TID {
		case w.tid:
			tl = &main
			mainPython++
			if s.Cycle == 0 {
				continue // before the first cycle (reading the command)
			}
			// Qualified names from 3.11; 3.10 names functions only.
			want := map[string][2]string{"spin_draft": {"cpu.draft", "draft"}, "spin_verify": {"cpu.verify", "verify"}}
			wp, busy := want[leaf.Func]
			if !busy {
				break
			}
			tl.busy++
			if s.Phase != wp[0] {
				tl.wrongPhase++
				if tl.wrongPhase <= 3 {
					t.Errorf("sample in %s attributed to phase %q, want %s: %s", leaf.Func, s.Phase, wp[0], chain)
				}
			}
			if len(s.Stack) < 3 || !strings.HasSuffix(s.Stack[1].Func, wp[1]) || !strings.HasSuffix(s.Stack[2].Func, "step") {
				tl.wrongStack++
				if tl.wrongStack <= 3 {
					t.Errorf("sample stack %s, want %s < %s < step < ...", chain, leaf.Func, wp[1])
				}
			}
			if s.Cycle < 1 || s.Cycle > cycles {
				tl.wrongCycle++
			}
			if busyLine(leaf.Func, leaf.Line) && leaf.File == w.file {
				tl.lineOK++
			}
		case truth.BgTID:
			tl = &bg
			if leaf.Func == "spin_background" {
				tl.busy++
				if busyLine(leaf.Func, leaf.Line) {
					tl.lineOK++
				}
			}
			if s.Phase != "other" || s.Cycle != 0 {
				tl.wrongPhase++
			}
		default:
			t.Fatalf("Python sample of tid %d, neither the main thread %d nor the background thread %d: %s",
				s.TID, w.tid, truth.BgTID, chain)
		}
		tl.n++
		if s.Native != "" {
			tl.native++
			if !strings.HasPrefix(s.Native, "[") {
				tl.named++
			}
		}
	}
	t.Logf("main thread: %+v; background: %+v; report: %+v", main, bg, rep.CPU)

	// Enough samples for the CPU used: ~1 per ms of the thread's CPU time.
	for _, c := range []struct {
		name  string
		tl    tally
		cpuNs int64
	}{{"main thread (cycles)", main, truth.DraftNs + truth.VerifyNs}, {"background thread", bg, truth.BgNs}} {
		if want := c.cpuNs / period; int64(c.tl.n) < want/2 {
			t.Errorf("%s: %d samples for %.0f ms of CPU at %d Hz", c.name, c.tl.n, float64(c.cpuNs)/1e6, hz)
		}
		if share := float64(c.tl.busy) / float64(max(c.tl.n, 1)); share < 0.9 {
			t.Errorf("%s: %.1f%% of the samples in the busy function, want ≥ 90%%", c.name, 100*share)
		}
		if c.tl.wrongPhase+c.tl.wrongStack+c.tl.wrongCycle > 0 {
			t.Errorf("%s: %d samples with a wrong phase, %d with a wrong stack, %d outside the cycles", c.name,
				c.tl.wrongPhase, c.tl.wrongStack, c.tl.wrongCycle)
		}
		if share := float64(c.tl.lineOK) / float64(max(c.tl.busy, 1)); share < 0.9 {
			t.Errorf("%s: %.1f%% of the busy samples on a line of the busy loop, want ≥ 90%%", c.name, 100*share)
		}
		if share := float64(c.tl.native) / float64(max(c.tl.n, 1)); share < 0.8 {
			t.Errorf("%s: %.1f%% of the samples with a native leaf, want ≥ 80%%", c.name, 100*share)
		}
		if c.tl.named == 0 {
			t.Errorf("%s: no native leaf named by a symbol", c.name)
		}
	}

	// The report: every Python sample of the main thread counted once, in
	// its cycle or outside; per phase, the CPU time the workload measured.
	var th *model.ThreadReport
	for _, p := range rep.Processes {
		for _, x := range p.Threads {
			if x.TID == w.tid {
				th = x
			}
		}
	}
	if th == nil {
		t.Fatal("main thread missing from the report")
	}
	if th.Cycles != cycles {
		t.Errorf("%d cycles in the report, the workload ran %d", th.Cycles, cycles)
	}
	var counted int64
	got := map[string]int64{}
	for _, s := range th.Phases {
		counted += s.CPUSamples
		got[s.Phase] = s.CPUNs
		if s.CPUNs != s.CPUSamples*period {
			t.Errorf("phase %s: %d ns for %d samples", s.Phase, s.CPUNs, s.CPUSamples)
		}
	}
	for _, s := range th.Outside {
		counted += s.CPUSamples
	}
	if counted != mainPython {
		t.Errorf("report counts %d samples of the main thread, %d were delivered", counted, mainPython)
	}
	for ph, want := range map[string]int64{"cpu.draft": truth.DraftNs, "cpu.verify": truth.VerifyNs} {
		if d := float64(got[ph]-want) / float64(want); math.Abs(d) > 0.2 {
			t.Errorf("phase %s: %.1f ms of CPU sampled, the workload measured %.1f ms (%+.0f%%)", ph,
				float64(got[ph])/1e6, float64(want)/1e6, 100*d)
		}
	}
	if rep.CPU.Samples == 0 || rep.CPU.CPUNs != rep.CPU.Samples*period {
		t.Errorf("sampler totals: %+v", rep.CPU)
	}
	if rep.CPU.ReadErrors+rep.CPU.Truncated != 0 || rep.Loss.SamplesLost != 0 {
		t.Errorf("sampler losses: %+v, %d lost", rep.CPU, rep.Loss.SamplesLost)
	}
}

// BenchmarkSamplerOverhead measures what the CPU sampler costs a CPU-bound
// Python thread: the wall time of one pure-Python loop, 40 frames deep, in
// a traced process with the sampler off, at 99 Hz and at 999 Hz. The
// configurations alternate (rotating their order) for several rounds;
// medians are reported, and the BPF program's own run time per sample
// (kernel BPF statistics).
func BenchmarkSamplerOverhead(b *testing.B) {
	testenv.RequireRoot(b)
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	preset, err := phase.LoadRulesFile(filepath.Join(root, "testdata/workloads/cpu_phases.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	w := startCPUWorkload(b, envOr("SPECPROF_BENCH_PYTHON", "python3"))
	sa := newSampledAgent(b, preset, w.pid)
	defer sa.finish(b)
	stats, err := bpf.EnableRunStats()
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()

	iters := 4_000_000
	if v := os.Getenv("SPECPROF_BENCH_ITERS"); v != "" {
		fmt.Sscan(v, &iters)
	}
	const rounds = 7
	configs := []int{0, 99, 999}
	for i := 0; i < b.N; i++ {
		ns := map[int][]float64{}
		for r := 0; r < rounds; r++ {
			for k := range configs {
				hz := configs[(r+k)%len(configs)]
				if hz == 0 {
					sa.tr.StopSampler()
				} else if err := sa.tr.StartSampler(hz); err != nil {
					b.Fatal(err)
				}
				var res struct {
					NS float64 `json:"ns"`
				}
				w.do(b, &res, "bench %d 40", iters)
				ns[hz] = append(ns[hz], res.NS)
			}
		}
		sa.tr.StopSampler()
		off := median(ns[0])
		b.ReportMetric(off/1e6, "ms/loop-off")
		for _, hz := range configs[1:] {
			on := median(ns[hz])
			b.ReportMetric(on/1e6, fmt.Sprintf("ms/loop-%dHz", hz))
			b.ReportMetric(100*(on-off)/off, fmt.Sprintf("%%slower-%dHz", hz))
			b.Logf("%4d Hz: median %.1f ms per loop vs %.1f ms off: %+.2f%% (runs: %v)", hz, on/1e6, off/1e6,
				100*(on-off)/off, ns[hz])
		}
		b.Logf("off: %v", ns[0])
	}
	runs, total, err := sa.tr.SamplerRunStats()
	if err != nil {
		b.Fatal(err)
	}
	if runs == 0 {
		b.Fatal("the sampler program never ran")
	}
	sa.mu.Lock()
	n := len(sa.samples)
	sa.mu.Unlock()
	if n == 0 {
		b.Fatal("no sample of the workload was delivered")
	}
	// Every run's cost (early exits on other threads included) charged to
	// the workload's samples: an upper bound of the cost of one sample.
	b.ReportMetric(float64(total.Nanoseconds())/float64(n), "bpf-ns/sample")
	b.Logf("sampler program: %d runs on all CPUs, %.0f ns each on average; %d samples of the workload, %.0f ns of BPF time per sample",
		runs, float64(total.Nanoseconds())/float64(runs), n, float64(total.Nanoseconds())/float64(n))
}
