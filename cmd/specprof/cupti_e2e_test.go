package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/cupti"
	"github.com/specprof/specprof/cupti/cuptitest"
	"github.com/specprof/specprof/internal/testenv"
)

// forgedStream is what a stranger would send to pass for pid's library: a well-formed HELLO,
// kernels, and a final STATS.
func forgedStream(pid uint32, kernels int) []byte {
	h := cupti.Hello{WireVersion: cupti.WireVersion, Pid: pid, CuptiVersion: 130001, DriverVersion: 13000,
		ClockSource: cupti.ClockCallback}
	copy(h.Magic[:], "SPCUPTI1")
	var b bytes.Buffer
	b.Write(cuptitest.Record(cupti.TypeHello, 0, &h))
	for i := 0; i < kernels; i++ {
		b.Write(cuptitest.Record(cupti.TypeKernel, 0, &cupti.Kernel{Start: uint64(1000 + i), End: uint64(2000 + i),
			CorrelationID: uint32(i + 1)}))
	}
	b.Write(cuptitest.Record(cupti.TypeStats, cupti.FlagFinal|cupti.FlagFlushAck, &cupti.LibStats{}))
	return b.Bytes()
}

// strangerScript connects to the socket argv[1] and writes stdin to it, ignoring a connection
// the agent closes.
const strangerScript = `
import socket, sys
data = sys.stdin.buffer.read()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
try:
    s.sendall(data)
except OSError as e:
    print("send:", e)
s.settimeout(3)
try:
    print("closed by the agent" if s.recv(1) == b"" else "answered")
except OSError as e:
    print("recv:", e)
`

var readyRE = regexp.MustCompile(`sglang_demo: ready, pid (\d+)`)

// socketOf reads SPECPROF_SOCKET from pid's environment.
func socketOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := strings.CutPrefix(string(kv), "SPECPROF_SOCKET="); ok {
			return v
		}
	}
	t.Fatalf("pid %d has no SPECPROF_SOCKET", pid)
	return ""
}

// TestRunRejectsStrangers: while the target waits, an unprivileged process (uid 65534) that
// learnt the socket's path connects and sends a well-formed HELLO claiming the target's pid,
// 100,000 kernels and a final STATS. It is rejected and counted (report.json, terminal), and the
// target's GPU figures are those of the simulated GPU, exactly.
func TestRunRejectsStrangers(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	py := testenv.Interpreters(t)[0].Path
	// The stranger's interpreter: one that uid 65534 may run (not under root's home).
	const strangerPy = "/usr/bin/python3"
	if _, err := os.Stat(strangerPy); err != nil {
		t.Fatalf("the unprivileged process needs %s: %v", strangerPy, err)
	}
	const cycles = 24
	dir := t.TempDir()
	start := filepath.Join(dir, "start")
	var err error
	cmd := exec.Command(bin, "run", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib,
		"--events", filepath.Join(dir, "events.jsonl"), "--cycles-jsonl", "--cycles-kernels", "--",
		py, filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", fmt.Sprint(cycles), "--mode", "graph",
		"--stack-depth", "10", "--log-interval", "8", "--proctitle", "sglang::scheduler_TP0", "--wait-start", start)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+filepath.Join(dir, "truth.jsonl"),
		"SPECPROF_CUPTI_LIB="+mockCupti)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ready := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if m := readyRE.FindStringSubmatch(sc.Text()); m != nil {
				ready <- atoi(m[1])
			}
		}
	}()
	var target int
	select {
	case target = <-ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("the workload did not get ready")
	}
	sock := socketOf(t, target)
	time.Sleep(300 * time.Millisecond) // its library connected during cuInit; give the agent a moment
	stranger := exec.Command(strangerPy, "-c", strangerScript, sock)
	stranger.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stranger.Stdin = bytes.NewReader(forgedStream(uint32(target), 100000))
	out, err := stranger.CombinedOutput()
	if err != nil {
		t.Fatalf("the stranger could not connect to %s: %v\n%s", sock, err, out)
	}
	t.Logf("stranger (uid 65534) on %s: %s", sock, bytes.TrimSpace(out))
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("specprof run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	rep := readReport(t, dir)
	checkReport(t, &rep, cycles)
	checkKernels(t, filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "events.jsonl"))
	checkCycles(t, filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "cycles.jsonl"), &rep, cycles)
	g := rep.GPUReceiver
	if g == nil || g.Accepted != 1 || g.NotTraced != 1 || g.Rejected != 1 {
		t.Errorf("gpu_receiver %+v: want the target's connection accepted and the stranger's rejected as not traced", g)
	}
	if !strings.Contains(stdout.String(), "CUPTI socket: 1 connections accepted, 1 rejected (not traced 1,") {
		t.Errorf("the terminal report does not count the rejection:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "CUPTI connection rejected") {
		t.Errorf("the rejection was not logged:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Errorf("session directory %s left behind: %v", filepath.Dir(sock), err)
	}
}

// TestRunKilledTargetLibDropsUnknown: a target killed (SIGKILL) after its cycles never sends
// its library's final counters: the report says the library's drops are unknown (null in
// report.json, lib_final_stats false, a problem line) instead of showing its last counters as if
// nothing was lost after them. A target that exits has them (lib_final_stats true).
func TestRunKilledTargetLibDropsUnknown(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	py := testenv.Interpreters(t)[0].Path
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("kill=%v", kill), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib, "--",
				py, filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", "16", "--mode", "graph"}
			if kill {
				args = append(args, "--sleep-at-exit", "60")
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti)
			outPipe, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var out bytes.Buffer
			sc := bufio.NewScanner(outPipe)
			for sc.Scan() {
				out.WriteString(sc.Text() + "\n")
				if !kill || !strings.HasPrefix(sc.Text(), "{") {
					continue
				}
				var sum struct{ Pid int }
				if err := json.Unmarshal(sc.Bytes(), &sum); err != nil || sum.Pid == 0 {
					t.Fatalf("workload summary %q: %v", sc.Text(), err)
				}
				// The library's periodic STATS (every second) came; its final one would at the exit.
				time.Sleep(1500 * time.Millisecond)
				if err := syscall.Kill(sum.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			err = cmd.Wait()
			if ee, ok := err.(*exec.ExitError); err != nil && (!ok || !kill) {
				t.Fatalf("specprof run: %v\n%s", err, out.String())
			} else if ok && kill && ee.ExitCode() == 0 {
				t.Errorf("specprof run exited 0 for a killed target")
			}
			rep := readReport(t, dir)
			raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			var p *model.ProcessReport
			if len(rep.Processes) > 0 {
				p = rep.Processes[0]
			}
			if p == nil || p.GPU == nil || p.GPU.Kernels == 0 {
				t.Fatalf("report: %+v", rep.Processes)
			}
			g := p.GPU
			problem := strings.Contains(strings.Join(p.Problems, "\n"), "lib drops unknown: the library's final counters never arrived")
			if kill {
				if g.FinalStats || g.DroppedCUPTI != nil || g.DroppedBackpressure != nil || g.Delivered != nil || !problem ||
					!bytes.Contains(raw, []byte(`"lib_dropped_by_cupti": null`)) || !strings.Contains(out.String(), "by CUPTI unknown") {
					t.Errorf("killed target: GPU %+v, problems %q; terminal:\n%s", g, p.Problems, out.String())
				}
			} else if !g.FinalStats || g.DroppedCUPTI == nil || *g.DroppedCUPTI != 0 || g.BuffersRefused == nil || problem {
				t.Errorf("target that exited: GPU %+v, problems %q", g, p.Problems)
			}
		})
	}
}

// TestRunExportLossInReport: what the exporters lose reaches report.json and the terminal: the
// Perfetto timeline's events beyond --perfetto-max-events, and every span for an OTLP endpoint
// that refuses connections (failed, or unsent when the flush deadline passed).
func TestRunExportLossInReport(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	py := testenv.Interpreters(t)[0].Path
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib,
		"--perfetto-max-events", "50", "--otlp-endpoint", "http://127.0.0.1:1", "--",
		py, filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", "20", "--mode", "graph")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, out)
	}
	rep := readReport(t, dir)
	got := map[string]*model.ExportStats{}
	for _, e := range rep.Exports {
		got[e.Exporter] = e
	}
	if p := got["perfetto"]; p == nil || p.Dropped == 0 || p.Unit != "events" ||
		!strings.Contains(string(out), fmt.Sprintf("export perfetto: %d events dropped", p.Dropped)) {
		t.Errorf("perfetto account %+v; terminal:\n%s", p, out)
	}
	if o := got["otlp"]; o == nil || o.Unit != "spans" || o.Failed+o.Unsent+o.Dropped == 0 ||
		!strings.Contains(string(out), "otlp: 0 of ") || strings.Contains(string(out), "export otlp: ") {
		t.Errorf("otlp account %+v (in report.json, and on the terminal once, in OTLP's own line); terminal:\n%s", o, out)
	}
}

// TestRunCUPTIDropsInReport: records CUPTI dropped because the library's pool of buffers ran out
// (the mock holding full buffers until a flush) are in report.json and the terminal: every one
// the mock dropped under lib_dropped_by_cupti, and the refused requests under lib_buffers_refused.
func TestRunCUPTIDropsInReport(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	py := testenv.Interpreters(t)[0].Path
	dir := t.TempDir()
	mstats := filepath.Join(dir, "mock.json")
	cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", dir, "--cupti", "on", "--cupti-lib", injLib, "--",
		py, filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", "20", "--mode", "eager")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti, "SPECPROF_MOCK_CUPTI_STATS="+mstats,
		"SPECPROF_MOCK_CUPTI_HOLD_BUFFERS=1", "SPECPROF_CUPTI_BUFFERS=2", "SPECPROF_CUPTI_BUFFER_KB=16")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run: %v\n%s", err, out)
	}
	b, err := os.ReadFile(mstats)
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Dropped uint64 }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("mock stats %s: %v", b, err)
	}
	rep := readReport(t, dir)
	if len(rep.Processes) == 0 || rep.Processes[0].GPU == nil {
		t.Fatalf("no GPU stats: %+v", rep.Processes)
	}
	g := rep.Processes[0].GPU
	if m.Dropped == 0 || !g.FinalStats || g.DroppedCUPTI == nil || *g.DroppedCUPTI != m.Dropped ||
		g.BuffersRefused == nil || *g.BuffersRefused == 0 {
		t.Fatalf("mock dropped %d; report GPU %+v", m.Dropped, g)
	}
	want := fmt.Sprintf("dropped: by CUPTI %d, no agent 0, backpressure 0, disconnect 0; buffer requests refused %d", m.Dropped, *g.BuffersRefused)
	// The terminal wraps long lines: compare with the whitespace collapsed.
	if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
		t.Errorf("terminal lacks %q:\n%s", want, out)
	}
}
