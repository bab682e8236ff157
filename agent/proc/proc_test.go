package proc

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestParseMapsLine(t *testing.T) {
	tests := []struct {
		line string
		want Mapping
	}{
		{
			"55d0d2538000-55d0d2567000 r--p 00000000 fd:01 1311273                    /usr/bin/bash",
			Mapping{Start: 0x55d0d2538000, End: 0x55d0d2567000, Perms: "r--p", Dev: "fd:01", Inode: 1311273, Path: "/usr/bin/bash"},
		},
		{
			"7f0000001000-7f0000002000 r-xp 00001000 08:02 42     /tmp/my lib/libx.so (deleted)",
			Mapping{Start: 0x7f0000001000, End: 0x7f0000002000, Perms: "r-xp", Offset: 0x1000, Dev: "08:02", Inode: 42, Path: "/tmp/my lib/libx.so", Deleted: true},
		},
		{
			"7ffd1c5f0000-7ffd1c5f2000 r-xp 00000000 00:00 0                          [vdso]",
			Mapping{Start: 0x7ffd1c5f0000, End: 0x7ffd1c5f2000, Perms: "r-xp", Dev: "00:00", Path: "[vdso]"},
		},
		{
			"7f5b6d000000-7f5b6d021000 rw-p 00000000 00:00 0 ",
			Mapping{Start: 0x7f5b6d000000, End: 0x7f5b6d021000, Perms: "rw-p", Dev: "00:00"},
		},
		{
			"7f5b6d000000-7f5b6d021000 rw-p 00000000 00:00 0",
			Mapping{Start: 0x7f5b6d000000, End: 0x7f5b6d021000, Perms: "rw-p", Dev: "00:00"},
		},
	}
	for _, tt := range tests {
		got, err := parseMapsLine(tt.line)
		if err != nil {
			t.Errorf("parseMapsLine(%q): %v", tt.line, err)
			continue
		}
		if got != tt.want {
			t.Errorf("parseMapsLine(%q) = %+v, want %+v", tt.line, got, tt.want)
		}
	}
	for _, bad := range []string{"garbage", "010-0 0 0 0 0", "1000-1000 r--p 00000000 00:00 0"} {
		if _, err := parseMapsLine(bad); err == nil {
			t.Errorf("parseMapsLine(%q) succeeded", bad)
		}
	}
	vdso, _ := parseMapsLine(tests[2].line)
	if !vdso.Pseudo() || vdso.FileBacked() || !vdso.Executable() {
		t.Errorf("vdso classification wrong: %+v", vdso)
	}
	anon, _ := parseMapsLine(tests[3].line)
	if !anon.Anonymous() || anon.FileBacked() || anon.Executable() || !anon.Readable() {
		t.Errorf("anon classification wrong: %+v", anon)
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		path           string
		cuda, nccl, py bool
	}{
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", true, false, false},
		{"/usr/lib64/libcuda.so", true, false, false},
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", true, false, false},
		{"/usr/local/cuda/lib64/libcudart.so.12", false, false, false},
		{"/usr/lib/libcuda.so.1.bak", false, false, false},
		{"/site-packages/nvidia/nccl/lib/libnccl.so.2", false, true, false},
		{"/opt/libnccl.so", false, true, false},
		{"/opt/libnccl-net.so", false, false, false},
		{"/usr/lib/libpython3.10.so.1.0", false, false, true},
		{"/usr/lib/libpython3.13t.so.1.0", false, false, true},
		{"/usr/lib/libpython3.so", false, false, false},
		{"/usr/lib/libpython2.7.so.1.0", false, false, false},
	} {
		if got := IsCUDADriver(tt.path); got != tt.cuda {
			t.Errorf("IsCUDADriver(%q) = %v", tt.path, got)
		}
		if got := IsNCCL(tt.path); got != tt.nccl {
			t.Errorf("IsNCCL(%q) = %v", tt.path, got)
		}
		if got := IsLibPython(tt.path); got != tt.py {
			t.Errorf("IsLibPython(%q) = %v", tt.path, got)
		}
	}
}

func TestSelf(t *testing.T) {
	pid := os.Getpid()
	if !Exists(pid) {
		t.Fatal("Exists(self) = false")
	}
	tids, err := Threads(pid)
	if err != nil || !slices.Contains(tids, pid) {
		t.Fatalf("Threads(self) = %v, %v; want to contain %d", tids, err, pid)
	}
	args, err := Args(pid)
	if err != nil || !slices.Equal(args, os.Args) {
		t.Errorf("Args(self) = %q, %v; want %q", args, err, os.Args)
	}
	if cl, err := Cmdline(pid); err != nil || cl != strings.Join(os.Args, " ") {
		t.Errorf("Cmdline(self) = %q, %v", cl, err)
	}
	exe, err := Exe(pid)
	want, _ := os.Executable()
	if err != nil || exe != want {
		t.Errorf("Exe(self) = %q, %v; want %q", exe, err, want)
	}
	if comm, err := Comm(pid); err != nil || comm == "" || !strings.HasPrefix(filepath.Base(want), comm) {
		t.Errorf("Comm(self) = %q, %v", comm, err)
	}
	maps, err := ReadMaps(pid)
	if err != nil || len(maps) == 0 {
		t.Fatalf("ReadMaps(self) = %d mappings, %v", len(maps), err)
	}
	if !slices.ContainsFunc(maps, func(m Mapping) bool { return m.Path == "[stack]" }) {
		t.Error("no [stack] mapping in own maps")
	}
}

func TestReadMemSelf(t *testing.T) {
	src := []byte("specprof reads memory \x00\x01\x02\xff")
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(src))))
	defer runtime.KeepAlive(src)
	got := make([]byte, len(src))
	if err := ReadMem(os.Getpid(), addr, got); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("ReadMem = %q, %v; want %q", got, err, src)
	}
	clear(got)
	if err := readMemFile(os.Getpid(), addr, got); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("readMemFile = %q, %v; want %q", got, err, src)
	}
	if err := ReadMem(os.Getpid(), 8, got); err == nil {
		t.Error("ReadMem at an unmapped address succeeded")
	}
	if err := readMemFile(os.Getpid(), 8, got); err == nil {
		t.Error("readMemFile at an unmapped address succeeded")
	}
}

func TestNonexistentPID(t *testing.T) {
	pid := unusedPID(t)
	if Exists(pid) {
		t.Fatalf("Exists(%d) = true", pid)
	}
	_, err := ReadMaps(pid)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadMaps(%d) error = %v; want ErrNotExist", pid, err)
	}
	if !strings.Contains(err.Error(), "read maps of pid "+strconv.Itoa(pid)) {
		t.Errorf("error does not name the action: %v", err)
	}
	if err := ReadMem(pid, 0x1000, make([]byte, 8)); err == nil || !Gone(err) {
		t.Errorf("ReadMem on a nonexistent pid: %v; want an error that Gone recognises", err)
	}
	if err := ReadMem(os.Getpid(), 8, make([]byte, 8)); err == nil || Gone(err) {
		t.Errorf("ReadMem of an unmapped address: %v; want an error that is not Gone", err)
	}
}

// unusedPID returns kernel.pid_max, which is never allocated (pids are
// below it).
func unusedPID(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// interpreters are the CPythons the tests use; with CI=true a missing one is
// a failure, since CI images are expected to have all of them.
var interpreters = []string{
	"/root/.pyenv/versions/3.10.13/bin/python3",
	"/root/.pyenv/versions/3.11.7/bin/python3",
	"/root/.pyenv/versions/3.12.1/bin/python3",
	"/root/.pyenv/versions/3.13.0/bin/python3",
	"/usr/bin/python3.11",
}

func needInterpreter(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("interpreter %s missing on CI: %v", path, err)
		}
		t.Skipf("interpreter %s not present", path)
	}
}

// startChild starts exe with args, waits for its first stdout line and
// returns the process and that line. Closing stdin (done in cleanup) ends
// the child.
func startChild(t *testing.T, exe string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-lines:
		if line == "" {
			t.Fatalf("%s exited before reporting ready", exe)
		}
		return cmd, line
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not report ready", exe)
	}
	return nil, ""
}

// checkSymbolBytes compares the first bytes of a symbol in the target's
// memory with the same bytes in the file: equal only if Base is right.
// Symbols in read-only segments (code, .rodata) are not relocated.
func checkSymbolBytes(t *testing.T, pid int, mod Module, name string) bool {
	t.Helper()
	syms, err := Symbols(mod.HostPath, name)
	if err != nil {
		t.Fatalf("Symbols(%s, %s): %v", mod.HostPath, name, err)
	}
	sym, ok := syms[name]
	if !ok {
		return false
	}
	f, err := elf.Open(mod.HostPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Sections[sym.Section]
	n := min(sym.Size, 16)
	if n == 0 {
		n = 16
	}
	want := make([]byte, n)
	if _, err := sec.ReadAt(want, int64(sym.Value-sec.Addr)); err != nil {
		t.Fatalf("read %s from %s: %v", name, mod.HostPath, err)
	}
	got := make([]byte, n)
	if err := ReadMem(pid, sym.Value+mod.Base, got); err != nil {
		t.Fatalf("ReadMem(%s at 0x%x): %v", name, sym.Value+mod.Base, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s in %s: memory at base 0x%x + 0x%x = %x, file has %x", name, mod.Path, mod.Base, sym.Value, got, want)
	}
	return true
}

const childScript = `import sys; print(sys.hexversion, flush=True); sys.stdin.read()`

func TestModulesLoadBias(t *testing.T) {
	for _, exe := range interpreters {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(exe)))+"_"+filepath.Base(exe), func(t *testing.T) {
			needInterpreter(t, exe)
			t.Parallel()
			cmd, line := startChild(t, exe, "-c", childScript)
			pid := cmd.Process.Pid
			hexversion, err := strconv.ParseUint(line, 10, 32)
			if err != nil {
				t.Fatalf("child said %q", line)
			}
			mods, err := Modules(pid)
			if err != nil {
				t.Fatal(err)
			}
			exePath, err := Exe(pid)
			if err != nil {
				t.Fatal(err)
			}
			var exeMod, pyMod *Module
			for i := range mods {
				m := &mods[i]
				if m.Path == exePath {
					exeMod = m
				}
				syms, err := Symbols(m.HostPath, "_PyRuntime")
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := syms["_PyRuntime"]; ok {
					pyMod = m
				}
			}
			if exeMod == nil || pyMod == nil {
				t.Fatalf("exe module %v, _PyRuntime module %v among %d modules", exeMod, pyMod, len(mods))
			}
			if !strings.HasPrefix(exeMod.HostPath, "/proc/"+strconv.Itoa(pid)+"/root/") {
				t.Errorf("HostPath = %q", exeMod.HostPath)
			}
			// Code in the executable (PIE for pyenv, non-PIE for Debian).
			if !checkSymbolBytes(t, pid, *exeMod, "main") && !checkSymbolBytes(t, pid, *exeMod, "Py_BytesMain") {
				t.Errorf("no main or Py_BytesMain in %s", exeMod.Path)
			}
			// Code and read-only data where the interpreter lives.
			if !checkSymbolBytes(t, pid, *pyMod, "Py_GetVersion") {
				t.Errorf("no Py_GetVersion in %s", pyMod.Path)
			}
			if hexversion >= 0x030b0000 {
				syms, _ := Symbols(pyMod.HostPath, "Py_Version")
				v, ok := syms["Py_Version"]
				if !ok {
					t.Fatalf("no Py_Version in %s", pyMod.Path)
				}
				buf := make([]byte, 4)
				if err := ReadMem(pid, v.Value+pyMod.Base, buf); err != nil {
					t.Fatal(err)
				}
				if got := binary.LittleEndian.Uint32(buf); uint64(got) != hexversion {
					t.Errorf("Py_Version in memory = 0x%x, sys.hexversion = 0x%x", got, hexversion)
				}
			}
			m, err := FindModule(pid, IsLibPython)
			switch {
			case pyMod != exeMod && (err != nil || m.Path != pyMod.Path):
				t.Errorf("FindModule(IsLibPython) = %v, %v; want %s", m.Path, err, pyMod.Path)
			case pyMod == exeMod && !errors.Is(err, ErrNoModule):
				t.Errorf("FindModule(IsLibPython) in a static python = %v, %v; want ErrNoModule", m.Path, err)
			}
			if !exeMod.Contains(exeMod.Mappings[0].Start) || exeMod.Contains(0) {
				t.Error("Module.Contains is wrong")
			}
		})
	}
}

func TestModulesDeletedExecutable(t *testing.T) {
	const src = "/usr/bin/python3.11"
	needInterpreter(t, src)
	dir := t.TempDir()
	exe := filepath.Join(dir, "python3.11")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, _ := startChild(t, exe, "-c", childScript)
	pid := cmd.Process.Pid
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	m, err := FindModule(pid, func(p string) bool { return p == exe })
	if err != nil {
		t.Fatal(err)
	}
	if !m.Deleted {
		t.Errorf("module %s not marked deleted", m.Path)
	}
	if _, err := os.Stat(m.HostPath); err != nil {
		t.Skipf("deleted file not reachable (needs CAP_SYS_ADMIN for map_files): %v", err)
	}
	if !strings.Contains(m.HostPath, "/map_files/") {
		t.Errorf("HostPath of a deleted file = %q; want a map_files path", m.HostPath)
	}
	if !checkSymbolBytes(t, pid, m, "Py_GetVersion") {
		t.Error("no Py_GetVersion in deleted copy")
	}
	if got, err := Exe(pid); err != nil || got != exe {
		t.Errorf("Exe = %q, %v; want %q", got, err, exe)
	}
}

func TestSymbolsCache(t *testing.T) {
	const lib = "/usr/bin/python3.11"
	needInterpreter(t, lib)
	a, err := Symbols(lib, "_PyRuntime", "no_such_symbol_xyz")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a["no_such_symbol_xyz"]; ok || len(a) != 1 {
		t.Fatalf("Symbols = %v", a)
	}
	b, err := Symbols(lib, "_PyRuntime")
	if err != nil || b["_PyRuntime"].Value != a["_PyRuntime"].Value {
		t.Fatalf("cached lookup differs: %v %v", b, err)
	}
	if _, err := Symbols(filepath.Join(t.TempDir(), "missing.so"), "x"); err == nil {
		t.Error("Symbols on a missing file succeeded")
	}
}
