package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	injOnce   sync.Once
	injLib    string
	injMock   string
	injErr    error
	injStands string
)

// BuildInjection builds build/libspecprof_cupti.so and the mock CUPTI
// (build/standin/libcupti.so.13, driven by the stand-in libcuda) once per
// test binary and returns (injection library, mock libcupti, stand-in dir).
func BuildInjection(t testing.TB) (lib, mock, standins string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatal("gcc not found: the injection library and the mock CUPTI are built with it")
	}
	standins = BuildStandins(t)
	injOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			injErr = err
			return
		}
		// Same lock as BuildStandins: test binaries build into build/ concurrently.
		lock, err := os.OpenFile(filepath.Join(standins, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			injErr = err
			return
		}
		defer lock.Close()
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			injErr = fmt.Errorf("locking %s: %w", lock.Name(), err)
			return
		}
		defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		for _, args := range [][]string{
			{"-s", "-C", filepath.Join(root, "cupti", "lib"), "OUT=" + filepath.Join(root, "build")},
			{"-s", "-C", filepath.Join(root, "testdata", "mockcupti"), "OUT=" + standins},
		} {
			if out, err := exec.Command("make", args...).CombinedOutput(); err != nil {
				injErr = fmt.Errorf("make %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
		injLib = filepath.Join(root, "build", "libspecprof_cupti.so")
		injMock = filepath.Join(standins, "libcupti.so.13")
		injStands = standins
	})
	if injErr != nil {
		t.Fatalf("building the injection library and the mock CUPTI: %v", injErr)
	}
	return injLib, injMock, injStands
}
