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

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/internal/testenv"
)

// TestTensorParallelRanks: two tensor-parallel ranks (processes titled
// sglang::scheduler_TP0/1, as SGLang's launcher makes them) under one
// `specprof run`, the last rank made late at every all-reduce. Both ranks
// are traced with their rank; their collectives carry the communicator's
// two ranks and bus bandwidth; the straggler is named, at (nearly) every
// collective, with the other rank waiting for it (the stand-in libnccl
// stretches the early rank's kernel until the late one's starts, as NCCL's
// kernels wait for their peers).
func TestTensorParallelRanks(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	injLib, mockCupti, std := testenv.BuildInjection(t)
	bin := specprofBin(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := filepath.Join(dir, "start")
	const cycles = 20
	const straggleUs = 400
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib, "--cycles-jsonl", "--",
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
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep agent.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Processes) != 2 {
		t.Fatalf("%d processes traced, want the two ranks", len(rep.Processes))
	}
	if len(rep.Ranks) != 2 {
		t.Fatalf("ranks compared: %+v", rep.Ranks)
	}
	r0, r1 := rep.Ranks[0], rep.Ranks[1]
	if r0.Rank != 0 || r1.Rank != 1 || r0.Cycles != cycles || r1.Collectives != r0.Collectives || r0.Collectives < cycles {
		t.Fatalf("ranks %+v %+v", r0, r1)
	}
	// The ranks start up to 10 ms apart (the start file is polled): the
	// collectives of the first two cycles (4 each) may find rank 0 later.
	if r1.LastArrivals < r1.Collectives-8 {
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
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(f)), "\n") {
		var c agent.CycleTrace
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
			}
		}
	}
	if n == 0 {
		t.Fatal("no collectives in the timelines")
	}
	t.Logf("rank 0 %+v; rank 1 %+v; %d collectives with bandwidth", *r0, *r1, n)
}
