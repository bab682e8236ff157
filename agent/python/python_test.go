package python

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/specprof/specprof/agent/proc"
)

// interpreters are the CPythons every live test runs against; with CI=true
// a missing one fails the test instead of skipping it.
var interpreters = []string{
	"/root/.pyenv/versions/3.10.13/bin/python3",
	"/root/.pyenv/versions/3.11.7/bin/python3",
	"/root/.pyenv/versions/3.12.1/bin/python3",
	"/root/.pyenv/versions/3.13.0/bin/python3",
	"/usr/bin/python3.11",
}

func needInterpreter(t *testing.T, path string, required bool) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if required && os.Getenv("CI") == "true" {
			t.Fatalf("interpreter %s missing on CI: %v", path, err)
		}
		t.Skipf("interpreter %s not present", path)
	}
}

func interpName(exe string) string {
	if v := filepath.Base(filepath.Dir(filepath.Dir(exe))); strings.HasPrefix(v, "3.") {
		return "pyenv-" + v
	}
	return strings.TrimPrefix(strings.ReplaceAll(exe, "/", "_"), "_")
}

// targetScript is the stand-in for a speculative-decoding worker: the main
// thread busy-waits in spin() under EAGLEWorker until stdin closes; a side
// thread sleeps under functions whose names need each PEP 393 kind
// (Latin-1, UCS-2, UCS-4).
const targetScript = `import sys, threading, select, time

def side_fünf():
    side_名前()

def side_名前():
    side_𠀀()

def side_𠀀():
    ready.set()
    while True:
        time.sleep(0.005)

ready = threading.Event()
side_tid = [0]

def side_main():
    side_tid[0] = threading.get_native_id()
    side_fünf()

def spin():
    print("ready", side_tid[0], "%d.%d.%d" % sys.version_info[:3], flush=True)
    n = 0
    while True:
        n += 1
        if n % 20000 == 0 and select.select([sys.stdin], [], [], 0)[0]:
            return

class EAGLEWorker:
    def forward_batch_generation(self):
        self.verify()

    def verify(self):
        spin()

t = threading.Thread(target=side_main, daemon=True)
t.start()
ready.wait()
EAGLEWorker().forward_batch_generation()
`

// lineOf returns the 1-based line of the first script line containing s.
func lineOf(t *testing.T, script, s string) int {
	t.Helper()
	for i, l := range strings.Split(script, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q not in script", s)
	return 0
}

// startChild runs exe with args and returns it once it has printed a line.
// Closing stdin (in cleanup) lets it exit.
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
			t.Fatalf("%s %v exited before reporting ready", exe, args)
		}
		return cmd, line
	case <-time.After(15 * time.Second):
		t.Fatalf("%s %v did not report ready", exe, args)
	}
	return nil, ""
}

type frameWant struct {
	qualname string
	first    int
	// lines the frame may be at; nil = any
	lines []int
}

func TestLiveInterpreters(t *testing.T) {
	script := filepath.Join(t.TempDir(), "target.py")
	if err := os.WriteFile(script, []byte(targetScript), 0o644); err != nil {
		t.Fatal(err)
	}
	var spinLines []int
	for l := lineOf(t, targetScript, "n = 0"); l <= lineOf(t, targetScript, "            return"); l++ {
		spinLines = append(spinLines, l)
	}
	mainWant := []frameWant{
		{"spin", lineOf(t, targetScript, "def spin"), spinLines},
		{"EAGLEWorker.verify", lineOf(t, targetScript, "def verify"), []int{lineOf(t, targetScript, "        spin()")}},
		{"EAGLEWorker.forward_batch_generation", lineOf(t, targetScript, "def forward_batch_generation"), []int{lineOf(t, targetScript, "self.verify()")}},
		{"<module>", 1, []int{lineOf(t, targetScript, "EAGLEWorker().forward_batch_generation()")}},
	}
	sideWant := []frameWant{
		{"side_𠀀", lineOf(t, targetScript, "def side_𠀀"), []int{lineOf(t, targetScript, "time.sleep(0.005)"), lineOf(t, targetScript, "time.sleep(0.005)") - 1}},
		{"side_名前", lineOf(t, targetScript, "def side_名前"), []int{lineOf(t, targetScript, "    side_𠀀()")}},
		{"side_fünf", lineOf(t, targetScript, "def side_fünf"), []int{lineOf(t, targetScript, "    side_名前()")}},
		{"side_main", lineOf(t, targetScript, "def side_main"), []int{lineOf(t, targetScript, "    side_fünf()")}},
	}

	// Sequential on purpose: each child spins a CPU.
	for _, exe := range interpreters {
		t.Run(interpName(exe), func(t *testing.T) {
			needInterpreter(t, exe, true)
			cmd, line := startChild(t, exe, script)
			pid := cmd.Process.Pid
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "ready" {
				t.Fatalf("child said %q", line)
			}
			sideTID, _ := strconv.Atoi(f[1])
			wantVersion := f[2]

			rt, err := Discover(pid)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if rt.Version.String() != wantVersion {
				t.Errorf("Version = %v, child is %s", rt.Version, wantVersion)
			}
			checkOffsetsSane(t, rt)
			if !rt.Module.Contains(rt.RuntimeAddr) {
				t.Errorf("_PyRuntime 0x%x is outside %s", rt.RuntimeAddr, rt.Module.Path)
			}
			if rt.CodeTypeAddr == 0 || !rt.Module.Contains(rt.CodeTypeAddr) {
				t.Errorf("PyCode_Type = 0x%x", rt.CodeTypeAddr)
			}
			if rt.Version.Minor >= 13 && !rt.OffsetsFromTarget {
				t.Error("3.13+ offsets did not come from the target's debug_offsets")
			}

			sym := NewSymbolizer(rt)
			py310 := rt.Version.Minor == 10
			checkStack(t, sym, pid, script, mainWant, py310, true)
			checkStack(t, sym, sideTID, script, sideWant, py310, false)

			states, err := sym.ThreadStates()
			if err != nil {
				t.Fatal(err)
			}
			tids := []int{}
			for _, s := range states {
				tids = append(tids, s.TID)
			}
			slices.Sort(tids)
			if !slices.Equal(tids, []int{min(pid, sideTID), max(pid, sideTID)}) {
				t.Errorf("ThreadStates tids = %v; want %d and %d", tids, pid, sideTID)
			}
			if _, err := sym.ThreadFrames(pid + 1_000_000); !errors.Is(err, ErrNoThreadState) {
				t.Errorf("ThreadFrames(unknown tid) error = %v; want ErrNoThreadState", err)
			}

			checkRejects(t, sym, rt)
			checkStrippedTypeFallback(t, rt)
		})
	}
}

func checkOffsetsSane(t *testing.T, rt *Runtime) {
	t.Helper()
	o := rt.Offsets
	table, err := TableOffsets(rt.Version)
	if err != nil {
		t.Fatal(err)
	}
	if o != table {
		t.Errorf("offsets differ from the table:\n got %+v\nwant %+v", o, table)
	}
	if o.InterpretersHead == 0 || o.InterpThreadsHead == 0 || o.TstateNext == 0 || o.TstateFrame == 0 ||
		o.FramePrevious == 0 || o.CodeFilename == 0 || o.CodeName == 0 || o.CodeFirstLineNo == 0 ||
		o.UnicodeASCIIData == 0 || o.UnicodeCompactData <= o.UnicodeASCIIData {
		t.Errorf("offsets not sane: %+v", o)
	}
	switch m := rt.Version.Minor; {
	case m == 10:
		if o.Flags != FlagPthreadTID|FlagFrameObject || o.TstateNativeThreadID != 0 || o.CodeQualname != 0 || o.PthreadTID != 0x2d0 {
			t.Errorf("3.10 offsets: %+v", o)
		}
	case m >= 11:
		if o.TstateNativeThreadID == 0 || o.CodeQualname == 0 || o.CodeAdaptive == 0 || o.Flags&(FlagPthreadTID|FlagFrameObject) != 0 {
			t.Errorf("3.%d offsets: %+v", m, o)
		}
		if (m == 11 || m == 12) != (o.Flags&FlagCFrame != 0) {
			t.Errorf("3.%d: FlagCFrame = %v", m, o.Flags&FlagCFrame != 0)
		}
		if (m >= 12) != (o.Flags&FlagSkipOwnerGE3 != 0) {
			t.Errorf("3.%d: FlagSkipOwnerGE3 = %v", m, o.Flags&FlagSkipOwnerGE3 != 0)
		}
	}
}

// checkStack walks tid until its innermost frames match want (the target is
// running, so a walk may be torn or catch the thread mid-call), then checks
// symbols and lines of the final walk.
func checkStack(t *testing.T, sym *Symbolizer, tid int, script string, want []frameWant, py310, exact bool) {
	t.Helper()
	var got []Code
	var refs []FrameRef
	var lastErr error
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		got, refs, err = symbolizeThread(sym, tid)
		if err == nil && stackMatches(got, want, py310, exact) && linesMatch(sym, got, refs, want) {
			break
		}
		lastErr = err
		time.Sleep(10 * time.Millisecond)
	}
	if !stackMatches(got, want, py310, exact) {
		t.Fatalf("thread %d: stack %v (last error %v); want %v", tid, qualnames(got), lastErr, want)
	}
	for i, c := range got {
		t.Logf("tid %d #%d %-40s %s:%d (code 0x%x)", tid, i, c.Qualname, filepath.Base(c.Filename), sym.Line(c, refs[i].Instr), c.Addr)
	}
	for i, w := range want {
		c := got[i]
		if c.Filename != script {
			t.Errorf("frame %d (%s): filename %q; want %q", i, c.Qualname, c.Filename, script)
		}
		if c.FirstLine != w.first {
			t.Errorf("frame %d (%s): first line %d; want %d", i, c.Qualname, c.FirstLine, w.first)
		}
		if line := sym.Line(c, refs[i].Instr); w.lines != nil && !slices.Contains(w.lines, line) {
			t.Errorf("frame %d (%s): line %d; want one of %v", i, c.Qualname, line, w.lines)
		}
	}
}

// linesMatch reports whether each frame is at an expected line; right after
// "ready" the main thread may still be returning from print().
func linesMatch(sym *Symbolizer, got []Code, refs []FrameRef, want []frameWant) bool {
	for i, w := range want {
		if w.lines != nil && !slices.Contains(w.lines, sym.Line(got[i], refs[i].Instr)) {
			return false
		}
	}
	return true
}

func symbolizeThread(sym *Symbolizer, tid int) ([]Code, []FrameRef, error) {
	refs, err := sym.ThreadFrames(tid)
	if err != nil {
		return nil, nil, err
	}
	codes := make([]Code, len(refs))
	for i, r := range refs {
		if codes[i], err = sym.Code(r.Code); err != nil {
			return nil, nil, err
		}
	}
	return codes, refs, nil
}

func stackMatches(got []Code, want []frameWant, py310, exact bool) bool {
	if len(got) < len(want) || (exact && len(got) != len(want)) {
		return false
	}
	for i, w := range want {
		name := w.qualname
		if py310 { // no co_qualname: the bare function name
			name = name[strings.LastIndexByte(name, '.')+1:]
		}
		if got[i].Qualname != name {
			return false
		}
	}
	return true
}

func qualnames(cs []Code) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Qualname)
	}
	return out
}

// checkRejects feeds the Symbolizer addresses that are not code objects.
func checkRejects(t *testing.T, sym *Symbolizer, rt *Runtime) {
	t.Helper()
	refs, err := sym.ThreadFrames(rt.PID)
	if err != nil || len(refs) == 0 {
		t.Fatalf("ThreadFrames: %v, %v", refs, err)
	}
	code := refs[0].Code
	// co_filename of a real code object: a live str object.
	b := make([]byte, 8)
	if err := proc.ReadMem(rt.PID, code+rt.Offsets.CodeFilename, b); err != nil {
		t.Fatal(err)
	}
	strObj := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	for _, addr := range []uint64{strObj, rt.RuntimeAddr, rt.CodeTypeAddr, 0, 8, code + 4} {
		c, err := sym.Code(addr)
		if err == nil {
			t.Errorf("Code(0x%x) = %+v; want an error", addr, c)
		}
	}
	if _, err := sym.Code(strObj); !errors.Is(err, ErrNotCode) {
		t.Errorf("Code(str object) error = %v; want ErrNotCode", err)
	}
	// Cache and Invalidate.
	if _, err := sym.Code(code); err != nil {
		t.Fatal(err)
	}
	n := sym.Len()
	sym.Invalidate(code)
	if sym.Len() != n-1 {
		t.Errorf("Invalidate: cache size %d -> %d", n, sym.Len())
	}
	if c, err := sym.Code(code); err != nil || c.Name != "spin" {
		t.Errorf("Code after Invalidate = %+v, %v", c, err)
	}
}

// checkStrippedTypeFallback symbolizes without PyCode_Type/PyUnicode_Type,
// as for a binary whose dynsym lacks them: the type is recognised by
// tp_name and learned.
func checkStrippedTypeFallback(t *testing.T, rt *Runtime) {
	t.Helper()
	stripped := *rt
	stripped.CodeTypeAddr, stripped.UnicodeTypeAddr = 0, 0
	sym := NewSymbolizer(&stripped)
	refs, err := sym.ThreadFrames(rt.PID)
	if err != nil || len(refs) == 0 {
		t.Fatalf("ThreadFrames: %v, %v", refs, err)
	}
	if c, err := sym.Code(refs[0].Code); err != nil || c.Name != "spin" {
		t.Fatalf("Code without PyCode_Type = %+v, %v", c, err)
	}
	if got := sym.codeType.Load(); got != rt.CodeTypeAddr {
		t.Errorf("learned code type 0x%x; want 0x%x", got, rt.CodeTypeAddr)
	}
	if _, err := sym.Code(rt.RuntimeAddr); !errors.Is(err, ErrNotCode) {
		t.Errorf("Code(_PyRuntime) error = %v; want ErrNotCode", err)
	}
}

func TestDiscoverNotPython(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	exe, err := proc.Exe(pid)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Discover(pid)
	want := fmt.Sprintf("pid %d is not a Python process: no _PyRuntime in %s or its libraries", pid, exe)
	if err == nil || err.Error() != want || !errors.Is(err, ErrNotPython) {
		t.Errorf("Discover(sleep) error = %v; want %q matching ErrNotPython", err, want)
	}
}

func TestDiscoverNoProcess(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b))) // pids are < pid_max
	_, err = Discover(pid)
	want := fmt.Sprintf("pid %d does not exist", pid)
	if err == nil || err.Error() != want || !errors.Is(err, ErrNoProcess) {
		t.Errorf("Discover(%d) error = %v; want %q matching ErrNoProcess", pid, err, want)
	}
}

func TestDiscoverUnsupported(t *testing.T) {
	const exe = "/root/.pyenv/versions/3.9.18/bin/python3"
	needInterpreter(t, exe, false)
	cmd, _ := startChild(t, exe, "-c", "import sys; print('ready', flush=True); sys.stdin.read()")
	_, err := Discover(cmd.Process.Pid)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "unsupported Python version 3.9.18: specprof supports CPython 3.10–3.14") {
		t.Errorf("Discover(3.9) error = %v", err)
	}
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Version != (Version{3, 9, 18}) {
		t.Errorf("Discover(3.9) error = %#v; want *UnsupportedError for 3.9.18", err)
	}
}

func TestVersion(t *testing.T) {
	v := VersionFromHex(0x030d00f0)
	if v != (Version{3, 13, 0}) || v.String() != "3.13.0" {
		t.Errorf("VersionFromHex(0x030d00f0) = %v", v)
	}
	if v := VersionFromHex(0x030a0df0); v != (Version{3, 10, 13}) {
		t.Errorf("VersionFromHex(0x030a0df0) = %v", v)
	}
	for _, tt := range []struct {
		v  Version
		ok bool
	}{
		{Version{3, 9, 18}, false}, {Version{3, 10, 0}, true}, {Version{3, 14, 2}, true},
		{Version{3, 15, 0}, false}, {Version{2, 7, 18}, false}, {Version{4, 10, 0}, false},
	} {
		err := tt.v.Supported()
		if (err == nil) != tt.ok {
			t.Errorf("%v.Supported() = %v", tt.v, err)
		}
		if err != nil && !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v.Supported() error does not match ErrUnsupported", tt.v)
		}
	}
	if got := (Version{3, 9, 18}).Supported().Error(); got != "unsupported Python version 3.9.18: specprof supports CPython 3.10–3.14" {
		t.Errorf("message = %q", got)
	}
	ft := &UnsupportedError{Version: Version{3, 13, 1}, FreeThreaded: true}
	if !strings.Contains(ft.Error(), "free-threaded") || !errors.Is(ft, ErrUnsupported) {
		t.Errorf("free-threaded error = %q", ft.Error())
	}
	if !(Version{3, 10, 13}).Less(Version{3, 11, 0}) || (Version{3, 12, 1}).Less(Version{3, 12, 1}) {
		t.Error("Less is wrong")
	}
	for name, want := range map[string]bool{
		"/usr/lib/libpython3.13t.so.1.0": true, "/usr/bin/python3.14t": true,
		"/usr/lib/libpython3.13.so.1.0": false, "/usr/bin/python3.12": false,
	} {
		if got := freeThreadedName(name); got != want {
			t.Errorf("freeThreadedName(%q) = %v", name, got)
		}
	}
	if _, err := TableOffsets(Version{3, 9, 0}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("TableOffsets(3.9) error = %v", err)
	}
}
