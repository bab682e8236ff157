package cupti

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specprof/specprof/internal/testenv"
)

// The SGLang-shaped workload's arguments used by most tests: both threads, all-reduce.
func workloadArgs(mode string, cycles int, extra ...string) []string {
	return append([]string{"--cycles", fmt.Sprint(cycles), "--mode", mode, "--extra-thread", "--allreduce"}, extra...)
}

// TestInjectedWorkloadMatchesTruth runs the workload with the library injected and a receiver
// listening, and compares every record with the simulator's ground truth (ns-exact).
func TestInjectedWorkloadMatchesTruth(t *testing.T) {
	cases := []struct {
		mode    string
		version string
		allAPI  bool // SPECPROF_CUPTI_API=all: a record for every driver call
		cbAPI   bool // SPECPROF_CUPTI_API_SOURCE=callbacks: API records made in CUPTI's callbacks
		runtime bool // kernels launched with the stand-in runtime's cudaLaunchKernel, as PyTorch's
	}{
		{"graph", "130001", false, false, false}, // CUDA 13.0: Kernel10, Memcpy6, Synchronization2, Overhead3
		{"eager", "130001", false, false, false},
		{"eager", "130001", true, false, false},
		{"graph", "130001", false, true, false},
		{"eager", "130001", false, true, false},
		{"eager", "130001", false, false, true},
		{"eager", "130001", false, true, true},
		{"graph", "24", false, false, false}, // CUDA 12.6: Kernel9, Memcpy5, Synchronization, Overhead3
		{"eager", "20", false, false, false}, // CUDA 12.2: Kernel9, Memcpy5, Synchronization, Overhead
	}
	for _, c := range cases {
		name := c.mode + "-cupti" + c.version
		if c.allAPI {
			name += "-all-api"
		}
		if c.cbAPI {
			name += "-callback-api"
		}
		if c.runtime {
			name += "-runtime-launch"
		}
		t.Run(name, func(t *testing.T) {
			col := newCollector()
			_, sock := startReceiver(t, col)
			dir := t.TempDir()
			truth, mstats := filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "mock.json")
			args := workloadArgs(c.mode, 20)
			if c.runtime {
				args = append(args, "--runtime-launch")
			}
			env := []string{"SPECPROF_SIM_TRUTH=" + truth, "SPECPROF_MOCK_CUPTI_VERSION=" + c.version,
				"SPECPROF_MOCK_CUPTI_STATS=" + mstats}
			if c.allAPI {
				env = append(env, "SPECPROF_CUPTI_API=all")
			}
			if c.cbAPI {
				env = append(env, "SPECPROF_CUPTI_API_SOURCE=callbacks")
			}
			res := runWorkload(t, injectEnv(t, sock, env...), args...)
			sameOutput(t, res, args...)
			if l := specprofLines(res.stderr); len(l) != 0 {
				t.Errorf("library complained: %q", l)
			}
			d := col.waitOpen(t, 5*time.Second)
			d.waitClosed(t, 5*time.Second)
			d.allAPI, d.cbAPI = c.allAPI, c.cbAPI
			if d.closeErr != nil {
				t.Errorf("connection ended with %v", d.closeErr)
			}
			if d.info.CuptiVersion == 0 || d.info.ClockSource != ClockCallback || d.info.DriverVersion == 0 {
				t.Errorf("hello %+v", d.info)
			}
			checkTruth(t, readTruth(t, truth), d, 0, 0)
			if !d.final {
				t.Errorf("no final STATS record")
			}
			l := d.lib
			if l.DroppedCUPTI+l.DroppedNoAgent+l.DroppedBackpressure+l.DroppedDisconnect+l.DroppedGraphNodes+l.RecordsUnknown != 0 {
				t.Errorf("library reports drops: %+v", l)
			}
			if st := d.conn.Stats(); st.Errors.Total() != 0 {
				t.Errorf("decode errors: %+v", st.Errors)
			}
			ms := readMockStats(t, mstats)
			if ms.Dropped != 0 || len(ms.Warnings) != 0 {
				t.Errorf("mock CUPTI: %d records dropped, warnings %q", ms.Dropped, ms.Warnings)
			}
			if c.cbAPI { // CUPTI's API kinds stay off; the library made the records
				if uint64(len(d.kernels)) != ms.Records["kernel"] || ms.Records["api"]+ms.Records["runtime_api"] != 0 || len(d.apis) == 0 {
					t.Errorf("mock generated %v records; received %d kernels, %d APIs", ms.Records, len(d.kernels), len(d.apis))
				}
			} else if uint64(len(d.kernels)) != ms.Records["kernel"] || uint64(len(d.apis)) != ms.Records["api"]+ms.Records["runtime_api"] {
				t.Errorf("mock generated %v records; received %d kernels, %d APIs", ms.Records, len(d.kernels), len(d.apis))
			}
			if len(d.overheads) == 0 {
				t.Errorf("no OVERHEAD record")
			}
			if c.runtime { // both ways, one record per launch: the runtime call's, which its kernels name
				rt := 0
				for _, a := range d.apis {
					if a.Domain == DomainRuntime {
						rt++
					}
				}
				if rt == 0 || c.cbAPI && ms.RuntimeCallbacks == 0 {
					t.Errorf("%d runtime API records, %d runtime callbacks", rt, ms.RuntimeCallbacks)
				}
			}
		})
	}
}

// TestReceiverKilledMidRun kills -9 the agent (a child process) while the workload runs: the
// workload must finish with the output of a run without injection, and exit 0.
func TestReceiverKilledMidRun(t *testing.T) {
	buildInjection(t)
	sock := filepath.Join(t.TempDir(), "cupti.sock")
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperReceiverProcess$", "-test.v")
	helper.Env = append(os.Environ(), "SPECPROF_CUPTI_TEST_HELPER="+sock)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	hw := newLineWaiter(out, "helper: listening", "helper: records")
	hw.wait(t, "helper: listening", 10*time.Second)

	args := workloadArgs("eager", 150)
	cmd := exec.Command(python(t), append([]string{workloadPath(t)}, args...)...)
	cmd.Env = injectEnv(t, sock)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hw.wait(t, "helper: records", 10*time.Second)
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	killedAt := time.Since(start)
	err = cmd.Wait()
	res := runResult{stdout: stdout.String(), stderr: stderr.String(), wall: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if res.wall-killedAt < 100*time.Millisecond {
		t.Logf("note: the workload ended %v after the kill; the kill may have come late", res.wall-killedAt)
	}
	sameOutput(t, res, args...)
	t.Logf("agent killed %v into the run; workload finished after %v; helper saw:\n%s", killedAt, res.wall, hw.String())
}

// TestHelperReceiverProcess is the agent of TestReceiverKilledMidRun, run as a child process.
func TestHelperReceiverProcess(t *testing.T) {
	sock := os.Getenv("SPECPROF_CUPTI_TEST_HELPER")
	if sock == "" {
		t.Skip("helper process for TestReceiverKilledMidRun")
	}
	r, err := Listen(Config{Path: sock})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("helper: listening")
	h := &printHandler{}
	go r.Serve(h)
	select {} // until killed
}

type printHandler struct{ n int }

func (p *printHandler) Open(c *Conn) { fmt.Printf("helper: open pid %d\n", c.Info().Pid) }
func (p *printHandler) Records(c *Conn, b *Batch) {
	p.n += b.Len()
	if p.n > 2000 {
		fmt.Printf("helper: records %d\n", p.n)
		p.n = -1 << 40
	}
}
func (p *printHandler) Close(c *Conn, err error) {}

// TestNoAgent runs the workload injected with nobody listening: same output, nothing enabled in
// CUPTI, and the wall-time cost is logged.
func TestNoAgent(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "nobody.sock")
	mstats := filepath.Join(dir, "mock.json")
	args := workloadArgs("eager", 100)
	res := runWorkload(t, injectEnv(t, sock, "SPECPROF_MOCK_CUPTI_STATS="+mstats), args...)
	sameOutput(t, res, args...)
	if l := specprofLines(res.stderr); len(l) != 0 {
		t.Errorf("library complained: %q", l)
	}
	ms := readMockStats(t, mstats)
	if ms.EverEnabled || ms.DriverCB != 0 {
		t.Errorf("with no agent, activity kinds were enabled (%v) or driver callbacks fired (%d)", ms.EverEnabled, ms.DriverCB)
	}
	// Cost: alternate plain and injected runs; compare medians of the process wall time.
	var plain, inj []time.Duration
	for i := 0; i < 3; i++ {
		plain = append(plain, runWorkload(t, plainEnv(t), args...).wall)
		inj = append(inj, runWorkload(t, injectEnv(t, sock), args...).wall)
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	t.Logf("no agent: workload wall time injected/plain = %.3f (median of 3: %v vs %v; eager, 100 cycles, 2 threads)",
		float64(med(inj))/float64(med(plain)), med(inj), med(plain))
}

// TestBadConfigLogged: every variable the library cannot use is named in one line of its own,
// with what is used instead, and the workload runs as without injection.
func TestBadConfigLogged(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "nobody.sock")
	args := workloadArgs("eager", 20)
	bad := map[string]string{
		"SPECPROF_CUPTI_BUFFERS":    "1",
		"SPECPROF_CUPTI_FLUSH_MS":   "soon",
		"SPECPROF_CUPTI_KINDS":      "kernel,bogus",
		"SPECPROF_CUPTI_DUTY":       "5/2",
		"SPECPROF_CUPTI_API":        "some",
		"SPECPROF_CUPTI_DUTY_START": "later",
	}
	var env []string
	for k, v := range bad {
		env = append(env, k+"="+v)
	}
	res := runWorkload(t, injectEnv(t, sock, env...), args...)
	sameOutput(t, res, args...)
	lines := specprofLines(res.stderr)
	for k, v := range bad {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, k+"="+v) || strings.Contains(l, k+": unknown kind") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s=%s: %d lines name it, want 1: %q", k, v, n, lines)
		}
	}
	if len(lines) != len(bad) {
		t.Errorf("want %d lines, one per bad variable: %q", len(bad), lines)
	}
}

// TestNoAgentDetach: with SPECPROF_CUPTI_DETACH=1 and nobody listening the library detaches
// CUPTI for good, in an application thread's API exit callback, makes no CUPTI call after it,
// and the workload's output is unchanged.
func TestNoAgentDetach(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "nobody.sock")
	mstats := filepath.Join(dir, "mock.json")
	args := workloadArgs("eager", 200)
	res := runWorkload(t, injectEnv(t, sock, "SPECPROF_MOCK_CUPTI_STATS="+mstats, "SPECPROF_CUPTI_DETACH=1"), args...)
	sameOutput(t, res, args...)
	if l := specprofLines(res.stderr); len(l) != 0 {
		t.Errorf("library complained: %q", l)
	}
	ms := readMockStats(t, mstats)
	if ms.Subscribes != 1 || ms.Finalizes != 1 || ms.FinalizeOutside != 0 || ms.CallsWhileDetached != 0 || ms.EverEnabled {
		t.Errorf("mock CUPTI: %d subscribes, %d finalizes (%d outside an API exit callback), %d calls while detached, kinds enabled %v; warnings %q",
			ms.Subscribes, ms.Finalizes, ms.FinalizeOutside, ms.CallsWhileDetached, ms.EverEnabled, ms.Warnings)
	}
}

// runLateAgent runs the graph workload (30 cycles) with nobody listening until it is ready,
// then starts an agent on sock and lets the workload go on; it checks the workload's output and
// returns the agent's one connection, closed. env is the workload's environment. The workload
// pauses 1 s after cuInit, so that the library has found nobody listening (and, with
// SPECPROF_CUPTI_DETACH=1, detached) before the graph capture, however loaded the machine: under
// CI's load the capture once came first, and the library rightly refused the detach.
func runLateAgent(t *testing.T, sock string, env []string) *connData {
	t.Helper()
	startFile := filepath.Join(t.TempDir(), "start")
	args := workloadArgs("graph", 30, "--wait-start", startFile, "--sleep-after-cuinit", "1")
	cmd := exec.Command(python(t), append([]string{workloadPath(t)}, args...)...)
	cmd.Env = env
	var stdout strings.Builder
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ew := newLineWaiter(errPipe, "sglang_demo: ready")
	ew.wait(t, "sglang_demo: ready", 20*time.Second)
	time.Sleep(300 * time.Millisecond) // the library has tried and failed to connect by now

	col := newCollector()
	r, err := Listen(Config{Path: sock})
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(col)
	defer r.Close()
	d := col.waitOpen(t, 5*time.Second)
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	<-ew.done
	res := runResult{stdout: stdout.String(), stderr: ew.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	}
	sameOutput(t, res, workloadArgs("graph", 30)...)
	d.waitClosed(t, 5*time.Second)
	return d
}

// TestLateAgentAfterDetach: the library detached CUPTI for good while nobody listened; an agent
// that appears later gets a connection and the library's counters (one detach), no records, and
// the library calls nothing in CUPTI for it (which would initialise CUPTI again). The graph
// replays made after the detach still run (the mock models a detached CUPTI).
func TestLateAgentAfterDetach(t *testing.T) {
	dir := t.TempDir()
	sock, mstats := filepath.Join(dir, "run", "cupti.sock"), filepath.Join(dir, "mock.json")
	d := runLateAgent(t, sock, injectEnv(t, sock, "SPECPROF_CUPTI_RETRY_MS=100", "SPECPROF_CUPTI_DETACH=1",
		"SPECPROF_MOCK_CUPTI_STATS="+mstats))
	if n := len(d.kernels) + len(d.apis) + len(d.memcpys); n != 0 {
		t.Errorf("%d records after the final detach", n)
	}
	if d.lib.Detaches != 1 || d.lib.DetachStallNs == 0 {
		t.Errorf("library counters %+v: want one detach with its wait", d.lib)
	}
	ms := readMockStats(t, mstats)
	if ms.Finalizes != 1 || ms.FinalizeOutside != 0 || ms.CallsWhileDetached != 0 || ms.FinalizeWithGraphs != 0 {
		t.Errorf("mock CUPTI: %d finalizes (%d outside an API exit callback, %d after graphs were built), %d calls while detached; warnings %q",
			ms.Finalizes, ms.FinalizeOutside, ms.FinalizeWithGraphs, ms.CallsWhileDetached, ms.Warnings)
	}
}

// TestLateAgent starts the workload with nobody listening; the agent appears later: the
// library connects within its retry period and sends the graph nodes captured before. The
// process has CUDA graphs, so collection begins when an application thread next leaves a CUDA
// call (GPU kinds are never switched while a graph launch may be in progress): from the end of
// the first API record on, every kernel arrives, and exactly one switch was made.
// With SPECPROF_CUPTI_API_SOURCE=callbacks the same holds for the API records the library makes.
func TestLateAgent(t *testing.T) {
	t.Run("activity", func(t *testing.T) { testLateAgent(t, false) })
	t.Run("callback-api", func(t *testing.T) { testLateAgent(t, true) })
}

func testLateAgent(t *testing.T, cbAPI bool) {
	dir := t.TempDir()
	sock, truth := filepath.Join(dir, "run", "cupti.sock"), filepath.Join(dir, "truth.jsonl")
	env := []string{"SPECPROF_SIM_TRUTH=" + truth, "SPECPROF_CUPTI_RETRY_MS=100"}
	if cbAPI {
		env = append(env, "SPECPROF_CUPTI_API_SOURCE=callbacks")
	}
	d := runLateAgent(t, sock, injectEnv(t, sock, env...))
	d.cbAPI = cbAPI
	if len(d.kernels) == 0 || len(d.apis) == 0 {
		t.Fatalf("%d kernel and %d API records after the agent appeared", len(d.kernels), len(d.apis))
	}
	since := d.apis[0].End
	for _, a := range d.apis {
		since = min(since, a.End)
	}
	if since < d.info.ConnectTime {
		t.Errorf("an API record ending at %d, before the connection at %d", since, d.info.ConnectTime)
	}
	if d.lib.GpuSwitches != 1 || d.lib.GpuSwitchNs == 0 {
		t.Errorf("library counters %+v: want the one switch that began collection, with its time", d.lib)
	}
	checkTruth(t, readTruth(t, truth), d, 0, since)
}

// TestBusyCUPTI: another CUPTI subscriber exists; the library says so once and steps aside.
func TestBusyCUPTI(t *testing.T) {
	col := newCollector()
	_, sock := startReceiver(t, col)
	args := workloadArgs("graph", 10)
	res := runWorkload(t, injectEnv(t, sock, "SPECPROF_MOCK_CUPTI_BUSY=1"), args...)
	sameOutput(t, res, args...)
	l := specprofLines(res.stderr)
	if len(l) != 1 || !strings.Contains(l[0], "already subscribed") || !strings.Contains(l[0], "steps aside") {
		t.Fatalf("want one clear line about the other subscriber, got %q", l)
	}
	t.Logf("message: %s", l[0])
	select {
	case d := <-col.opened:
		t.Errorf("the library connected anyway: %+v", d.info)
	default:
	}
}

// TestUnknownCUPTIVersion: a CUPTI version whose record layouts are unknown switches the
// library off with a clear message instead of mis-decoding.
func TestUnknownCUPTIVersion(t *testing.T) {
	for _, v := range []string{"17", "130100", "99"} {
		t.Run(v, func(t *testing.T) {
			col := newCollector()
			_, sock := startReceiver(t, col)
			args := workloadArgs("graph", 10)
			res := runWorkload(t, injectEnv(t, sock, "SPECPROF_MOCK_CUPTI_VERSION="+v), args...)
			sameOutput(t, res, args...)
			l := specprofLines(res.stderr)
			if len(l) != 1 || !strings.Contains(l[0], "CUPTI API version "+v) || !strings.Contains(l[0], "not supported") {
				t.Fatalf("want one clear line about version %s, got %q", v, l)
			}
			select {
			case d := <-col.opened:
				t.Errorf("the library connected anyway: %+v", d.info)
			default:
			}
		})
	}
}

// TestClockOffsetFallback: CUPTI refuses the timestamp callback; the library converts CUPTI's
// clock (CLOCK_REALTIME in the mock) with a measured offset.
func TestClockOffsetFallback(t *testing.T) {
	col := newCollector()
	_, sock := startReceiver(t, col)
	truth := filepath.Join(t.TempDir(), "truth.jsonl")
	args := workloadArgs("graph", 10)
	res := runWorkload(t, injectEnv(t, sock, "SPECPROF_SIM_TRUTH="+truth, "SPECPROF_MOCK_CUPTI_NO_TS_CALLBACK=1"), args...)
	sameOutput(t, res, args...)
	l := specprofLines(res.stderr)
	if len(l) != 1 || !strings.Contains(l[0], "offset") {
		t.Errorf("want one line about the offset fallback, got %q", l)
	}
	d := col.waitOpen(t, 5*time.Second)
	d.waitClosed(t, 5*time.Second)
	if d.info.ClockSource != ClockOffset || d.info.ClockOffset == 0 {
		t.Fatalf("hello %+v: want the offset clock", d.info)
	}
	checkTruth(t, readTruth(t, truth), d, 20000, 0) // within 20 µs
}

// TestSlowAgent: an agent that accepts and never reads. The workload is unharmed and its exit
// waits at most the library's 200 ms budget; what was dropped is counted.
func TestSlowAgent(t *testing.T) {
	buildInjection(t)
	sock := filepath.Join(t.TempDir(), "slow.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	args := workloadArgs("eager", 200)
	plain := baseline(t, args...)
	res := runWorkload(t, injectEnv(t, sock, "SPECPROF_CUPTI_SEND_BUFFER_KB=64"), args...)
	sameOutput(t, res, args...)
	t.Logf("slow agent: wall %v, plain %v", res.wall, plain.wall)
	if res.wall > 3*plain.wall+2*time.Second {
		t.Errorf("the stuck agent slowed the workload: %v vs %v", res.wall, plain.wall)
	}
	// Drain what the socket held: a valid stream prefix.
	c := <-accepted
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	d := NewDecoder()
	var b Batch
	buf := make([]byte, 0, 1<<20)
	tmp := make([]byte, 64<<10)
	records := 0
	var last *LibStats
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		used, derr := d.Decode(buf, &b)
		records += b.Len()
		if b.Stats != nil {
			s := *b.Stats
			last = &s
		}
		b.Reset()
		buf = buf[:copy(buf, buf[used:])]
		if derr != nil {
			t.Fatalf("decoding what the stuck agent got: %v", derr)
		}
		if err != nil {
			break
		}
	}
	t.Logf("the stuck agent's socket held %d records; last STATS %+v", records, last)
	if records == 0 {
		t.Errorf("no records at all")
	}
}

// TestLauncherSIGPIPEAndFork runs a C program that keeps SIGPIPE's default action (Python
// ignores it) against an agent that shuts down its reading side after accepting, so the
// library's sends fail with EPIPE; the program also forks a child mid-run that exits through
// exit(). No SIGPIPE death, the child exits at once, the parent finishes.
func TestLauncherSIGPIPEAndFork(t *testing.T) {
	_, _, standins := buildInjection(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "launcher")
	testenv.CompileC(t, standins, bin, "testdata/launcher.c")
	sock := filepath.Join(dir, "deaf.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepts := make(chan int, 64)
	go func() {
		var keep []*net.UnixConn
		defer func() {
			for _, c := range keep {
				c.Close()
			}
		}()
		for n := 1; ; n++ {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // let the HELLO arrive, then stop reading
			c.CloseRead()
			keep = append(keep, c)
			accepts <- n
		}
	}()
	cmd := exec.Command(bin, "4000", "200", "300")
	cmd.Env = injectEnv(t, sock, "SPECPROF_CUPTI_FLUSH_MS=20", "SPECPROF_CUPTI_RETRY_MS=100")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("launcher: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("launcher did not finish")
	}
	out := stdout.String()
	if !strings.Contains(out, "child exited 0") || !strings.Contains(out, "done 4000") {
		t.Errorf("launcher output:\n%s\nstderr:\n%s", out, stderr.String())
	}
	var childMS float64
	if i := strings.Index(out, "child exited 0 after "); i >= 0 {
		fmt.Sscanf(out[i+len("child exited 0 after "):], "%f", &childMS)
	}
	if childMS > 100 { // without the atfork reset the child would wait for a sender it lacks
		t.Errorf("the forked child took %.1f ms to exit", childMS)
	}
	if n := len(accepts); n < 2 {
		t.Errorf("the library connected %d times: it should have met EPIPE and reconnected", n)
	}
	t.Logf("launcher: %s(the library connected %d times)", out, len(accepts))
}

// TestLayoutMismatchDisables: kernel records shorter than the layout the library reads (a
// CUPTI it was not built for) switch collection off with one clear line, never mis-decoded.
func TestLayoutMismatchDisables(t *testing.T) {
	col := newCollector()
	_, sock := startReceiver(t, col)
	args := workloadArgs("eager", 10)
	res := runWorkload(t, injectEnv(t, sock, "SPECPROF_MOCK_CUPTI_KERNEL_SIZE=152"), args...)
	sameOutput(t, res, args...)
	l := specprofLines(res.stderr)
	if len(l) != 1 || !strings.Contains(l[0], "unsupported record layout") {
		t.Fatalf("want one line about the record layout, got %q", l)
	}
	d := col.waitOpen(t, 5*time.Second)
	d.waitClosed(t, 5*time.Second)
	if len(d.kernels) != 0 {
		t.Errorf("%d kernels decoded from records of an unknown layout", len(d.kernels))
	}
	t.Logf("message: %s", l[0])
}

// TestDroppedRecordsCounted: records CUPTI drops because it has no buffer to put them in are all
// in the library's final counters (DroppedCUPTI equals what the mock dropped), whether CUPTI could
// get no more buffers (the mock's limit: no buffer comes back after the drops) or the library's
// pool ran out and it refused CUPTI's requests (the mock holding full buffers until a flush;
// BuffersRefused counts the refusals).
func TestDroppedRecordsCounted(t *testing.T) {
	cases := []struct {
		name    string
		env     []string
		refused bool
	}{
		{"cupti-limit", []string{"SPECPROF_MOCK_CUPTI_BUFFER_LIMIT=2"}, false},
		{"pool-exhausted", []string{"SPECPROF_MOCK_CUPTI_HOLD_BUFFERS=1", "SPECPROF_CUPTI_BUFFERS=2"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			col := newCollector()
			_, sock := startReceiver(t, col)
			mstats := filepath.Join(t.TempDir(), "mock.json")
			args := workloadArgs("eager", 20)
			env := append([]string{"SPECPROF_MOCK_CUPTI_STATS=" + mstats, "SPECPROF_CUPTI_BUFFER_KB=16"}, c.env...)
			res := runWorkload(t, injectEnv(t, sock, env...), args...)
			sameOutput(t, res, args...)
			d := col.waitOpen(t, 5*time.Second)
			d.waitClosed(t, 5*time.Second)
			ms := readMockStats(t, mstats)
			if !d.final || ms.Dropped == 0 || d.lib.DroppedCUPTI != ms.Dropped {
				t.Errorf("final STATS %v: the library counted %d records dropped by CUPTI, the mock dropped %d",
					d.final, d.lib.DroppedCUPTI, ms.Dropped)
			}
			if (d.lib.BuffersRefused > 0) != c.refused {
				t.Errorf("the library refused %d buffer requests", d.lib.BuffersRefused)
			}
			t.Logf("mock dropped %d; library stats %+v", ms.Dropped, d.lib)
		})
	}
}
