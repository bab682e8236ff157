package python

import (
	"encoding/binary"
	"fmt"
)

// debugCookie starts _PyRuntime (its first member, _Py_DebugOffsets) on
// 3.13+; it lets a reader find and trust the runtime without symbols.
const debugCookie = "xdebugpy"

// debugLayout locates, inside _Py_DebugOffsets, the u64 fields specprof
// uses. The struct is a cookie followed by u64s only, but its field list
// changes between minor versions (3.14 inserts fields), so each version
// gets its own section bases. Within a section the fields used here keep
// their relative order on 3.13 and 3.14.
type debugLayout struct {
	size          int // sizeof(_Py_DebugOffsets)
	interpHead    int // runtime_state.interpreters_head
	interpState   int // interpreter_state section (size field)
	threadsHead   int // interpreter_state.threads_head
	threadState   int // thread_state section: size, prev, next, interp, current_frame, thread_id, native_thread_id
	interpFrame   int // interpreter_frame section: size, previous, executable, instr_ptr, localsplus, owner
	codeObject    int // code_object section: size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds, co_code_adaptive
	pyObject      int // pyobject section: size, ob_type
	bytesObject   int // bytes_object section: size, ob_size, ob_sval
	unicodeObject int // unicode_object section: size, state, length, asciiobject_size
}

// debugLayouts per minor version. 3.13: Include/internal/pycore_runtime.h
// of v3.13.0 (read live from 3.13.0, reference/targets.md §4.3). 3.14:
// Include/internal/pycore_debug_offsets.h of v3.14 (adds
// interpreter_state.threads_main, code_object_generation, tlbc_generation;
// interpreter_frame.stackpointer, tlbc_index; code_object.co_tlbc;
// set_object, gen_object, llist_node, debugger_support); sizeof 760.
var debugLayouts = map[int]debugLayout{
	13: {size: 584, interpHead: 40, interpState: 48, threadsHead: 72, threadState: 152, interpFrame: 224, codeObject: 272, pyObject: 352, bytesObject: 512, unicodeObject: 536},
	14: {size: 760, interpHead: 40, interpState: 48, threadsHead: 72, threadState: 176, interpFrame: 248, codeObject: 312, pyObject: 400, bytesObject: 592, unicodeObject: 616},
}

// Bounds on the sizes in a _Py_DebugOffsets blob that decide how much the
// symbolizer reads at once: PyCodeObject is about 220 bytes and
// PyASCIIObject 40 on 3.13 and 3.14.
const (
	maxCodeObjectBytes = 4096
	maxStringHeader    = 256
)

// debugHeader is the version-independent start of _Py_DebugOffsets.
type debugHeader struct {
	Version      uint32 // PY_VERSION_HEX
	FreeThreaded bool
}

// parseDebugHeader returns ok=false when b does not start with the cookie.
func parseDebugHeader(b []byte) (h debugHeader, ok bool) {
	if len(b) < 24 || string(b[:8]) != debugCookie {
		return h, false
	}
	return debugHeader{
		Version:      uint32(binary.LittleEndian.Uint64(b[8:])),
		FreeThreaded: binary.LittleEndian.Uint64(b[16:]) != 0,
	}, true
}

// offsetsFromDebug builds Offsets from a target's _Py_DebugOffsets blob
// for minor version minor. Fields the blob does not describe (flags, the
// glibc pthread offset) come from base, the built-in table entry. Values
// are sanity-checked against the struct sizes the blob itself reports, so
// a corrupt blob is an error rather than a wild walker.
func offsetsFromDebug(minor int, b []byte, base Offsets) (Offsets, error) {
	l, ok := debugLayouts[minor]
	if !ok {
		return Offsets{}, fmt.Errorf("no _Py_DebugOffsets layout for 3.%d", minor)
	}
	if len(b) < l.size {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets is %d bytes, want %d", len(b), l.size)
	}
	if string(b[:8]) != debugCookie {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets cookie is %q, want %q", b[:8], debugCookie)
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	field := func(section, i int) uint64 { return u(section + 8*i) }

	runtimeSize := u(24)
	interpSize := field(l.interpState, 0)
	tstateSize := field(l.threadState, 0)
	frameSize := field(l.interpFrame, 0)
	codeSize := field(l.codeObject, 0)

	o := base
	o.InterpretersHead = u(l.interpHead)
	o.InterpThreadsHead = u(l.threadsHead)
	o.TstateNext = field(l.threadState, 2)
	o.TstateFrame = field(l.threadState, 4)
	o.TstateThreadID = field(l.threadState, 5)
	o.TstateNativeThreadID = field(l.threadState, 6)
	o.CFrameCurrentFrame = 0
	o.FramePrevious = field(l.interpFrame, 1)
	o.FrameCode = field(l.interpFrame, 2)
	o.FrameInstr = field(l.interpFrame, 3)
	o.FrameOwner = field(l.interpFrame, 5)
	o.CodeFilename = field(l.codeObject, 1)
	o.CodeName = field(l.codeObject, 2)
	o.CodeQualname = field(l.codeObject, 3)
	o.CodeLinetable = field(l.codeObject, 4)
	o.CodeFirstLineNo = field(l.codeObject, 5)
	o.CodeAdaptive = field(l.codeObject, 9)
	o.UnicodeASCIIData = field(l.unicodeObject, 3)
	// PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8 (3.12+);
	// the debug offsets do not carry its size.
	o.UnicodeCompactData = o.UnicodeASCIIData + 16

	checks := []struct {
		name      string
		off, size uint64
	}{
		{"runtime_state.interpreters_head", o.InterpretersHead, runtimeSize},
		{"interpreter_state.threads_head", o.InterpThreadsHead, interpSize},
		{"thread_state.next", o.TstateNext, tstateSize},
		{"thread_state.current_frame", o.TstateFrame, tstateSize},
		{"thread_state.thread_id", o.TstateThreadID, tstateSize},
		{"thread_state.native_thread_id", o.TstateNativeThreadID, tstateSize},
		{"interpreter_frame.previous", o.FramePrevious, frameSize},
		{"interpreter_frame.executable", o.FrameCode, frameSize},
		{"interpreter_frame.instr_ptr", o.FrameInstr, frameSize},
		{"interpreter_frame.owner", o.FrameOwner, frameSize},
		{"code_object.filename", o.CodeFilename, codeSize},
		{"code_object.name", o.CodeName, codeSize},
		{"code_object.qualname", o.CodeQualname, codeSize},
		{"code_object.linetable", o.CodeLinetable, codeSize},
		{"code_object.firstlineno", o.CodeFirstLineNo, codeSize},
		{"code_object.co_code_adaptive", o.CodeAdaptive, codeSize + 1},
		{"unicode_object.asciiobject_size", o.UnicodeASCIIData, field(l.unicodeObject, 0) + 1},
	}
	for _, c := range checks {
		if c.size == 0 || c.size > 1<<24 || c.off >= c.size {
			return Offsets{}, fmt.Errorf("_Py_DebugOffsets %s = %d is outside its struct (size %d)", c.name, c.off, c.size)
		}
	}
	// The symbolizer reads a code object's header, and a string's, in one
	// read each, so their sizes are bounded more tightly than the rest.
	if codeSize > maxCodeObjectBytes {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets code_object.size = %d, more than %d", codeSize, maxCodeObjectBytes)
	}
	if o.UnicodeASCIIData < unicodeStateOff+4 || o.UnicodeASCIIData > maxStringHeader {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets unicode_object.asciiobject_size = %d, outside [%d, %d]", o.UnicodeASCIIData, unicodeStateOff+4, maxStringHeader)
	}
	// Constants this package hard-codes for every version; a build that
	// moved them cannot be read correctly.
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"pyobject.ob_type", field(l.pyObject, 1), obTypeOff},
		{"bytes_object.ob_size", field(l.bytesObject, 1), bytesSizeOff},
		{"bytes_object.ob_sval", field(l.bytesObject, 2), bytesDataOff},
		{"unicode_object.state", field(l.unicodeObject, 1), unicodeStateOff},
		{"unicode_object.length", field(l.unicodeObject, 2), unicodeLengthOff},
	} {
		if c.got != c.want {
			return Offsets{}, fmt.Errorf("_Py_DebugOffsets %s = %d, specprof assumes %d", c.name, c.got, c.want)
		}
	}
	return o, nil
}
