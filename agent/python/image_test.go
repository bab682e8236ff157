package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// imageBase is where a memory image starts in the fake address space.
const imageBase = 0x10000

// image is a fake target address space: objects laid out as CPython lays
// them out, for the Symbolizer to read through its read hook.
type image struct {
	mem  []byte
	wrap bool // every address is valid, taken modulo the image size
	// maxRead is the largest read asked for; total sums them.
	maxRead, total int
}

var errUnmapped = errors.New("address not mapped")

// read copies the image at addr into b, as proc.ReadMem would.
func (im *image) read(addr uint64, b []byte) error {
	im.maxRead = max(im.maxRead, len(b))
	im.total += len(b)
	n := uint64(len(im.mem))
	if im.wrap && n > 0 {
		off := (addr - imageBase) % n
		for i := range b {
			b[i] = im.mem[off]
			if off++; off == n {
				off = 0
			}
		}
		return nil
	}
	if addr < imageBase || addr-imageBase > n || uint64(len(b)) > n-(addr-imageBase) {
		return fmt.Errorf("read %d bytes at 0x%x: %w", len(b), addr, errUnmapped)
	}
	copy(b, im.mem[addr-imageBase:])
	return nil
}

// alloc reserves n zeroed bytes, 16-aligned, and returns their address.
func (im *image) alloc(n uint64) uint64 {
	addr := imageBase + uint64(len(im.mem))
	im.mem = append(im.mem, make([]byte, (n+15)&^15)...)
	return addr
}

func (im *image) put64(addr, v uint64) { binary.LittleEndian.PutUint64(im.mem[addr-imageBase:], v) }
func (im *image) put32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(im.mem[addr-imageBase:], v)
}

// typeObject lays out a type object named name (tp_name at +24).
func (im *image) typeObject(name string) uint64 {
	t := im.alloc(typeNameOff + 8)
	s := im.alloc(uint64(len(name)) + 1)
	copy(im.mem[s-imageBase:], name)
	im.put64(t+typeNameOff, s)
	return t
}

// str lays out a compact ASCII string of type typ.
func (im *image) str(o Offsets, typ uint64, s string) uint64 {
	a := im.alloc(o.UnicodeASCIIData + uint64(len(s)) + 1)
	im.put64(a+obTypeOff, typ)
	im.put64(a+unicodeLengthOff, uint64(len(s)))
	im.put32(a+unicodeStateOff, 1<<2|1<<5|1<<6) // kind 1, compact, ascii
	copy(im.mem[a+o.UnicodeASCIIData-imageBase:], s)
	return a
}

// bytesObject lays out a PyBytesObject holding b.
func (im *image) bytesObject(b []byte) uint64 {
	a := im.alloc(bytesDataOff + uint64(len(b)) + 1)
	im.put64(a+bytesSizeOff, uint64(len(b)))
	copy(im.mem[a+bytesDataOff-imageBase:], b)
	return a
}

// walkCase is a built image and what walking it must give.
type walkCase struct {
	im     *image
	rt     *Runtime
	tids   []int      // thread states, most recent first
	frames []FrameRef // of tids[0], innermost first
	codes  []Code     // of frames, without their line tables
	lines  []int      // of frames
}

// buildImage lays out a runtime of Python 3.minor with two threads, the
// first running Worker.draft called from Worker.step (and, on 3.12+, a
// C-stack shim frame below them that the walk skips). On 3.13+ the
// runtime starts with its _Py_DebugOffsets.
func buildImage(minor int, knownTypes bool) walkCase {
	o := tableOffsets[minor]
	im := &image{}
	c := walkCase{im: im, tids: []int{4242, 4243}}
	runtimeSize := o.InterpretersHead + 8
	rtAddr := im.alloc(runtimeSize)
	switch minor {
	case 13:
		copy(im.mem, debug313())
	case 14:
		copy(im.mem, debug314())
	}
	codeType, unicodeType := im.typeObject("code"), im.typeObject("str")
	c.rt = &Runtime{PID: -1, Version: Version{3, minor, 0}, RuntimeAddr: rtAddr, Offsets: o}
	if knownTypes {
		c.rt.CodeTypeAddr, c.rt.UnicodeTypeAddr = codeType, unicodeType
	}

	interp := im.alloc(o.InterpThreadsHead + 8)
	im.put64(rtAddr+o.InterpretersHead, interp)
	var ts []uint64
	for _, tid := range c.tids {
		t := im.alloc(max(o.TstateNext, o.TstateFrame, o.TstateNativeThreadID, o.TstateThreadID) + 8)
		if o.Flags&FlagPthreadTID != 0 {
			pt := im.alloc(o.PthreadTID + 8)
			im.put32(pt+o.PthreadTID, uint32(tid))
			im.put64(t+o.TstateThreadID, pt)
		} else {
			im.put64(t+o.TstateNativeThreadID, uint64(tid))
		}
		if len(ts) > 0 {
			im.put64(ts[len(ts)-1]+o.TstateNext, t)
		}
		ts = append(ts, t)
	}
	im.put64(interp+o.InterpThreadsHead, ts[0])

	// 3.10: pairs (bytecode bytes, line delta); 3.11+: one no-column entry
	// (code 13) of 2 units 2 lines down, then one of 1 unit 1 line down.
	table, line := []byte{4, 1, 4, 2}, []int{1, 3} // at byte 2 and byte 6
	if minor >= 11 {
		table, line = []byte{0x80 | 13<<3 | 1, 4, 0x80 | 13<<3, 2}, []int{2, 3} // at unit 1 and unit 2
	}
	for _, fn := range []struct {
		qual, name string
		first      int
	}{{"Worker.draft", "draft", 20}, {"Worker.step", "step", 10}} {
		hdr := max(o.CodeFilename, o.CodeName, o.CodeQualname, o.CodeLinetable) + 8
		code := im.alloc(max(hdr, o.CodeAdaptive+16))
		im.put64(code+obTypeOff, codeType)
		im.put64(code+o.CodeName, im.str(o, unicodeType, fn.name))
		im.put64(code+o.CodeFilename, im.str(o, unicodeType, "/srv/worker.py"))
		want := Code{Addr: code, Qualname: fn.name, Name: fn.name, Filename: "/srv/worker.py", FirstLine: fn.first}
		if o.CodeQualname != 0 {
			im.put64(code+o.CodeQualname, im.str(o, unicodeType, fn.qual))
			want.Qualname = fn.qual
		}
		im.put32(code+o.CodeFirstLineNo, uint32(fn.first))
		im.put64(code+o.CodeLinetable, im.bytesObject(table))
		i := len(c.codes)
		instr := uint64(1 + 2*i) // f_lasti: an instruction index, 2 bytes each
		if minor >= 11 {
			instr = code + o.CodeAdaptive + 2*uint64(1+i)
		}
		c.codes = append(c.codes, want)
		c.frames = append(c.frames, FrameRef{Code: code, Instr: instr})
		c.lines = append(c.lines, fn.first+line[i])
	}

	frameSize := max(o.FrameCode, o.FramePrevious, o.FrameInstr, o.FrameOwner) + 8
	var frames []uint64
	for _, fr := range c.frames {
		f := im.alloc(frameSize)
		exe := fr.Code
		if o.Flags&FlagTaggedExecutable != 0 {
			exe |= 1 // a deferred-reference _PyStackRef
		}
		im.put64(f+o.FrameCode, exe)
		if o.Flags&FlagFrameObject != 0 {
			im.put32(f+o.FrameInstr, uint32(fr.Instr))
		} else {
			im.put64(f+o.FrameInstr, fr.Instr)
		}
		if len(frames) > 0 {
			im.put64(frames[len(frames)-1]+o.FramePrevious, f)
		}
		frames = append(frames, f)
	}
	if o.Flags&FlagSkipOwnerGE3 != 0 {
		shim := im.alloc(frameSize)
		im.mem[shim+o.FrameOwner-imageBase] = 3
		im.put64(shim+o.FrameCode, frames[0]) // not a code object: never read
		im.put64(frames[len(frames)-1]+o.FramePrevious, shim)
	}
	top := frames[0]
	if o.Flags&FlagCFrame != 0 {
		cf := im.alloc(o.CFrameCurrentFrame + 8)
		im.put64(cf+o.CFrameCurrentFrame, top)
		top = cf
	}
	im.put64(ts[0]+o.TstateFrame, top)
	return c
}

// newImageSymbolizer returns a Symbolizer that reads im.
func newImageSymbolizer(rt *Runtime, im *image) *Symbolizer {
	s := NewSymbolizer(rt)
	s.read = im.read
	return s
}

// The walker and the symbolizer read back, from an image laid out by the
// offsets of each version, the threads, frames, names and lines put there.
func TestWalkImage(t *testing.T) {
	for minor := 10; minor <= 14; minor++ {
		for _, known := range []bool{true, false} {
			t.Run(fmt.Sprintf("3.%d/types known %v", minor, known), func(t *testing.T) {
				c := buildImage(minor, known)
				if minor >= 13 {
					o, err := offsetsFromDebug(minor, c.im.mem, c.rt.Offsets)
					if err != nil || o != c.rt.Offsets {
						t.Fatalf("the image's debug offsets: %+v, %v", o, err)
					}
				}
				s := newImageSymbolizer(c.rt, c.im)
				ts, err := s.ThreadStates()
				if err != nil {
					t.Fatal(err)
				}
				var tids []int
				for _, st := range ts {
					tids = append(tids, st.TID)
				}
				if !slices.Equal(tids, c.tids) {
					t.Fatalf("thread ids %v, want %v", tids, c.tids)
				}
				frames, err := s.ThreadFrames(c.tids[0])
				if err != nil || !slices.Equal(frames, c.frames) {
					t.Fatalf("frames %+v, %v; want %+v", frames, err, c.frames)
				}
				if frames, err := s.ThreadFrames(c.tids[1]); err != nil || len(frames) != 0 {
					t.Errorf("idle thread: %+v, %v", frames, err)
				}
				for i, fr := range frames {
					code, err := s.Code(fr.Code)
					if err != nil {
						t.Fatal(err)
					}
					if l := s.Line(code, fr.Instr); l != c.lines[i] {
						t.Errorf("%s: line %d, want %d", code.Qualname, l, c.lines[i])
					}
					code.linetable = nil
					if !reflect.DeepEqual(code, c.codes[i]) {
						t.Errorf("code %+v, want %+v", code, c.codes[i])
					}
				}
				if _, err := s.Code(c.frames[0].Code + 8); !errors.Is(err, ErrNotCode) {
					t.Errorf("Code of a non-code object: %v, want ErrNotCode", err)
				}
			})
		}
	}
}

// A string at the end of a mapping is read again with the header size
// alone; offsets claiming a header shorter than the state field (which
// offsetsFromDebug refuses) must not make that read too short to decode.
func TestReadStringShortHeader(t *testing.T) {
	c := buildImage(13, true)
	a := c.im.str(c.rt.Offsets, c.rt.UnicodeTypeAddr, "x")
	c.im.mem = c.im.mem[:a-imageBase+unicodeStateOff+4] // the optimistic read fails
	c.rt.Offsets.UnicodeASCIIData, c.rt.Offsets.UnicodeCompactData = 8, 24
	s := newImageSymbolizer(c.rt, c.im)
	// The "data" is then the first byte of ob_type: garbage, as the
	// offsets are, but decoded without a panic.
	if got, err := s.readString(a); err == nil && len(got) != 1 {
		t.Errorf("readString = %q: want one character or an error", got)
	}
}

// A string length whose size in bytes overflows int64 is implausible, not
// an allocation of the wrapped size (FuzzFrameWalk found a UCS-2 string of
// 2^62+1 code points making readString panic in make).
func TestReadStringHugeLength(t *testing.T) {
	c := buildImage(12, true)
	a := c.im.str(c.rt.Offsets, c.rt.UnicodeTypeAddr, "xyz")
	c.im.put64(a+unicodeLengthOff, 1<<62+1)
	c.im.put32(a+unicodeStateOff, 2<<2|1<<5) // kind 2, compact, not ascii
	s := newImageSymbolizer(c.rt, c.im)
	if got, err := s.readString(a); err == nil || !strings.Contains(err.Error(), "implausible length") {
		t.Errorf("readString = %q, %v; want an implausible length", got, err)
	}
}
