package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/specprof/specprof/internal/testenv"
)

// specprof's capabilities deployment: a user given CAP_BPF, CAP_PERFMON,
// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH as ambient capabilities (systemd's
// AmbientCapabilities=, deploy/README.md). The target must start with none
// of them: they would let it read any file and trace any process.

var specprofCaps = []uintptr{unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH}

// capsTarget prints its capability sets and whether it could read
// /etc/shadow (root-only).
const capsTarget = `grep '^Cap' /proc/self/status; if head -c1 /etc/shadow >/dev/null 2>&1; then echo shadow-readable; fi`

var capLine = regexp.MustCompile(`(?m)^(CapInh|CapPrm|CapEff|CapAmb):\s*([0-9a-f]+)$`)

// capSets reads the capability sets capsTarget printed.
func capSets(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, s := range capLine.FindAllStringSubmatch(out, -1) {
		m[s[1]] = s[2]
	}
	if len(m) != 4 {
		t.Fatalf("the target printed %d of its 4 capability sets:\n%s", len(m), out)
	}
	return m
}

func TestRunTargetGetsNoCapabilities(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, AmbientCaps: specprofCaps}
	dir, err := os.MkdirTemp("", "specprof-caps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}

	// The deployment as the test sets it up: a process of that user holds the
	// capabilities and hands them on to what it execs.
	ctl := exec.Command("sh", "-c", capsTarget)
	ctl.SysProcAttr, ctl.Dir = nobody, dir
	out, err := ctl.CombinedOutput()
	if err != nil {
		t.Fatalf("control: %v\n%s", err, out)
	}
	if c := capSets(t, string(out)); c["CapAmb"] == "0000000000000000" || !strings.Contains(string(out), "shadow-readable") {
		t.Fatalf("control: the user's processes do not inherit the capabilities, so the test proves nothing:\n%s", out)
	}

	for _, mode := range []struct{ name, spec string }{{"log", "log"}, {"no log", "off"}} {
		t.Run("user with capabilities/"+mode.name, func(t *testing.T) {
			cmd := exec.Command(specprofBin(t), "run", "-q", "--interval", "0", "--cupti", "off", "--spec-metrics", mode.spec,
				"-o", filepath.Join(dir, strings.ReplaceAll(mode.name, " ", "-")), "--", "sh", "-c", capsTarget)
			cmd.SysProcAttr, cmd.Dir = nobody, dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("specprof run as uid 65534 with %v: %v\n%s", specprofCaps, err, out)
			}
			for set, v := range capSets(t, string(out)) {
				if strings.Trim(v, "0") != "" {
					t.Errorf("target %s %s, want none of specprof's capabilities", set, v)
				}
			}
			if strings.Contains(string(out), "shadow-readable") {
				t.Errorf("the target read /etc/shadow")
			}
		})
	}

	// Under root the target is root, as it would be started by root without
	// specprof; it must still start.
	t.Run("root", func(t *testing.T) {
		out, err := runBin(t, nil, "run", "-q", "--interval", "0", "--cupti", "off", "-o", t.TempDir(), "--", "sh", "-c", capsTarget)
		if err != nil {
			t.Fatalf("specprof run as root: %v\n%s", err, out)
		}
		if c := capSets(t, out); c["CapEff"] == "0000000000000000" {
			t.Errorf("target of root-run specprof has no effective capability:\n%s", out)
		}
	})
}

// TestRunWithCapabilitiesOnly: the demo under a non-root user that holds
// exactly the four capabilities profiles the workload as root does: every
// cycle, GPU records from the (mock) CUPTI library through a socket the
// user may create, and no warning about missing capabilities.
func TestRunWithCapabilitiesOnly(t *testing.T) {
	injLib, mockCupti, std, bin, root := standins(t)
	const python = "/usr/bin/python3.11" // pyenv's live under /root, which the user cannot read
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s: %v (Debian's python3.11 is one of the test interpreters)", python, err)
	}
	dir, err := os.MkdirTemp("", "specprof-capsdemo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// What the user runs, copied where it may read it: a checkout under
	// /root (CI's) is not readable by other users.
	cp := exec.Command("sh", "-c", `set -e; mkdir -p "$1/lib" "$1/workloads"; cp "$2" "$3" "$4" "$1/"; cp -a "$5"/. "$1/lib/"; cp -a "$6"/. "$1/workloads/"; chmod -R a+rX "$1"`,
		"sh", dir, bin, injLib, mockCupti, std, filepath.Join(root, "testdata/workloads"))
	if o, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("copy the binaries and the workload: %v\n%s", err, o)
	}
	bin, injLib, mockCupti, std = filepath.Join(dir, filepath.Base(bin)), filepath.Join(dir, filepath.Base(injLib)), filepath.Join(dir, filepath.Base(mockCupti)), filepath.Join(dir, "lib")
	workload := filepath.Join(dir, "workloads", "sglang_demo.py")
	const cycles = 30
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bin, "run", "--interval", "0", "--cupti", "on", "--cupti-lib", injLib, "-o", out, "--",
		python, workload, "--cycles", fmt.Sprint(cycles), "--mode", "graph",
		"--proctitle", "sglang::scheduler_TP0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, AmbientCaps: specprofCaps}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_CUPTI_LIB="+mockCupti, "HOME="+dir, "TMPDIR="+dir, "XDG_RUNTIME_DIR=")
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("specprof run as uid 65534 with %v: %v\n%s", specprofCaps, err, res)
	}
	if strings.Contains(string(res), "missing CAP_") || strings.Contains(string(res), "not running as root") {
		t.Errorf("warned about capabilities it holds:\n%s", res)
	}
	rep := readReport(t, out)
	if len(rep.Processes) != 1 {
		t.Fatalf("%d processes in the report, want 1:\n%s", len(rep.Processes), res)
	}
	p := rep.Processes[0]
	cyc := 0
	for _, th := range p.Threads {
		cyc += th.Cycles
	}
	if cyc != cycles {
		t.Errorf("%d cycles, the workload ran %d:\n%s", cyc, cycles, res)
	}
	if p.GPU == nil || p.GPU.Kernels == 0 {
		t.Errorf("no GPU records from the CUPTI library:\n%s", res)
	}
}
