package python

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/specprof/specprof/agent/proc"
)

// debugBlob builds a _Py_DebugOffsets image from absolute byte positions,
// written out independently of debugLayouts so the test checks them.
func debugBlob(size int, version uint32, fields map[int]uint64) []byte {
	b := make([]byte, size)
	copy(b, debugCookie)
	binary.LittleEndian.PutUint64(b[8:], uint64(version))
	for off, v := range fields {
		binary.LittleEndian.PutUint64(b[off:], v)
	}
	return b
}

// Positions per reference/targets.md §4.3 and the v3.13/v3.14 headers,
// with the values of 3.13.0 (live) and 3.14.0 (bindings).
func debug313() []byte {
	return debugBlob(584, 0x030d00f0, map[int]uint64{
		24: 283320, 32: 608, 40: 632, // runtime_state size, finalizing, interpreters_head
		48: 194968, 56: 7272, 64: 7264, 72: 7344, // interpreter_state size, id, next, threads_head
		152: 304, 160: 0, 168: 8, 176: 16, 184: 72, 192: 152, 200: 160, // thread_state
		224: 80, 232: 8, 240: 0, 248: 56, 256: 72, 264: 70, // interpreter_frame
		272: 208, 280: 112, 288: 120, 296: 128, 304: 136, 312: 68, 344: 200, // code_object
		352: 16, 360: 8, // pyobject size, ob_type
		512: 33, 520: 16, 528: 32, // bytes_object size, ob_size, ob_sval
		536: 80, 544: 32, 552: 16, 560: 40, // unicode_object size, state, length, asciiobject_size
	})
}

func debug314() []byte {
	return debugBlob(760, 0x030e00f0, map[int]uint64{
		24: 300000, 32: 784, 40: 808,
		48: 200000, 56: 7280, 64: 7272, 72: 7344, 80: 7352,
		176: 320, 184: 0, 192: 8, 200: 16, 208: 72, 216: 152, 224: 160,
		248: 88, 256: 8, 264: 0, 272: 56, 280: 80, 288: 74,
		312: 224, 320: 112, 328: 120, 336: 128, 344: 136, 352: 68, 384: 208,
		400: 16, 408: 8,
		592: 33, 600: 16, 608: 32,
		616: 80, 624: 32, 632: 16, 640: 40,
	})
}

func TestOffsetsFromDebug(t *testing.T) {
	for _, tt := range []struct {
		minor int
		blob  []byte
	}{{13, debug313()}, {14, debug314()}} {
		table := tableOffsets[tt.minor]
		got, err := offsetsFromDebug(tt.minor, tt.blob, table)
		if err != nil {
			t.Fatalf("3.%d: %v", tt.minor, err)
		}
		if got != table {
			t.Errorf("3.%d: debug offsets differ from the table: %v\n got %+v\nwant %+v", tt.minor, diffOffsets(table, got), got, table)
		}
		h, ok := parseDebugHeader(tt.blob)
		if !ok || VersionFromHex(h.Version).Minor != tt.minor || h.FreeThreaded {
			t.Errorf("3.%d: header %+v, %v", tt.minor, h, ok)
		}
	}

	// A different value is taken from the blob and reported by diffOffsets.
	b := debug314()
	binary.LittleEndian.PutUint64(b[288:], 75) // interpreter_frame.owner
	got, err := offsetsFromDebug(14, b, tableOffsets[14])
	if err != nil || got.FrameOwner != 75 {
		t.Fatalf("owner 75: %+v, %v", got, err)
	}
	if d := diffOffsets(tableOffsets[14], got); len(d) != 1 || d[0] != (offsetDiff{"FrameOwner", 74, 75}) {
		t.Errorf("diffOffsets = %+v", d)
	}

	for name, mutate := range map[string]func([]byte){
		"bad cookie":           func(b []byte) { b[0] = 'X' },
		"owner outside frame":  func(b []byte) { binary.LittleEndian.PutUint64(b[288:], 4096) },
		"zero tstate size":     func(b []byte) { binary.LittleEndian.PutUint64(b[176:], 0) },
		"moved ob_type":        func(b []byte) { binary.LittleEndian.PutUint64(b[408:], 16) },
		"moved unicode length": func(b []byte) { binary.LittleEndian.PutUint64(b[632:], 24) },
		// A 16 MB code object made every code object read 16 MB.
		"huge code object": func(b []byte) {
			binary.LittleEndian.PutUint64(b[312:], 1<<24-8)
			binary.LittleEndian.PutUint64(b[320:], 1<<24-16) // filename
		},
		// A string header shorter than state made a short read panic.
		"string header without state": func(b []byte) { binary.LittleEndian.PutUint64(b[640:], 8) },
	} {
		b := debug314()
		mutate(b)
		if _, err := offsetsFromDebug(14, b, tableOffsets[14]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := offsetsFromDebug(14, debug313(), tableOffsets[14]); err == nil {
		t.Error("a 3.13-sized blob was accepted as 3.14")
	}
	if _, err := offsetsFromDebug(15, debug314(), tableOffsets[14]); err == nil {
		t.Error("3.15 layout accepted")
	}
	free := debug313()
	binary.LittleEndian.PutUint64(free[16:], 1)
	if h, ok := parseDebugHeader(free); !ok || !h.FreeThreaded {
		t.Errorf("free_threaded not detected: %+v", h)
	}
}

// lineDump makes the interpreter dump, for every code object compiled from
// a few stdlib modules, its line table and what co_lines() says about it:
// the ground truth the decoders must reproduce.
const lineDump = `
import importlib, json, sys, types
out = []
def walk(co):
    out.append({"t": co.co_linetable.hex(), "f": co.co_firstlineno, "n": len(co.co_code),
                "l": [[s, e, -1 if l is None else l] for s, e, l in co.co_lines()]})
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            walk(c)
for name in ["threading", "json.decoder", "argparse", "asyncio.base_events", "dataclasses"]:
    path = importlib.import_module(name).__file__
    walk(compile(open(path, encoding="utf-8").read(), path, "exec"))
json.dump(out, sys.stdout)
`

func TestLineTables(t *testing.T) {
	for _, exe := range interpreters {
		t.Run(interpName(exe), func(t *testing.T) {
			needInterpreter(t, exe, true)
			t.Parallel()
			out, err := exec.Command(exe, "-c", lineDump).Output()
			if err != nil {
				t.Fatal(err)
			}
			var codes []struct {
				T string
				F int
				N int
				L [][3]int
			}
			if err := json.Unmarshal(out, &codes); err != nil {
				t.Fatal(err)
			}
			py310 := strings.Contains(exe, "3.10")
			checked, bad := 0, 0
			for _, c := range codes {
				table, _ := hex.DecodeString(c.T)
				want := make([]int, c.N/2)
				for i := range want {
					want[i] = -1
				}
				for _, r := range c.L {
					for off := r[0]; off < r[1] && off < c.N; off += 2 {
						want[off/2] = r[2]
					}
				}
				for unit, w := range want {
					var got int
					if py310 {
						got = line310(table, c.F, unit*2)
					} else {
						got = line311(table, c.F, unit)
					}
					checked++
					if got != w {
						if bad++; bad <= 5 {
							t.Errorf("code at line %d, unit %d: line %d; co_lines says %d", c.F, unit, got, w)
						}
					}
				}
			}
			if checked < 10000 {
				t.Errorf("only %d instructions checked", checked)
			}
			t.Logf("%d code objects, %d instructions, %d mismatches", len(codes), checked, bad)
		})
	}
}

func TestLineEdgeCases(t *testing.T) {
	// 3.11+: one long-form entry (code 14) of 2 units moving 300 lines
	// down, then a no-location entry (code 15) of 1 unit.
	long := []byte{0x80 | 14<<3 | 1, 0x58 | 0x40, 0x09, 0, 0, 0, 0x80 | 15<<3}
	if got := line311(long, 10, 0); got != 310 {
		t.Errorf("long form: %d; want 310", got)
	}
	if got := line311(long, 10, 1); got != 310 {
		t.Errorf("long form 2nd unit: %d; want 310", got)
	}
	if got := line311(long, 10, 2); got != -1 {
		t.Errorf("no-location entry: %d; want -1", got)
	}
	if got := line311(long, 10, 3); got != -1 {
		t.Errorf("past the end: %d; want -1", got)
	}
	if got := line311([]byte{0x01}, 10, 0); got != -1 {
		t.Errorf("corrupt table: %d; want -1", got)
	}
	// 3.10: +2 lines over 4 bytes, then a no-line range, then -1 line.
	t310 := []byte{4, 2, 2, 0x80, 2, 0xff}
	for addr, want := range map[int]int{0: 12, 2: 12, 4: -1, 6: 11, 8: -1} {
		if got := line310(t310, 10, addr); got != want {
			t.Errorf("line310 addr %d: %d; want %d", addr, got, want)
		}
	}
}

func TestStrippedFallbacks(t *testing.T) {
	const exe = "/usr/bin/python3.11"
	needInterpreter(t, exe, true)
	syms, err := proc.Symbols(exe, symRuntime)
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := sectionAddr(exe, runtimeSection)
	if !ok || addr != syms[symRuntime].Value {
		t.Errorf(".PyRuntime section at 0x%x (%v); _PyRuntime symbol at 0x%x", addr, ok, syms[symRuntime].Value)
	}
	if _, ok := sectionAddr(exe, ".no_such_section"); ok {
		t.Error("found a section that does not exist")
	}
}

func TestVersionFromFile(t *testing.T) {
	const lib = "/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0"
	needInterpreter(t, lib, true)
	v, err := versionFromFile(proc.Module{Path: lib, HostPath: lib})
	if err != nil || v != (Version{3, 10, 13}) {
		t.Errorf("versionFromFile(%s) = %v, %v", lib, v, err)
	}
	// Without a name hint only a ≤3.10 string is taken.
	v, err = versionFromFile(proc.Module{Path: "/opt/embedded", HostPath: lib})
	if err != nil || v != (Version{3, 10, 13}) {
		t.Errorf("versionFromFile(unnamed) = %v, %v", v, err)
	}
}
