package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/agent/proc"
	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/internal/testenv"
)

// BenchmarkLaunchCost measures what specprof adds to one hooked launch, in
// one target process, against the same loop with no probe and with an empty
// uprobe at the same entry point, at Python depths 10, 40 and 200 between
// the phase frame and the launch. Configurations alternate (none, empty,
// specprof) for several rounds; medians are reported.
//
// SPECPROF_BENCH_BACKEND=torch and SPECPROF_BENCH_PYTHON run it on a GPU
// host against the real libcuda through torch (bench/gpu/launch_cost.sh).
func BenchmarkLaunchCost(b *testing.B) {
	testenv.RequireRoot(b)
	pid, measure := launchBench(b, envOr("SPECPROF_BENCH_BACKEND", "sim"))
	cuda, err := proc.FindModule(pid, proc.IsCUDADriver)
	if err != nil {
		b.Fatal(err)
	}

	var phases = map[string]int{}
	tr, ag := newBenchAgent(b, func(e *model.Event) { phases[e.Phase]++ })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	stopAgent := func() { cancel(); <-done }

	// Rounds alternate the three configurations; the added costs are the
	// medians of the per-round differences (paired: slow drifts of the host
	// cancel), with their spread. SPECPROF_BENCH_ROUNDS raises the count on
	// noisy hosts.
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("SPECPROF_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	depths := []int{10, 40, 200}
	if v := os.Getenv("SPECPROF_BENCH_DEPTHS"); v != "" {
		depths = nil
		for _, f := range strings.Split(v, ",") {
			d, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || d < 1 {
				b.Fatalf("SPECPROF_BENCH_DEPTHS=%q: want comma-separated depths ≥ 1", v)
			}
			depths = append(depths, d)
		}
	}
	// The kernel's own account of the programs' run time: what the BPF
	// program costs apart from the trap around it.
	if c, err := bpf.EnableStats(); err == nil {
		defer c.Close()
	} else {
		b.Logf("no BPF run-time statistics: %v", err)
	}
	progNS := func(prog string) (time.Duration, uint64) {
		st, err := tr.ProgramStats(prog)
		if err != nil {
			return 0, 0
		}
		return st.Runtime, st.RunCount
	}
	for i := 0; i < b.N; i++ {
		for _, depth := range depths {
			var none, empty, full []float64
			var emptyT, fullT time.Duration
			var emptyN, fullN uint64
			var agentCPU time.Duration
			for r := 0; r < rounds; r++ {
				none = append(none, measure(depth))

				l, err := tr.AttachEmpty(pid, cuda.HostPath, "cuLaunchKernel")
				if err != nil {
					b.Fatal(err)
				}
				t0, n0 := progNS("")
				empty = append(empty, measure(depth))
				t1, n1 := progNS("")
				emptyT, emptyN = emptyT+t1-t0, emptyN+n1-n0
				l.Close()

				if err := ag.AttachRunning(pid); err != nil {
					b.Fatal(err)
				}
				t0, n0 = progNS("sp_launch_kernel")
				c0 := cpuTime()
				full = append(full, measure(depth))
				agentCPU += cpuTime() - c0
				t1, n1 = progNS("sp_launch_kernel")
				fullT, fullN = fullT+t1-t0, fullN+n1-n0
				ag.Detach(pid)
			}
			if emptyN > 0 && fullN > 0 {
				pe := float64(emptyT.Nanoseconds()) / float64(emptyN)
				pf := float64(fullT.Nanoseconds()) / float64(fullN)
				b.ReportMetric(pf, fmt.Sprintf("ns/bpf-prog-specprof-d%d", depth))
				pa := float64(agentCPU.Nanoseconds()) / float64(fullN)
				b.ReportMetric(pa, fmt.Sprintf("ns/agent-cpu-d%d", depth))
				b.Logf("depth %3d: BPF program alone (kernel run-time stats): empty %.0f ns, specprof %.0f ns per launch; the agent's CPU time %.0f ns per launch", depth, pe, pf, pa)
			}
			de, df := make([]float64, rounds), make([]float64, rounds)
			for r := range none {
				de[r], df[r] = empty[r]-none[r], full[r]-none[r]
			}
			n, e, f := median(none), median(de), median(df)
			b.ReportMetric(n, fmt.Sprintf("ns/launch-none-d%d", depth))
			b.ReportMetric(e, fmt.Sprintf("ns/launch-added-empty-d%d", depth))
			b.ReportMetric(f, fmt.Sprintf("ns/launch-added-specprof-d%d", depth))
			b.ReportMetric(f/e, fmt.Sprintf("x-empty-d%d", depth))
			b.Logf("depth %3d: no probe %.0f ns/launch; empty uprobe +%.0f ns [%.0f..%.0f]; specprof +%.0f ns [%.0f..%.0f] (%.2fx the empty probe; %d rounds, paired)",
				depth, n, e, slices.Min(de), slices.Max(de), f, slices.Min(df), slices.Max(df), f/e, rounds)
		}
	}
	stopAgent()
	if phases["spec.verify"] == 0 {
		b.Errorf("specprof attributed no launch to spec.verify: %v", phases)
	}
	b.Logf("launches attributed: %v", phases)
}

// launchBench starts testdata/workloads/launch_bench.py (backend sim: on
// the stand-in libcuda; torch: the real driver) and returns its pid and a
// function that times its launches DEPTH Python frames below the phase
// frame (median ns per launch over its batches). The workload quits at the
// benchmark's end.
func launchBench(b *testing.B, backend string) (int, func(depth int) float64) {
	b.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	// SPECPROF_BENCH_PER_BATCH lengthens each measurement (400 launches per
	// batch, 15 batches by default).
	cmd := exec.Command(envOr("SPECPROF_BENCH_PYTHON", "python3"), filepath.Join(root, "testdata/workloads/launch_bench.py"),
		"--backend", backend, "--per-batch", envOr("SPECPROF_BENCH_PER_BATCH", "400"))
	cmd.Env = os.Environ()
	if backend == "sim" {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+testenv.BuildStandins(b))
	}
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = io.WriteString(stdin, "quit\n"); _ = cmd.Wait() })
	rd := bufio.NewScanner(stdout)
	var ready struct{ PID int }
	if !rd.Scan() || json.Unmarshal(rd.Bytes(), &ready) != nil {
		b.Fatalf("benchmark workload did not start: %q", rd.Text())
	}
	return ready.PID, func(depth int) float64 {
		fmt.Fprintf(stdin, "measure %d\n", depth)
		var res struct{ NS []float64 }
		if !rd.Scan() || json.Unmarshal(rd.Bytes(), &res) != nil || len(res.NS) == 0 {
			b.Fatalf("measure: %q", rd.Text())
		}
		return median(res.NS)
	}
}

// cpuTime is this process's CPU time so far (the agent runs in it).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// BenchmarkLearningLaunchCost measures what a hooked launch costs while the
// agent has not classified the code objects of its stack yet (the first
// seconds of a session): every record then carries the whole stack, and a
// reader that only drains the ring buffer keeps it so. Rounds alternate no
// probe and probes; the added cost is the median of the paired differences.
func BenchmarkLearningLaunchCost(b *testing.B) {
	testenv.RequireRoot(b)
	pid, measure := launchBench(b, "sim")
	tr, ag := newBenchAgent(b, nil)
	// Drain without classifying: every stack stays unknown.
	var records, unknown int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := tr.Read()
			if errors.Is(err, bpf.ErrClosed) {
				return
			}
			if e, ok := ev.(*bpf.APIEvent); ok {
				records++
				if e.Py.Flags&bpf.PyUnknown != 0 {
					unknown++
				}
			}
		}
	}()
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("SPECPROF_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for i := 0; i < b.N; i++ {
		for _, depth := range []int{10, 40, 200} {
			var none, learning []float64
			for r := 0; r < rounds; r++ {
				none = append(none, measure(depth))
				if err := ag.AttachRunning(pid); err != nil {
					b.Fatal(err)
				}
				learning = append(learning, measure(depth))
				ag.Detach(pid)
			}
			d := make([]float64, rounds)
			for r := range none {
				d[r] = learning[r] - none[r]
			}
			b.ReportMetric(median(none), fmt.Sprintf("ns/launch-none-d%d", depth))
			b.ReportMetric(median(d), fmt.Sprintf("ns/launch-added-learning-d%d", depth))
			b.Logf("depth %3d: no probe %.0f ns/launch; while learning +%.0f ns [%.0f..%.0f] (%d rounds, paired)",
				depth, median(none), median(d), slices.Min(d), slices.Max(d), rounds)
		}
	}
	tr.Close()
	<-done
	if records == 0 || unknown != records {
		b.Errorf("%d records, %d with unknown code objects: want every one unknown", records, unknown)
	}
	lost, _ := tr.Lost()
	b.Logf("%d records, all with their stack; %d lost to a full ring buffer", records, lost.RingBuf)
}

// newBenchAgent loads the BPF tracer (closed when b ends) and an agent on
// it with the sglang-eagle preset.
func newBenchAgent(b *testing.B, onEvent func(*model.Event)) (*bpf.Tracer, *agent.Agent) {
	b.Helper()
	tr, err := bpf.Load()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	preset, err := phase.LoadPreset("sglang-eagle")
	if err != nil {
		b.Fatal(err)
	}
	ag, err := agent.New(tr, agent.Options{Preset: preset, OnEvent: onEvent})
	if err != nil {
		b.Fatal(err)
	}
	return tr, ag
}
