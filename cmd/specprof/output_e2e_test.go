package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specprof/specprof/internal/testenv"
)

// The target's output under `specprof run --spec-metrics log` (the
// default): it must reach specprof's stdout and stderr whole and unchanged
// whether specprof is running, stopped or dead, and never wait for it.

// logTarget is one run of testdata/workloads/log_lines.py as a target.
type logTarget struct {
	args     []string // the workload's flags, without --progress
	dir      string
	progress string // the workload's progress file
	status   string // its exit status, written by the sh around it
	shell    string // run by that sh before the workload
}

func newLogTarget(t *testing.T, args ...string) *logTarget {
	dir := t.TempDir()
	return &logTarget{args: args, dir: dir, progress: filepath.Join(dir, "progress"), status: filepath.Join(dir, "status")}
}

func logWorkload(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "testdata/workloads/log_lines.py")
}

// untracedOutput runs the workload alone and returns its stdout and stderr.
func untracedOutput(t *testing.T, args ...string) (stdout, stderr []byte) {
	t.Helper()
	cmd := exec.Command("python3", append([]string{logWorkload(t)}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("untraced workload: %v\n%s", err, e.Bytes())
	}
	return o.Bytes(), e.Bytes()
}

// startTraced starts specprof run on the target: the workload under a
// shell that records its exit status, which the test cannot wait for once
// specprof (its parent) is gone. specprof gets a process group of its own,
// so that the cleanup can end whatever is left of it, and files for its
// stdout and stderr.
func startTraced(t *testing.T, lt *logTarget, flags ...string) (cmd *exec.Cmd, stdout, stderr string) {
	t.Helper()
	stdout, stderr = filepath.Join(lt.dir, "stdout"), filepath.Join(lt.dir, "stderr")
	fo, err := os.Create(stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer fo.Close()
	fe, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	py := append([]string{"python3", logWorkload(t)}, lt.args...)
	py = append(py, "--progress", lt.progress)
	args := append([]string{"run", "-q", "--interval", "0", "--cupti", "off", "-o", filepath.Join(lt.dir, "out")}, flags...)
	args = append(args, "--", "sh", "-c", lt.shell+`"$@"; echo $? > `+lt.status, "sh")
	args = append(args, py...)
	cmd = exec.Command(specprofBin(t), args...)
	cmd.Stdout, cmd.Stderr = fo, fe
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd, stdout, stderr
}

// cycles returns how many cycles the workload has finished, -1 once it has
// written its last line.
func (lt *logTarget) cycles() int {
	b, err := os.ReadFile(lt.progress)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	if s == "done" {
		return -1
	}
	return atoi(s)
}

// waitFor polls cond until it holds or a minute has passed; the minute is
// only a bound for a broken build, which would otherwise hang the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exitStatus waits for the sh around the workload to record its status.
func (lt *logTarget) exitStatus(t *testing.T) string {
	t.Helper()
	var s string
	waitFor(t, "the target's exit status", func() bool {
		b, err := os.ReadFile(lt.status)
		s = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	return s
}

// procState is the state letter of /proc/PID/stat ('T' stopped, 'Z' zombie).
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// workloadLines keeps the lines of out that the workload wrote (specprof's
// own log lines share stderr).
func workloadLines(out []byte) string {
	var keep []string
	for _, l := range strings.SplitAfter(string(out), "\n") {
		if strings.HasPrefix(l, "[TP0] ") || strings.HasPrefix(l, "tokens: ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTargetOutputOutlivesSpecprof: specprof killed, or stopped, while the
// target logs. The target must complete every cycle (while specprof is
// still stopped), exit 0, and leave exactly the output an untraced run
// gives. Its log lines pass through pipes that specprof reads for the spec
// metrics, so a dead reader used to kill it (BrokenPipeError) and a stopped
// one to block it once the pipe was full.
func TestTargetOutputOutlivesSpecprof(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	// 12 MB of log lines, more than every buffer between the target and a
	// stopped specprof (the pipe, the forward queue, the socket), so a
	// target that waited for specprof could not finish.
	args := []string{"--cycles", "12000", "--pad", "850", "--sleep-ms", "0.05", "--stderr-every", "0"}
	wantOut, _ := untracedOutput(t, args...)

	t.Run("killed", func(t *testing.T) {
		lt := newLogTarget(t, append(args[:len(args):len(args)], "--stderr-every", "100")...)
		wantOut, wantErr := untracedOutput(t, lt.args...)
		cmd, stdout, stderr := startTraced(t, lt)
		waitFor(t, "the target's first cycles", func() bool { n := lt.cycles(); return n < 0 || n >= 10 })
		if lt.cycles() < 0 {
			t.Fatal("the target finished before specprof could be killed: give it more cycles")
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if st := lt.exitStatus(t); st != "0" {
			t.Errorf("target exit status %s after specprof was killed, want 0\n%s", st, tail(string(readFile(t, stderr)), 300))
		}
		if got := readFile(t, stdout); !bytes.Equal(got, wantOut) {
			t.Errorf("target stdout differs from an untraced run's: %d bytes, want %d\n%s", len(got), len(wantOut), tail(string(got), 300))
		}
		if got := workloadLines(readFile(t, stderr)); got != string(wantErr) {
			t.Errorf("target stderr differs from an untraced run's:\n%s\nwant\n%s", tail(got, 2000), tail(string(wantErr), 300))
		}
	})

	t.Run("stopped", func(t *testing.T) {
		lt := newLogTarget(t, args...)
		cmd, stdout, _ := startTraced(t, lt)
		waitFor(t, "the target's first cycle", func() bool { return lt.cycles() != 0 })
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "specprof to stop", func() bool { return procState(cmd.Process.Pid) == 'T' })
		waitFor(t, "the target to finish while specprof is stopped", func() bool { return lt.cycles() < 0 })
		st := lt.exitStatus(t)
		if s := procState(cmd.Process.Pid); s != 'T' {
			t.Fatalf("specprof state %q, want still stopped (T) when the target has finished", s)
		}
		if st != "0" {
			t.Errorf("target exit status %s, want 0", st)
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("specprof after SIGCONT: %v", err)
		}
		got := readFile(t, stdout)
		if !bytes.HasPrefix(got, wantOut) {
			t.Errorf("target stdout is not an untraced run's (followed by specprof's report): %d bytes, want %d first", len(got), len(wantOut))
		}
		// What specprof could not take while stopped is dropped and
		// counted; every line is either parsed or counted.
		rep := readReport(t, filepath.Join(lt.dir, "out"))
		if rep.Spec == nil {
			t.Fatalf("no spec metrics in the report")
		}
		cycles := 12000
		t.Logf("%d samples; %d lines (%d bytes) dropped", rep.Spec.Samples, rep.Spec.LogLinesDropped, rep.Spec.LogBytesDropped)
		if rep.Spec.LogLinesDropped == 0 || rep.Spec.LogBytesDropped == 0 {
			t.Errorf("spec metrics: %d lines (%d bytes) dropped, want some: specprof was stopped through %d lines",
				rep.Spec.LogLinesDropped, rep.Spec.LogBytesDropped, cycles)
		}
		if n := rep.Spec.Samples + int(rep.Spec.LogLinesDropped); n < cycles || n > cycles+1 {
			t.Errorf("spec metrics: %d samples + %d lines dropped = %d, want %d (the Decode lines) or one more (the tokens line)",
				rep.Spec.Samples, rep.Spec.LogLinesDropped, n, cycles)
		}
		if rep.Spec.Samples == 0 {
			t.Errorf("spec metrics: no sample, though the first cycle's line came before specprof was stopped")
		}
		if !strings.Contains(string(got), "of the target's output were not read") {
			t.Errorf("the terminal report does not mention the unread lines:\n%s", tail(string(got), 300))
		}
	})

	t.Run("killed while stopped", func(t *testing.T) {
		lt := newLogTarget(t, args...)
		cmd, stdout, _ := startTraced(t, lt)
		waitFor(t, "the target's first cycle", func() bool { return lt.cycles() != 0 })
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "specprof to stop", func() bool { return procState(cmd.Process.Pid) == 'T' })
		waitFor(t, "the target's next cycles", func() bool { n := lt.cycles(); return n < 0 || n >= 3000 })
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if st := lt.exitStatus(t); st != "0" {
			t.Errorf("target exit status %s, want 0", st)
		}
		if got := readFile(t, stdout); !bytes.Equal(got, wantOut) {
			t.Errorf("target stdout differs from an untraced run's: %d bytes, want %d", len(got), len(wantOut))
		}
	})
}

// TestOutputHelperIgnoresGroupSignals: the terminal's Ctrl-C (and a
// hangup, or a SIGTERM or SIGQUIT for the process group) goes to every
// process of the group. A target that ignores them keeps running, and its
// output must keep reaching the terminal: the output helper ignores them
// too, whatever becomes of specprof (SIGQUIT ends it).
func TestOutputHelperIgnoresGroupSignals(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	args := []string{"--cycles", "3000", "--pad", "100", "--sleep-ms", "0.5", "--stderr-every", "50"}
	wantOut, wantErr := untracedOutput(t, args...)
	lt := newLogTarget(t, args...)
	lt.shell = `trap '' INT HUP TERM QUIT; ` // ignored signals stay ignored across exec
	cmd, stdout, stderr := startTraced(t, lt)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT} {
		waitFor(t, "the target's next cycles", func() bool { n := lt.cycles(); return n < 0 || n >= 10 })
		if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	if lt.cycles() < 0 {
		t.Fatal("the target finished before the last signal: give it more cycles")
	}
	if st := lt.exitStatus(t); st != "0" {
		t.Errorf("target exit status %s, want 0", st)
	}
	_ = cmd.Wait()
	if got := readFile(t, stdout); !bytes.HasPrefix(got, wantOut) {
		t.Errorf("target stdout is not an untraced run's: %d bytes, want %d first", len(got), len(wantOut))
	}
	if got := workloadLines(readFile(t, stderr)); got != string(wantErr) {
		t.Errorf("target stderr differs from an untraced run's:\n%s\nwant\n%s", tail(got, 300), tail(string(wantErr), 300))
	}
}

// TestRunSpecMetricsFromLog: a healthy specprof parses every Decode batch
// line of the target's output, which still reaches the terminal whole.
func TestRunSpecMetricsFromLog(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	// Long lines, so that lines cross the pipe's and the forward's chunks.
	args := []string{"--cycles", "400", "--pad", "3000", "--stderr-every", "7"}
	wantOut, wantErr := untracedOutput(t, args...)
	lt := newLogTarget(t, args...)
	cmd, stdout, stderr := startTraced(t, lt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("specprof: %v\n%s", err, tail(string(readFile(t, stderr)), 300))
	}
	if got := readFile(t, stdout); !bytes.HasPrefix(got, wantOut) {
		t.Errorf("target stdout is not an untraced run's (followed by specprof's report)")
	}
	if got := workloadLines(readFile(t, stderr)); got != string(wantErr) {
		t.Errorf("target stderr differs from an untraced run's:\n%s\nwant\n%s", tail(got, 2000), tail(string(wantErr), 300))
	}
	rep := readReport(t, filepath.Join(lt.dir, "out"))
	s := rep.Spec
	if s == nil || s.Source != "log" || s.Samples != 400 || s.AcceptLen == nil || *s.AcceptLen != 1.75 || s.TokPerSec == nil {
		t.Fatalf("spec metrics %+v, want 400 log samples with accept length 1.75", s)
	}
	if s.LogLinesDropped != 0 {
		t.Errorf("%d lines dropped by a specprof that kept up", s.LogLinesDropped)
	}
}

// TestRunDoesNotWaitForGrandchildren: a process the target leaves behind
// holding its stdout does not keep specprof from ending, and still writes
// to the terminal.
func TestRunDoesNotWaitForGrandchildren(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	out := filepath.Join(dir, "stdout")
	fo, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fo.Close()
	goFile := filepath.Join(dir, "go")
	script := `(while [ ! -e ` + goFile + ` ]; do sleep 0.05; done; echo grandchild done) & echo $! > ` + pidFile + `; echo target done`
	cmd := exec.Command(specprofBin(t), "run", "-q", "--interval", "0", "--cupti", "off", "-o", filepath.Join(dir, "out"), "--", "sh", "-c", script)
	cmd.Stdout, cmd.Stderr = fo, fo
	if err := cmd.Run(); err != nil {
		t.Fatalf("specprof: %v\n%s", err, readFile(t, out))
	}
	pid := atoi(strings.TrimSpace(string(readFile(t, pidFile))))
	defer syscall.Kill(pid, syscall.SIGKILL)
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("the grandchild (pid %d) is gone before specprof ended: the test proves nothing", pid)
	}
	if got := string(readFile(t, out)); !strings.Contains(got, "target done") {
		t.Errorf("target output missing:\n%s", got)
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the grandchild's line", func() bool { return strings.Contains(string(readFile(t, out)), "grandchild done") })
}
