package python

import (
	"fmt"
	"reflect"
)

// Flags select the variant of the frame walk a CPython version needs.
type Flags uint32

const (
	// FlagCFrame (3.11, 3.12): the top frame is two loads away,
	// *(*(tstate+TstateFrame) + CFrameCurrentFrame).
	FlagCFrame Flags = 1 << iota
	// FlagSkipOwnerGE3 (3.12+): skip frames whose owner byte is ≥ 3, the
	// C-stack entry/shim frames (FRAME_OWNED_BY_CSTACK on 3.12/3.13;
	// FRAME_OWNED_BY_INTERPRETER=3 and CSTACK=4 on 3.14).
	FlagSkipOwnerGE3
	// FlagTaggedExecutable (3.14): f_executable is a _PyStackRef; clear its
	// low 2 bits (Py_TAG_BITS) to get the code object pointer.
	FlagTaggedExecutable
	// FlagPthreadTID (3.10): there is no native_thread_id; a thread state
	// belongs to Linux thread *(int32*)(tstate.thread_id + PthreadTID),
	// thread_id being the glibc pthread_t (a struct pthread pointer).
	FlagPthreadTID
	// FlagFrameObject (3.10): frames are PyFrameObjects and FrameInstr is
	// the int f_lasti (an instruction index), not an instruction pointer.
	FlagFrameObject
)

// Offsets is everything a frame walker needs to know about one CPython
// build, in bytes. A zero means "not present in this version" only for
// fields that never sit at offset 0; FrameCode and CFrameCurrentFrame are
// legitimately 0 on some versions, and Flags say which steps apply.
type Offsets struct {
	InterpretersHead     uint64 // _PyRuntime.interpreters.head
	InterpThreadsHead    uint64 // PyInterpreterState.tstate_head / threads.head
	TstateNext           uint64 // PyThreadState.next
	TstateNativeThreadID uint64 // PyThreadState.native_thread_id (3.11+; 0 on 3.10)
	TstateThreadID       uint64 // PyThreadState.thread_id (pthread_t)
	// TstateFrame is PyThreadState.frame (3.10), .cframe (3.11/3.12) or
	// .current_frame (3.13+).
	TstateFrame        uint64
	CFrameCurrentFrame uint64 // _PyCFrame.current_frame (3.11/3.12, FlagCFrame)
	FrameCode          uint64 // f_code (≤3.12) / f_executable (3.13+)
	FramePrevious      uint64 // f_back (3.10) / previous
	FrameOwner         uint64 // owner byte (3.11+; 0 on 3.10)
	// FrameInstr is f_lasti (3.10, int32 instruction index), prev_instr
	// (3.11/3.12) or instr_ptr (3.13+).
	FrameInstr         uint64
	CodeFilename       uint64 // PyCodeObject.co_filename
	CodeName           uint64 // PyCodeObject.co_name
	CodeQualname       uint64 // PyCodeObject.co_qualname (3.11+; 0 on 3.10)
	CodeFirstLineNo    uint64 // PyCodeObject.co_firstlineno (int32)
	CodeLinetable      uint64 // PyCodeObject.co_linetable (bytes)
	CodeAdaptive       uint64 // PyCodeObject.co_code_adaptive (3.11+; 0 on 3.10)
	UnicodeASCIIData   uint64 // sizeof(PyASCIIObject): data of compact ASCII strings
	UnicodeCompactData uint64 // sizeof(PyCompactUnicodeObject): data of other compact strings
	PthreadTID         uint64 // offset of tid in glibc's struct pthread (x86-64), FlagPthreadTID only
	Flags              Flags
}

// Layout constants that are the same on 3.10–3.14 (x86-64).
const (
	obTypeOff        = 8  // PyObject.ob_type
	unicodeLengthOff = 16 // PyASCIIObject.length
	unicodeStateOff  = 32 // PyASCIIObject.state
	bytesSizeOff     = 16 // PyVarObject.ob_size of a PyBytesObject
	bytesDataOff     = 32 // PyBytesObject.ob_sval
	typeNameOff      = 24 // PyTypeObject.tp_name
	glibcPthreadTID  = 0x2d0
)

// tableOffsets are the x86-64 offsets per minor version. Provenance: each
// was computed with offsetof/sizeof compiled against that release's
// headers (Include/cpython/*.h, Include/internal/pycore_*.h) and, for
// 3.10–3.13, validated by walking live pyenv interpreters from another
// process (reference/targets.md §4.2 and Appendix A).
var tableOffsets = map[int]Offsets{
	// 3.10.13: PyFrameObject frames (f_back 24, f_code 32, int f_lasti 96);
	// no native_thread_id, so threads are matched through glibc's struct
	// pthread tid (verified on glibc 2.36). Cross-checked against py-spy's
	// 3.10 interp head (32).
	10: {
		InterpretersHead:   32,
		InterpThreadsHead:  8,
		TstateNext:         8,
		TstateThreadID:     176,
		TstateFrame:        24,
		FrameCode:          32,
		FramePrevious:      24,
		FrameInstr:         96,
		CodeFilename:       104,
		CodeName:           112,
		CodeFirstLineNo:    40,
		CodeLinetable:      120,
		UnicodeASCIIData:   48,
		UnicodeCompactData: 72,
		PthreadTID:         glibcPthreadTID,
		Flags:              FlagPthreadTID | FlagFrameObject,
	},
	// 3.11.7: _PyInterpreterFrame reached through tstate->cframe; owner 69
	// (is_entry 68) but no shim frames to skip. Agrees with
	// otel-ebpf-profiler (code 32, previous 48, prev_instr 56, cframe 56/8).
	11: {
		InterpretersHead:     40,
		InterpThreadsHead:    16,
		TstateNext:           8,
		TstateNativeThreadID: 160,
		TstateThreadID:       152,
		TstateFrame:          56,
		CFrameCurrentFrame:   8,
		FrameCode:            32,
		FramePrevious:        48,
		FrameOwner:           69,
		FrameInstr:           56,
		CodeFilename:         112,
		CodeName:             120,
		CodeQualname:         128,
		CodeFirstLineNo:      72,
		CodeLinetable:        136,
		CodeAdaptive:         184,
		UnicodeASCIIData:     48,
		UnicodeCompactData:   72,
		Flags:                FlagCFrame,
	},
	// 3.12.1: cframe still present (current_frame at 0); entry frames are
	// owned by the C stack (owner 3, walked live as a trailing shim).
	// Agrees with otel (code 0, previous 8, owner 70). PEP 623 dropped
	// wstr, so unicode headers shrank to 40/56.
	12: {
		InterpretersHead:     40,
		InterpThreadsHead:    72,
		TstateNext:           8,
		TstateNativeThreadID: 144,
		TstateThreadID:       136,
		TstateFrame:          56,
		CFrameCurrentFrame:   0,
		FrameCode:            0,
		FramePrevious:        8,
		FrameOwner:           70,
		FrameInstr:           56,
		CodeFilename:         112,
		CodeName:             120,
		CodeQualname:         128,
		CodeFirstLineNo:      68,
		CodeLinetable:        136,
		CodeAdaptive:         192,
		UnicodeASCIIData:     40,
		UnicodeCompactData:   56,
		Flags:                FlagCFrame | FlagSkipOwnerGE3,
	},
	// 3.13.0: matches the live _PyRuntime.debug_offsets of 3.13.0 field for
	// field; tstate->current_frame replaces cframe.
	13: {
		InterpretersHead:     632,
		InterpThreadsHead:    7344,
		TstateNext:           8,
		TstateNativeThreadID: 160,
		TstateThreadID:       152,
		TstateFrame:          72,
		FrameCode:            0,
		FramePrevious:        8,
		FrameOwner:           70,
		FrameInstr:           56,
		CodeFilename:         112,
		CodeName:             120,
		CodeQualname:         128,
		CodeFirstLineNo:      68,
		CodeLinetable:        136,
		CodeAdaptive:         200,
		UnicodeASCIIData:     40,
		UnicodeCompactData:   56,
		Flags:                FlagSkipOwnerGE3,
	},
	// 3.14.0: NOT validated on a live interpreter; offset_of! on py-spy's
	// bindgen bindings for v3.14.0 (src/python_bindings/v3_14_0.rs), in
	// agreement with otel's hard-coded 3.14 values (owner 74). At run time
	// the target's debug_offsets take precedence.
	14: {
		InterpretersHead:     808,
		InterpThreadsHead:    7344,
		TstateNext:           8,
		TstateNativeThreadID: 160,
		TstateThreadID:       152,
		TstateFrame:          72,
		FrameCode:            0,
		FramePrevious:        8,
		FrameOwner:           74,
		FrameInstr:           56,
		CodeFilename:         112,
		CodeName:             120,
		CodeQualname:         128,
		CodeFirstLineNo:      68,
		CodeLinetable:        136,
		CodeAdaptive:         208,
		UnicodeASCIIData:     40,
		UnicodeCompactData:   56,
		Flags:                FlagSkipOwnerGE3 | FlagTaggedExecutable,
	},
}

// TableOffsets returns the built-in offsets for v's minor version. On 3.13+
// Discover prefers the target's own _Py_DebugOffsets.
func TableOffsets(v Version) (Offsets, error) {
	if err := v.Supported(); err != nil {
		return Offsets{}, err
	}
	o, ok := tableOffsets[v.Minor]
	if !ok {
		return Offsets{}, fmt.Errorf("no offsets for Python %v", v)
	}
	return o, nil
}

// offsetDiff is one field where two Offsets disagree.
type offsetDiff struct {
	Field     string
	Table, Rt uint64
}

// diffOffsets lists the fields where rt differs from table.
func diffOffsets(table, rt Offsets) []offsetDiff {
	var out []offsetDiff
	tv, rv := reflect.ValueOf(table), reflect.ValueOf(rt)
	for i := range tv.NumField() {
		f := tv.Type().Field(i)
		if f.Type.Kind() != reflect.Uint64 {
			continue
		}
		a, b := tv.Field(i).Uint(), rv.Field(i).Uint()
		if a != b {
			out = append(out, offsetDiff{Field: f.Name, Table: a, Rt: b})
		}
	}
	return out
}
