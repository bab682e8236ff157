package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Interpreter is a CPython the tests run workloads under.
type Interpreter struct {
	Name string // e.g. "pyenv-3.12.1"
	Path string
}

// expectedInterpreters are on the CI machine image (see the reference
// notes on the build machines); tests run against each one present.
var expectedInterpreters = []Interpreter{
	{"pyenv-3.10.13", "/root/.pyenv/versions/3.10.13/bin/python3"},
	{"pyenv-3.11.7", "/root/.pyenv/versions/3.11.7/bin/python3"},
	{"pyenv-3.12.1", "/root/.pyenv/versions/3.12.1/bin/python3"},
	{"pyenv-3.13.0", "/root/.pyenv/versions/3.13.0/bin/python3"},
	{"debian-3.11", "/usr/bin/python3.11"},
}

// Interpreters returns the expected interpreters found on this machine.
// An absent one is skipped, except with CI=true where the image must have
// them all.
func Interpreters(t testing.TB) []Interpreter {
	t.Helper()
	var out []Interpreter
	for _, in := range expectedInterpreters {
		if _, err := os.Stat(in.Path); err != nil {
			if os.Getenv("CI") == "true" {
				t.Errorf("interpreter %s missing at %s (the CI machine image should have it)", in.Name, in.Path)
			} else {
				t.Logf("interpreter %s not found at %s: skipped", in.Name, in.Path)
			}
			continue
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		t.Fatal("no Python interpreter found")
	}
	return out
}

// RequireRoot skips a test that needs root, or fails it under CI=true,
// where a privileged test must never be skipped silently.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root (eBPF); CI runs as root, so this is a setup error")
	}
	t.Skip("needs root (eBPF)")
}

// GoBuild builds a package of this module into dir and returns the binary.
func GoBuild(t testing.TB, pkg, dir string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := dir + "/" + "bin"
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
