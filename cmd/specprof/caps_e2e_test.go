package main

import (
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
