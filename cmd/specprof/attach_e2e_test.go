package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specprof/specprof/internal/testenv"
)

// TestAttachDurationBusyTarget: `specprof attach --duration` stops while the
// target goes on launching, leaves it running without probes, and reports
// what it saw (and, with SPECPROF_BPF_STATS=1, its programs' run time). The agent used to look at its stop signal only when the ring
// buffer ran empty, which a target launching without pause never let
// happen: on the H200 `attach --duration 12s` ran until HF's process exited
// seven minutes later.
func TestAttachDurationBusyTarget(t *testing.T) {
	_, _, std, bin, root := standins(t)
	workload := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	py := "python3"
	if ips := testenv.Interpreters(t); len(ips) > 0 {
		py = ips[0].Path
	}
	target := exec.Command(py, workload, "--cycles", "300000", "--mode", "eager")
	target.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std)
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- target.Wait() }()
	defer func() {
		_ = target.Process.Kill()
		<-exited
	}()
	// Attach once the stand-in libcuda is mapped (the workload has started launching).
	pid := target.Process.Pid
	for deadline := time.Now().Add(30 * time.Second); ; {
		maps, _ := os.ReadFile("/proc/" + itoa(pid) + "/maps")
		if strings.Contains(string(maps), "libcuda.so") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the workload did not load libcuda within 30 s")
		}
		select {
		case err := <-exited:
			t.Fatalf("the workload exited before the attach: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	dir := t.TempDir()
	// The context only keeps a regression from hanging the test run.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "attach", "--pid", itoa(pid), "--duration", "2s", "-q", "--interval", "0",
		"--cupti", "off", "--spec-metrics", "off", "--preset", "sglang-eagle", "-o", dir)
	cmd.Env = append(os.Environ(), "SPECPROF_BPF_STATS=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("specprof attach --duration 2s still ran after 3 minutes against a busy target:\n%s", out)
	}
	if err != nil {
		t.Fatalf("specprof attach: %v\n%s", err, out)
	}
	select {
	case err := <-exited:
		t.Fatalf("the target exited during or after the attach (%v); attach must leave it running:\n%s", err, out)
	case <-time.After(500 * time.Millisecond):
	}
	if strings.Contains(string(out), "specprof: pid "+itoa(pid)+" exited") {
		t.Errorf("attach says the target exited:\n%s", out)
	}
	// SPECPROF_BPF_STATS=1: the launch program's own run time is logged at the end.
	if !strings.Contains(string(out), `msg="BPF program run time" program=sp_launch_kernel runs=`) {
		t.Errorf("SPECPROF_BPF_STATS=1: no run time of sp_launch_kernel logged:\n%s", out)
	}
	rep := readReport(t, dir)
	if rep.Events == 0 || len(rep.Processes) != 1 || rep.Processes[0].PID != pid {
		t.Fatalf("report: %d events, processes %+v; want events of pid %d", rep.Events, rep.Processes, pid)
	}
	var cycles int
	for _, th := range rep.Processes[0].Threads {
		cycles += th.Cycles
	}
	if cycles == 0 {
		t.Errorf("no cycles in 2 s of a running decode loop:\n%s", out)
	}
}
