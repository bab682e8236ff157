package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/specprof/specprof/model"

	"golang.org/x/sys/unix"
)

// The fault-injection suite: specprof killed or stopped at each stage of a
// session must never stop, block or kill its target. Every check is on
// states and outputs — the target finished, was never left stopped, exited
// 0 and printed what an untraced run prints — never on durations; a wait has
// a deadline only so that a hung target fails the test instead of hanging it.

// workloadOutput is what a sglang_demo run prints that does not depend on
// timing: its decode log lines (without time and throughput) and the
// summary's counts.
type workloadOutput struct {
	DecodeLines int
	Cycles      int
	Tokens      int
	AcceptLen   float64
}

func parseWorkloadOutput(t *testing.T, out string) workloadOutput {
	t.Helper()
	var w workloadOutput
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Decode batch") {
			w.DecodeLines++
		}
		if strings.HasPrefix(l, "{\"cycles\"") {
			var s struct {
				Cycles    int     `json:"cycles"`
				Tokens    int     `json:"tokens"`
				AcceptLen float64 `json:"accept_len_mean"`
			}
			if err := json.Unmarshal([]byte(l), &s); err != nil {
				t.Fatalf("summary line %q: %v", l, err)
			}
			w.Cycles, w.Tokens, w.AcceptLen = s.Cycles, s.Tokens, s.AcceptLen
		}
	}
	return w
}

// faultSession is one `specprof run` whose output goes to files the test
// watches.
type faultSession struct {
	cmd      *exec.Cmd
	out, err string // paths: specprof's (and the target's) stdout and stderr
	dir      string // -o
}

func (s *faultSession) stderr() string { b, _ := os.ReadFile(s.err); return string(b) }
func (s *faultSession) stdout() string { b, _ := os.ReadFile(s.out); return string(b) }

// target finds the workload among specprof's children (the gate watchdog is
// one too) by a word of its command line.
func (s *faultSession) target(t *testing.T, word string) int {
	t.Helper()
	pid := 0
	waitFor(t, "the target to start", func() bool {
		b, _ := exec.Command("pgrep", "-P", itoa(s.cmd.Process.Pid)).Output()
		for _, f := range strings.Fields(string(b)) {
			cl, _ := os.ReadFile("/proc/" + f + "/cmdline")
			if strings.Contains(string(cl), word) {
				pid = atoi(f)
				return true
			}
		}
		return false
	})
	return pid
}

func startFaultSession(t *testing.T, env []string, args ...string) *faultSession {
	t.Helper()
	_, _, std, bin, _ := standins(t)
	dir := t.TempDir()
	s := &faultSession{out: filepath.Join(dir, "stdout"), err: filepath.Join(dir, "stderr"), dir: filepath.Join(dir, "out")}
	fo, err := os.Create(s.out)
	if err != nil {
		t.Fatal(err)
	}
	defer fo.Close()
	fe, err := os.Create(s.err)
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	s.cmd = exec.Command(bin, append([]string{"run", "-q", "--interval", "0", "-o", s.dir}, args...)...)
	s.cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+std), env...)
	s.cmd.Stdout, s.cmd.Stderr = fo, fe
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	return s
}

// reap waits for pid, a child of the test process once specprof is dead
// (the test is a child subreaper), and returns its wait status.
func reap(t *testing.T, pid int) syscall.WaitStatus {
	t.Helper()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("wait for the target %d: %v", pid, err)
		}
		return ws
	}
}

// untracedDemo runs the workload without specprof.
func untracedDemo(t *testing.T, args ...string) workloadOutput {
	t.Helper()
	_, _, std, _, _ := standins(t)
	cmd := exec.Command("python3", args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("untraced run: %v\n%s", err, out)
	}
	return parseWorkloadOutput(t, string(out))
}

// TestFaultSpecprofKilledOrStopped: SIGKILL or SIGSTOP of specprof inside
// the library-open gate (the target stopped at its libcuda open), during the
// decode cycles and as the target exits (its CUPTI library flushing to a
// dead or stopped agent). The target finishes, exits 0 and prints what it
// prints untraced; with specprof stopped it finishes while specprof still is.
func TestFaultSpecprofKilledOrStopped(t *testing.T) {
	injLib, mockCupti, _, _, root := standins(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a child subreaper (to reap the orphaned target): %v", err)
	}
	workload := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	base := []string{workload, "--cycles", "120", "--mode", "graph", "--log-interval", "20"}
	want := untracedDemo(t, base...)
	if want.Cycles != 120 || want.DecodeLines == 0 {
		t.Fatalf("untraced run: %+v", want)
	}
	for _, stage := range []string{"gate", "cycles", "exit"} {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
			t.Run(stage+"/"+unix.SignalName(sig), func(t *testing.T) {
				pause := filepath.Join(t.TempDir(), "go")
				args := append([]string{}, base...)
				env := []string{"SPECPROF_CUPTI_LIB=" + mockCupti}
				switch stage {
				case "gate":
					// The agent holds the gate for good: only the watchdog
					// resumes the target (at once when specprof dies; after
					// its timeout while specprof is stopped).
					env = append(env, "SPECPROF_TEST_GATE_HOLD=1h")
					if sig == syscall.SIGKILL {
						env = append(env, "SPECPROF_GATE_TIMEOUT=1h")
					} else {
						env = append(env, "SPECPROF_GATE_TIMEOUT=200ms")
					}
				case "cycles":
					args = append(args, "--pause-at-cycle", "60", "--pause-file", pause)
				case "exit":
					args = append(args, "--sleep-at-exit", "0.5")
				}
				s := startFaultSession(t, env, append([]string{"--cupti", "on", "--cupti-lib", injLib, "--spec-metrics", "off", "--", "python3"}, args...)...)
				pid := s.target(t, "sglang_demo")
				switch stage {
				case "gate":
					waitFor(t, "the target stopped at its libcuda open", func() bool { return procState(pid) == 'T' })
				case "cycles":
					waitFor(t, "the target paused at cycle 60", func() bool { return strings.Contains(s.stderr(), "paused at cycle 60") })
				case "exit":
					waitFor(t, "the target's summary line", func() bool { return strings.Contains(s.stdout(), "{\"cycles\"") })
				}
				if err := syscall.Kill(s.cmd.Process.Pid, sig); err != nil {
					t.Fatal(err)
				}
				if stage == "cycles" {
					if err := os.WriteFile(pause, nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if sig == syscall.SIGKILL {
					_ = s.cmd.Wait()
				}
				waitFor(t, "the target to finish", func() bool {
					st := procState(pid)
					return st == 0 || st == 'Z'
				})
				if sig == syscall.SIGSTOP {
					if st := procState(s.cmd.Process.Pid); st != 'T' {
						t.Errorf("specprof's state when the target had finished: %c, want T (stopped): the target must not need it", st)
					}
					_ = s.cmd.Process.Kill()
					_ = s.cmd.Wait()
				}
				ws := reap(t, pid)
				if !ws.Exited() || ws.ExitStatus() != 0 {
					t.Errorf("target wait status %v, want exit 0\n%s", ws, s.stderr())
				}
				if got := parseWorkloadOutput(t, s.stdout()); got != want {
					t.Errorf("target output %+v, untraced %+v\nstderr:\n%s", got, want, s.stderr())
				}
			})
		}
	}
}

// TestFaultGateSlowAgent: an agent slower than the gate watchdog's timeout
// (held on purpose) does not hold the target: the watchdog resumes it, the
// session goes on, and the report says that the watchdog let it go before
// its probes were in.
func TestFaultGateSlowAgent(t *testing.T) {
	_, _, _, _, root := standins(t)
	workload := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	base := []string{workload, "--cycles", "60", "--mode", "graph"}
	want := untracedDemo(t, base...)
	s := startFaultSession(t, []string{"SPECPROF_TEST_GATE_HOLD=3s", "SPECPROF_GATE_TIMEOUT=100ms"},
		append([]string{"--cupti", "off", "--spec-metrics", "off", "--", "python3"}, base...)...)
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("specprof run: %v\n%s", err, s.stderr())
	}
	if got := parseWorkloadOutput(t, s.stdout()); got != want {
		t.Errorf("target output %+v, untraced %+v", got, want)
	}
	rep := readReport(t, s.dir)
	if rep.Loss.GateLate != 1 {
		t.Errorf("report loss gate_released_by_watchdog = %d, want 1", rep.Loss.GateLate)
	}
	found := false
	for _, p := range rep.Processes {
		for _, pr := range p.Problems {
			found = found || strings.Contains(pr, "gate watchdog")
		}
	}
	if !found {
		t.Errorf("no process problem names the watchdog's release: %+v", rep.Processes)
	}
	if !strings.Contains(s.stderr(), "gate watchdog: resumed") {
		t.Errorf("the watchdog logged no release:\n%s", s.stderr())
	}
}

// TestFaultRingFull: with specprof stopped, a target fills the ring buffer
// and then starts a second process, whose fork and libcuda-open records are
// lost. The second process must not be stopped at its library open (a stop
// whose record is lost would never be undone); once specprof goes on, it
// finds the process among the kernel side's tracked ones and attaches its
// probes; and every cycle of both is accounted for: measured, left out for
// lost records, or counted as lost whole.
func TestFaultRingFull(t *testing.T) {
	_, _, _, _, root := standins(t)
	dir := t.TempDir()
	f1, f2 := filepath.Join(dir, "f1"), filepath.Join(dir, "f2")
	w := filepath.Join(root, "testdata/workloads/sglang_demo.py")
	const first, second = 3000, 50
	script := fmt.Sprintf("python3 %s --pause-at-cycle 100 --pause-file %s --cycles %d --mode eager --layers 16 --kernel-us 1 && "+
		"python3 %s --wait-start %s --cycles %d --mode eager", w, f1, first, w, f2, second)
	s := startFaultSession(t, nil, "--cupti", "off", "--spec-metrics", "off", "--", "sh", "-c", script)
	waitFor(t, "the first process paused at cycle 100", func() bool { return strings.Contains(s.stderr(), "paused at cycle 100") })
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f1, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The second process gets past its libcuda open to its wait while
	// specprof is still stopped.
	waitFor(t, "the second process to be ready (not stopped at its library open)", func() bool {
		return strings.Contains(s.stderr(), "waiting for "+f2)
	})
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Once it has read the backlog, the second process's records (while
	// the agent still learns its code objects: cycles BPF does not count)
	// find room.
	waitFor(t, "specprof to find the second process and catch up", func() bool {
		e := s.stderr()
		return strings.Contains(e, "found a process whose fork record was lost") && strings.Contains(e, "caught up now")
	})
	if err := os.WriteFile(f2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("specprof run: %v\n%s", err, s.stderr())
	}
	rep := readReport(t, s.dir)
	t.Logf("loss: %+v", rep.Loss)
	if rep.Loss.RingBuf == 0 || rep.Loss.LibOpenLost == 0 || rep.Loss.ProcessesFoundLate == 0 {
		t.Errorf("losses: ringbuf %d, library opens %d, processes found late %d; want all > 0",
			rep.Loss.RingBuf, rep.Loss.LibOpenLost, rep.Loss.ProcessesFoundLate)
	}
	var seen []int
	for _, p := range rep.Processes {
		var th *model.ThreadReport
		for _, x := range p.Threads {
			if x.Cycles+x.LossCut+x.LostWhole > 0 {
				th = x
			}
		}
		if th == nil {
			continue
		}
		n := th.Cycles + th.LossCut + th.LostWhole
		seen = append(seen, n)
		t.Logf("pid %d: %d cycles measured, %d left out for lost records, %d lost whole", p.PID, th.Cycles, th.LossCut, th.LostWhole)
	}
	if len(seen) != 2 || seen[0]+seen[1] != first+second || (seen[0] != first && seen[0] != second) {
		t.Errorf("cycles accounted for per process: %v, want %d and %d", seen, first, second)
	}
	if rep.Loss.CyclesLostWhole == 0 {
		t.Errorf("no cycle counted as lost whole, with %d records lost", rep.Loss.RingBuf)
	}
}
