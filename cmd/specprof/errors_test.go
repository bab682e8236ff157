package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specprof/specprof/internal/testenv"
)

// specprofBin builds the command once per test binary.
func specprofBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "specprof-bin")
		if err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(dir, 0o755)
		binPath = testenv.GoBuild(t, "./cmd/specprof", dir)
	})
	return binPath
}

func runBin(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(specprofBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func wantErr(t *testing.T, out string, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected failure, got success:\n%s", out)
	}
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestBadInput(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	badRules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(badRules, []byte("extends: sglang-eagle\nrules:\n  - {phase: spec.verify, qualname: '(unclosed'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("unknown preset", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--preset", "nope", "--", "true")
		wantErr(t, out, err, "nope", "sglang-eagle")
	})
	t.Run("bad regex", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--rules", badRules, "--", "true")
		wantErr(t, out, err, "rules.yaml", "(unclosed", "fix the regular expression")
	})
	t.Run("--cpu-hz too high", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--cpu-hz", "100000", "--", "true")
		wantErr(t, out, err, "--cpu-hz 100000", "4999")
	})
	t.Run("bad --gpu-records", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--gpu-records", "nodes", "--", "true")
		wantErr(t, out, err, "--gpu-records", "nodes", "'node'", "'graph'")
	})
	t.Run("bad --cupti-duty", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--cupti-duty", "2s/1s", "--", "true")
		wantErr(t, out, err, "--cupti-duty", "2s/1s", "ON <= PERIOD")
	})
	t.Run("bad --probe-duty", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--cupti", "off", "--probe-duty", "10ms/1s", "--", "true")
		wantErr(t, out, err, "--probe-duty", "10ms/1s", "50ms <= ON < PERIOD")
		out, err = runBin(t, nil, "run", "--cupti", "off", "--probe-duty", "1s", "--", "true")
		wantErr(t, out, err, "--probe-duty", `"1s"`, "ON/PERIOD")
	})
	t.Run("--probe-duty with GPU records", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--cupti", "on", "--probe-duty", "500ms/5s", "--", "true")
		wantErr(t, out, err, "--probe-duty", "--cupti off")
		out, err = runBin(t, nil, "run", "--cupti-duty", "100ms/1s", "--probe-duty", "500ms/5s", "--", "true")
		wantErr(t, out, err, "--probe-duty", "--cupti-duty", "--cupti-windows N")
	})
	t.Run("--cupti-windows without --cupti-duty", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--cupti-windows", "3", "--", "true")
		wantErr(t, out, err, "--cupti-windows 3", "--cupti-duty")
	})
	t.Run("--cupti-detach without --cupti-windows", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--cupti-duty", "100ms/1s", "--cupti-detach", "--", "true")
		wantErr(t, out, err, "--cupti-detach", "final", "--cupti-windows N")
	})
	t.Run("missing command", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "--", "/nonexistent/cmd")
		wantErr(t, out, err, "/nonexistent/cmd")
	})
	t.Run("pid does not exist", func(t *testing.T) {
		out, err := runBin(t, nil, "attach", "--pid", "4194000")
		wantErr(t, out, err, "pid 4194000 does not exist")
	})
	t.Run("not python", func(t *testing.T) {
		sleep := exec.Command("sleep", "30")
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
		out, err := runBin(t, nil, "attach", "--pid", itoa(sleep.Process.Pid), "-o", t.TempDir())
		wantErr(t, out, err, "not a Python process")
	})
	t.Run("attach with --cupti on", func(t *testing.T) {
		sleep := exec.Command("sleep", "30")
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
		out, err := runBin(t, nil, "attach", "--pid", itoa(sleep.Process.Pid), "--cupti", "on", "-o", t.TempDir())
		wantErr(t, out, err, "--cupti on: attach cannot inject the CUPTI library", "specprof run")
	})
	t.Run("attach duty start", func(t *testing.T) {
		out, err := runBin(t, nil, "attach", "--pid", itoa(os.Getpid()), "--cupti-duty-start", "cycles", "-o", t.TempDir())
		wantErr(t, out, err, "--cupti-duty-start cycles: attach cannot change", "SPECPROF_CUPTI_DUTY_START=cycles")
	})
	t.Run("unsupported python", func(t *testing.T) {
		py := "/root/.pyenv/versions/3.9.18/bin/python3"
		if _, err := os.Stat(py); err != nil {
			t.Skip("no Python 3.9 on this machine to play an unsupported version")
		}
		cmd := exec.Command(py, "-c", "import time; time.sleep(30)")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		time.Sleep(300 * time.Millisecond)
		out, err := runBin(t, nil, "attach", "--pid", itoa(cmd.Process.Pid), "-o", t.TempDir())
		wantErr(t, out, err, "unsupported Python version 3.9", "3.10")
	})
	t.Run("library not found", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "-o", t.TempDir(), "--", "python3", "-c", "print('no cuda here')")
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		if !strings.Contains(out, "no traced process loaded libcuda.so") {
			t.Errorf("no clear message about libcuda:\n%s", out)
		}
	})
	t.Run("not enough privilege", func(t *testing.T) {
		// An output directory that user can write to, so that the missing
		// privilege is the first thing wrong.
		dir, err := os.MkdirTemp("", "specprof-nobody")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(specprofBin(t), "run", "-o", dir, "--", "true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		wantErr(t, string(out), err, "CAP_BPF", "root")
	})
}

// The target dying mid-trace ends the session cleanly, with the report.
func TestTargetKilledMidTrace(t *testing.T) {
	testenv.RequireRoot(t)
	std := testenv.BuildStandins(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(specprofBin(t), "run", "-q", "-o", dir, "--", "python3",
		filepath.Join(root, "testdata/workloads/sglang_demo.py"), "--cycles", "100000", "--mode", "graph")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Find the workload (the child of specprof) and kill it once it traces.
	deadline := time.Now().Add(20 * time.Second)
	var child int
	for time.Now().Before(deadline) && child == 0 {
		time.Sleep(200 * time.Millisecond)
		// Any of specprof's threads may have forked it: ask for children by
		// parent pid, leaving out the output helper.
		b, _ := exec.Command("pgrep", "-P", itoa(cmd.Process.Pid)).Output()
		for _, f := range strings.Fields(string(b)) {
			if argv, _ := os.ReadFile("/proc/" + f + "/cmdline"); !strings.Contains(string(argv), teeArg) {
				child = atoi(f)
			}
		}
	}
	if child == 0 {
		t.Fatalf("workload never started:\n%s", out.String())
	}
	time.Sleep(1500 * time.Millisecond)
	_ = syscall.Kill(child, syscall.SIGKILL)
	err = cmd.Wait()
	var ee *exec.ExitError
	if err == nil || !errorsAs(err, &ee) || ee.ExitCode() != 137 {
		t.Errorf("specprof exit: %v, want status 137 (the target's SIGKILL)\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err != nil {
		t.Errorf("no report after the target died: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "spec.verify") {
		t.Errorf("final report lacks phases:\n%s", out.String())
	}
}

// TestRunCommandLine: --version answers; `run CMD ARGS` needs no "--" even
// when ARGS look like flags (they are the command's); a command killed by a
// signal is said to have been, and specprof exits with 128+signal.
func TestRunCommandLine(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	out, err := runBin(t, nil, "--version")
	if err != nil || !strings.HasPrefix(out, "specprof version ") {
		t.Errorf("--version: %v\n%s", err, out)
	}
	out, err = runBin(t, nil, "run", "-q", "--cupti", "off", "--cpu-hz", "0", "-o", filepath.Join(t.TempDir(), "o"),
		"sh", "-c", "echo args: $0 $1", "--interval", "-x")
	if err != nil || !strings.Contains(out, "args: --interval -x") {
		t.Errorf("run without --: %v\n%s", err, out)
	}
	out, err = runBin(t, nil, "run", "-q", "--cupti", "off", "--cpu-hz", "0", "-o", filepath.Join(t.TempDir(), "o"),
		"--", "sh", "-c", "kill -SEGV $$")
	var ee *exec.ExitError
	if !errorsAs(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGSEGV) || !strings.Contains(out, "sh was killed by signal SIGSEGV") {
		t.Errorf("a command killed by SIGSEGV: %v\n%s", err, out)
	}
}
