package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// RepoRoot returns the repository root: the closest directory at or above the working
// directory that holds go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if st, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !st.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// StandinSourceDir returns testdata/standin: the stand-ins' sources and the headers cuda.h,
// nccl.h and simgpu.h.
func StandinSourceDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testdata", "standin"), nil
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// BuildStandins builds libcuda.so.1, libcudart.so.13 and libnccl.so.2 (and the .so links) into build/standin
// under the repository root, once per test binary, and returns that directory. Concurrent test
// binaries serialize on a lock file there; make rebuilds only what changed. It fails the test
// when the build fails.
func BuildStandins(t testing.TB) (dir string) {
	t.Helper()
	buildOnce.Do(func() { buildDir, buildErr = buildStandins() })
	if buildErr != nil {
		t.Fatalf("building the CUDA/NCCL stand-ins: %v", buildErr)
	}
	return buildDir
}

func buildStandins() (string, error) {
	src, err := StandinSourceDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(filepath.Dir(filepath.Dir(src)), "build", "standin")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(out, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	cmd := exec.Command("make", "-s", "-C", src, "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	for _, name := range []string{"libcuda.so.1", "libcudart.so.13", "libnccl.so.2"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			return "", err
		}
	}
	return out, nil
}

// SimEnv returns the current environment with dir (from BuildStandins) put first on
// LD_LIBRARY_PATH, followed by extra "KEY=value" entries (which override earlier ones), for
// starting a workload against the stand-ins.
func SimEnv(dir string, extra ...string) []string {
	env := os.Environ()
	ld := dir
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		ld += ":" + old
	}
	env = append(env, "LD_LIBRARY_PATH="+ld)
	env = append(env, extra...)
	// Keep the last value of each key, preserving order.
	seen := make(map[string]bool, len(env))
	outRev := make([]string, 0, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		k, _, _ := strings.Cut(env[i], "=")
		if seen[k] {
			continue
		}
		seen[k] = true
		outRev = append(outRev, env[i])
	}
	out := make([]string, len(outRev))
	for i, kv := range outRev {
		out[len(outRev)-1-i] = kv
	}
	return out
}

// CompileC compiles a C program or library with gcc against the stand-in headers, linked with
// the stand-ins in dir (from BuildStandins; -lcuda -lnccl, with dir as run path). args holds the
// sources and any extra flags ("-shared", "-fPIC" for a library). It fails the test on error.
func CompileC(t testing.TB, dir, out string, args ...string) {
	t.Helper()
	src, err := StandinSourceDir()
	if err != nil {
		t.Fatal(err)
	}
	full := []string{"-O1", "-g", "-Wall", "-pthread", "-I" + src, "-o", out}
	full = append(full, args...)
	full = append(full, "-L"+dir, "-Wl,-rpath,"+dir, "-lcuda", "-lnccl", "-ldl")
	cmd := exec.Command("gcc", full...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(full, " "), err, b)
	}
}
