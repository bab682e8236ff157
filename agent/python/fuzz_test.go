package python

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"unicode/utf8"
)

// Bounds on what reading one target may cost, however its memory reads.
const (
	maxFuzzRead  = maxLinetableBytes // the largest object read at once
	maxFuzzTotal = 64 << 20          // all reads of one fuzz input
)

// fuzzImage is the fuzz input of FuzzFrameWalk: a selector byte (minor
// version, wrapping, known type addresses, debug offsets), PyCode_Type
// and PyUnicode_Type, then the memory at imageBase.
func fuzzImage(c walkCase, sel byte) []byte {
	b := []byte{sel}
	b = binary.LittleEndian.AppendUint64(b, c.rt.CodeTypeAddr)
	b = binary.LittleEndian.AppendUint64(b, c.rt.UnicodeTypeAddr)
	return append(b, c.im.mem...)
}

// FuzzFrameWalk walks arbitrary target memory: the images of
// TestWalkImage, mutated. Whatever the memory holds, listing threads,
// walking a stack, naming its code objects and finding their lines
// terminate within the list bounds, read no object larger than the
// symbolizer's limits, and give valid UTF-8 names. On 3.13+ the offsets may
// come from the image's own _Py_DebugOffsets, as Discover takes them.
func FuzzFrameWalk(f *testing.F) {
	for minor := 10; minor <= 14; minor++ {
		for _, known := range []bool{true, false} {
			sel := byte(minor - 10)
			if known {
				sel |= 0x20
			}
			c := buildImage(minor, known)
			f.Add(fuzzImage(c, sel))
			if minor >= 13 {
				f.Add(fuzzImage(c, sel|0x40))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 17 {
			return
		}
		sel := data[0]
		minor := 10 + int(sel&7)%5
		im := &image{mem: data[17:], wrap: sel&0x10 != 0}
		rt := &Runtime{PID: -1, Version: Version{3, minor, 0}, RuntimeAddr: imageBase, Offsets: tableOffsets[minor]}
		if sel&0x20 != 0 {
			rt.CodeTypeAddr, rt.UnicodeTypeAddr = binary.LittleEndian.Uint64(data[1:]), binary.LittleEndian.Uint64(data[9:])
		}
		if sel&0x40 != 0 && minor >= 13 {
			if o, err := offsetsFromDebug(minor, im.mem, rt.Offsets); err == nil {
				rt.Offsets = o
			}
		}
		s := newImageSymbolizer(rt, im)
		ts, err := s.ThreadStates()
		if len(ts) > maxThreads || err != nil && len(ts) > 0 {
			t.Fatalf("%d thread states, %v", len(ts), err)
		}
		for _, st := range ts[:min(len(ts), 4)] {
			frames, err := s.ThreadFrames(st.TID)
			if len(frames) > maxFrames || err != nil && len(frames) > 0 {
				t.Fatalf("%d frames, %v", len(frames), err)
			}
			for _, fr := range frames[:min(len(frames), 16)] {
				if fr.Code == 0 || rt.Offsets.Flags&FlagTaggedExecutable != 0 && fr.Code&3 != 0 {
					t.Fatalf("frame %+v", fr)
				}
				code, err := s.Code(fr.Code)
				if err != nil {
					continue
				}
				for _, str := range []string{code.Qualname, code.Name, code.Filename} {
					if !utf8.ValidString(str) || len(str) > 2*maxStringBytes {
						t.Fatalf("name of %d bytes, valid UTF-8 %v", len(str), utf8.ValidString(str))
					}
				}
				if code.Addr != fr.Code || len(code.linetable) > maxLinetableBytes {
					t.Fatalf("code %#x for frame %+v, line table of %d bytes", code.Addr, fr, len(code.linetable))
				}
				_ = s.Line(code, fr.Instr)
			}
		}
		if im.maxRead > maxFuzzRead || im.total > maxFuzzTotal {
			t.Fatalf("read %d bytes at once, %d in all", im.maxRead, im.total)
		}
	})
}

// FuzzOffsetsFromDebug parses arbitrary _Py_DebugOffsets blobs. A blob is
// refused, or gives offsets a Symbolizer can use: inside the struct sizes
// the blob states, with a code object header and string headers of
// plausible size.
func FuzzOffsetsFromDebug(f *testing.F) {
	f.Add(byte(13), debug313())
	f.Add(byte(14), debug314())
	f.Add(byte(14), debug313())
	f.Fuzz(func(t *testing.T, minor byte, b []byte) {
		h, ok := parseDebugHeader(b)
		if ok != (len(b) >= 24 && string(b[:8]) == debugCookie) {
			t.Fatalf("header %+v, ok %v for % x", h, ok, b[:min(len(b), 24)])
		}
		base, ok := tableOffsets[int(minor)]
		if !ok {
			base = tableOffsets[14]
		}
		o, err := offsetsFromDebug(int(minor), b, base)
		if err != nil {
			return
		}
		if _, ok := debugLayouts[int(minor)]; !ok {
			t.Fatalf("3.%d has no layout, but its blob parsed", minor)
		}
		s := NewSymbolizer(&Runtime{PID: -1, Offsets: o})
		if s.hdrLen > maxCodeObjectBytes {
			t.Fatalf("a code object header of %d bytes", s.hdrLen)
		}
		if o.UnicodeASCIIData < unicodeStateOff+4 || o.UnicodeASCIIData > maxStringHeader {
			t.Fatalf("strings have a %d-byte header", o.UnicodeASCIIData)
		}
	})
}

// tinyELF builds a static ELF without libc (about 1 KB) from C source
// with gcc, and returns its bytes and path.
func tinyELF(tb testing.TB, src string) ([]byte, string) {
	tb.Helper()
	dir := tb.TempDir()
	c, out := filepath.Join(dir, "x.c"), filepath.Join(dir, "x")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("gcc", "-Os", "-nostdlib", "-static", "-Wl,--build-id=none", "-Wl,-N", "-o", out, c)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("gcc: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	return b, out
}

// FuzzVersionFromELF reads the version of arbitrary ELF files under
// arbitrary names. A version found is a 3.x one, of the minor version the
// name gives when it gives one.
func FuzzVersionFromELF(f *testing.F) {
	withString, _ := tinyELF(f, `const char prefix[] = "/root/.pyenv/versions/3.10.13"; void _start(void) { for (;;); }`)
	bare, _ := tinyELF(f, `void _start(void) { for (;;); }`)
	for _, name := range []string{"/usr/lib/libpython3.10.so.1.0", "/opt/embedded", "/usr/bin/python3.12t"} {
		f.Add(name, withString)
		f.Add(name, bare)
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		v, err := versionFromELF(name, ef)
		if err != nil {
			return
		}
		if v.Major != 3 || v.Micro < 0 || v.Micro > 99 {
			t.Fatalf("version %v", v)
		}
		if mm := pyNameRE.FindStringSubmatch(filepath.Base(name)); mm != nil {
			if n, err := strconv.Atoi(mm[1]); err == nil && n != v.Minor {
				t.Fatalf("%s gave 3.%d", name, v.Minor)
			}
		}
	})
}

// FuzzLineTable decodes arbitrary line tables. Past the code the table
// covers there is no line, and a 3.10 line moves at most 127 lines per
// entry from the first line.
func FuzzLineTable(f *testing.F) {
	f.Add([]byte{4, 2, 2, 0x80, 2, 0xff}, 10, 4, true)
	f.Add([]byte{0x80 | 14<<3 | 1, 0x58 | 0x40, 0x09, 0, 0, 0, 0x80 | 15<<3}, 10, 1, false)
	f.Add([]byte{0x80 | 13<<3 | 1, 4, 0x80 | 13<<3, 2}, 20, 2, false)
	f.Fuzz(func(t *testing.T, table []byte, first, at int, py310 bool) {
		first = int(int32(first)) // co_firstlineno is a C int
		if py310 {
			covered := 0
			for i := 0; i+1 < len(table); i += 2 {
				covered += int(table[i])
			}
			l := line310(table, first, at)
			if at >= covered && l != -1 || l != -1 && (l > first+127*len(table)/2 || l < first-128*len(table)/2) {
				t.Fatalf("line %d at byte %d of %d covered from first line %d", l, at, covered, first)
			}
			return
		}
		// Each entry starts with a byte with the top bit set; its low 3
		// bits are its length in units, less one.
		covered := 0
		for _, b := range table {
			if b&0x80 != 0 {
				covered += int(b&7) + 1
			}
		}
		if l := line311(table, first, at); at >= covered && l != -1 {
			t.Fatalf("line %d at unit %d of %d covered", l, at, covered)
		}
	})
}
