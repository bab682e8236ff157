package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/export/perfetto"
)

// TestTensorParallelRanks: two tensor-parallel ranks (processes titled
// sglang::scheduler_TP0/1, as SGLang's launcher makes them) under one
// `specprof run`, the last rank made late at every all-reduce. Both ranks
// are traced with their rank; their collectives carry the communicator's
// two ranks and bus bandwidth; the straggler is named, at (nearly) every
// collective, with the other rank waiting for it (the stand-in libnccl
// stretches the early rank's kernel until the late one's starts, as NCCL's
// kernels wait for their peers). Every cycle names its straggler; a real
// Jaeger shows each cycle of both ranks in one trace; the Perfetto timeline
// holds both ranks' processes with the arrival figures.
func TestTensorParallelRanks(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	dir := t.TempDir()
	start := filepath.Join(dir, "start")
	const cycles = 20
	const straggleUs = 3000
	j := newJaeger(t)
	since := time.Now()
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib, "--cycles-jsonl",
		"--otlp-endpoint", "127.0.0.1:"+itoa(j.otlpGRPC), "--otlp-insecure", "--",
		"python3", filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", fmt.Sprint(cycles), "--mode", "eager",
		"--allreduce", "--tp-size", "2", "--straggle-us", fmt.Sprint(straggleUs), "--proctitle", "sglang::scheduler_TP0",
		"--wait-start", start)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Both ranks ready (libraries loaded, communicator made): start them together.
	ready := make(chan struct{})
	var errText strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		n := 0
		for sc.Scan() {
			errText.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "sglang_demo: ready") {
				if n++; n == 2 {
					close(ready)
				}
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the two ranks did not get ready:\n%s", errText.String())
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("specprof run: %v\n%s\n%s", err, out.String(), errText.String())
	}
	rep := readReport(t, dir)
	if len(rep.Processes) != 2 {
		t.Fatalf("%d processes traced, want the two ranks", len(rep.Processes))
	}
	if len(rep.Ranks) != 2 {
		t.Fatalf("ranks compared: %+v\n%s\n%s", rep.Ranks, out.String(), errText.String())
	}
	r0, r1 := rep.Ranks[0], rep.Ranks[1]
	if r0.Rank != 0 || r1.Rank != 1 || r0.Cycles != cycles || r1.Collectives != r0.Collectives || r0.Collectives < cycles {
		t.Fatalf("ranks %+v %+v", r0, r1)
	}
	// The ranks start up to 10 ms apart (the start file is polled): the
	// collectives of the first two cycles (4 each) may find rank 0 later.
	// On a loaded 2-core CI machine a rank can also be kept off the CPU
	// for longer than the straggle: a few more collectives may go to rank 0.
	if r1.LastArrivals < r1.Collectives-12 {
		t.Errorf("the late rank arrived last at %d of %d collectives", r1.LastArrivals, r1.Collectives)
	}
	// The stand-in NCCL, like NCCL, holds every rank's kernel until the last
	// rank's has started: the ranks meet at each collective, so the wait is
	// the lateness of each arrival, not a drift that adds up.
	if per := r1.WaitImposedNs / max(r1.LastArrivals, 1); per < straggleUs*600 || per > straggleUs*3000 {
		t.Errorf("rank 1 made the others wait %d ns per collective; it was %d us late at each", per, straggleUs)
	}
	if !strings.Contains(out.String(), "TP1 pid") {
		t.Errorf("the report does not name the ranks:\n%s", out.String())
	}
	// Collectives carry the communicator's ranks and NCCL's bus bandwidth
	// (AllReduce: algbw × 2(n-1)/n, i.e. algbw for two ranks).
	f, err := os.ReadFile(filepath.Join(dir, "cycles.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	n, compared, late, short := 0, map[int]int{}, 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(f)), "\n") {
		var c model.CycleTrace
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		if c.Rank != 0 && c.Rank != 1 {
			t.Errorf("cycle of pid %d has rank %d", c.PID, c.Rank)
		}
		for _, ph := range c.Phases {
			for _, co := range ph.Collectives {
				n++
				if co.Ranks != 2 || co.AlgBWGBps <= 0 || co.BusBWGBps != co.AlgBWGBps {
					t.Fatalf("collective %+v: want 2 ranks and busbw == algbw", co)
				}
				if c.TP != nil && (co.Arrival == nil || (co.Arrival.LastRank == c.Rank) != (co.Arrival.WaitNs == 0)) {
					t.Errorf("rank %d cycle %d: collective arrival %+v", c.Rank, c.Cycle, co.Arrival)
				}
			}
		}
		if c.TP == nil {
			continue
		}
		compared[c.Rank]++
		if c.TP.Ranks != 2 || c.TP.Collectives == 0 {
			t.Errorf("rank %d cycle %d: %+v", c.Rank, c.Cycle, *c.TP)
		}
		if c.TP.Straggler == 1 {
			late++
			// The early rank waited for the late one at every collective.
			// A cycle in which rank 0 was itself descheduled past the
			// straggle waits less: logged, and tolerated in a few cycles.
			if w := c.TP.WaitNs / int64(c.TP.Collectives); c.Rank == 0 && w < straggleUs*600 {
				short++
				t.Logf("cycle %d: rank 0 waited %d ns per collective for the straggler", c.Cycle, w)
			}
		}
	}
	if n == 0 {
		t.Fatal("no collectives in the timelines")
	}
	if compared[0] != cycles || compared[1] != cycles {
		t.Errorf("cycles compared: %v, want %d per rank", compared, cycles)
	}
	if late < 2*(cycles-2) {
		t.Errorf("rank 1 named the straggler in %d of %d cycle timelines", late, 2*cycles)
	}
	if short > cycles/5 {
		t.Errorf("rank 0 waited less than %d us per collective in %d of %d cycles", straggleUs*6/10, short, cycles)
	}
	if r1.StragglerCycles < cycles-2 {
		t.Errorf("rank 1 the straggler in %d of %d cycles", r1.StragglerCycles, cycles)
	}
	checkRanksJaeger(t, j, since, cycles)
	checkRanksPerfetto(t, dir, rep)
	t.Logf("rank 0 %+v; rank 1 %+v; %d collectives with bandwidth", *r0, *r1, n)
}

// checkRanksJaeger: every cycle of the two ranks is one trace in Jaeger,
// holding both ranks' cycle spans, each under its own process with its TP
// rank, and naming the same straggler.
func checkRanksJaeger(t *testing.T, j *jaeger, since time.Time, cycles int) {
	t.Helper()
	var traces []v1Trace
	deadline := time.Now().Add(20 * time.Second)
	for {
		traces = j.v1Traces(t, "specprof", since)
		if len(traces) >= cycles || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	both := 0
	for _, tr := range traces {
		ranks := map[string]bool{}
		for _, sp := range tr.Spans {
			if sp.OperationName != "cycle" || len(sp.References) != 0 {
				continue
			}
			for _, tag := range tr.Processes[sp.ProcessID].Tags {
				if tag.Key == "specprof.tp_rank" {
					ranks[fmt.Sprint(tag.Value)] = true
				}
			}
		}
		if len(ranks) == 2 {
			both++
		}
	}
	if both != cycles {
		t.Errorf("Jaeger: %d of %d traces hold both ranks' cycle (want every cycle: %d)", both, len(traces), cycles)
	}
}

// checkRanksPerfetto: one Perfetto timeline holds both ranks, their
// collectives with the arrival comparison.
func checkRanksPerfetto(t *testing.T, dir string, rep model.Report) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, perfetto.FileName))
	if err != nil {
		t.Fatal(err)
	}
	p, err := perfetto.Check(b)
	if err != nil {
		t.Fatalf("perfetto: %v", err)
	}
	cyclesOf := map[int64]int{}
	lastRank := 0
	for _, e := range p.Events {
		if e.Cat == "cycle" {
			if _, ok := e.Args["straggler_rank"]; ok {
				cyclesOf[e.Pid]++
			}
		}
		if _, ok := e.Args["last_rank"]; ok {
			lastRank++
		}
	}
	for _, pr := range rep.Processes {
		if cyclesOf[int64(pr.PID)] == 0 {
			t.Errorf("perfetto: no compared cycles of pid %d (%v)", pr.PID, cyclesOf)
		}
	}
	if lastRank == 0 {
		t.Error("perfetto: no collective carries last_rank")
	}
}
