package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// EventType is the first field of every ring buffer record.
type EventType uint32

// Record types (enum sp_event_type).
const (
	EvLaunch    = EventType(specprofSpEventTypeSP_EV_LAUNCH)
	EvSyncEnter = EventType(specprofSpEventTypeSP_EV_SYNC_ENTER)
	EvSyncExit  = EventType(specprofSpEventTypeSP_EV_SYNC_EXIT)
	EvColl      = EventType(specprofSpEventTypeSP_EV_COLL)
	EvCapture   = EventType(specprofSpEventTypeSP_EV_CAPTURE)
	EvMark      = EventType(specprofSpEventTypeSP_EV_MARK)
	EvLibOpen   = EventType(specprofSpEventTypeSP_EV_LIB_OPEN)
	EvFork      = EventType(specprofSpEventTypeSP_EV_FORK)
	EvExec      = EventType(specprofSpEventTypeSP_EV_EXEC)
	EvExit      = EventType(specprofSpEventTypeSP_EV_EXIT)
	EvSample    = EventType(specprofSpEventTypeSP_EV_SAMPLE)
)

// PyFlags describe the outcome of the BPF frame walk.
type PyFlags uint16

// Frame walk outcomes (enum sp_py_flags).
const (
	PyWalked    = PyFlags(specprofSpPyFlagsSP_PY_WALKED)
	PyUnknown   = PyFlags(specprofSpPyFlagsSP_PY_UNKNOWN)
	PyTruncated = PyFlags(specprofSpPyFlagsSP_PY_TRUNCATED)
	PyNoConfig  = PyFlags(specprofSpPyFlagsSP_PY_NO_CONFIG)
	PyNoTstate  = PyFlags(specprofSpPyFlagsSP_PY_NO_TSTATE)
	PyReadErr   = PyFlags(specprofSpPyFlagsSP_PY_READ_ERR)
	PyStale     = PyFlags(specprofSpPyFlagsSP_PY_STALE)
)

// Header starts every record. Ktime is CLOCK_MONOTONIC nanoseconds.
type Header struct {
	Type  EventType
	PID   uint32
	TID   uint32
	CPU   uint32
	Ktime uint64
}

// Py is the result of the frame walk at an API call.
type Py struct {
	Phase      uint16  // phase id found by BPF (0: none)
	Flags      PyFlags // walk outcome
	Depth      uint16  // Python frames walked
	Match      int     // index of the matching frame, -1 if none
	PhaseCode  uint64  // code object of the matching frame
	CycleFrame uint64  // address of the cycle function's frame, 0 if not seen
	// CycleNo is the thread's cycle number as BPF counts it, over the calls
	// it classified itself, whether or not their records arrived: a jump of
	// more than one between two records of a thread is that many cycles
	// lost whole to a full ring buffer. 0: not known for this call.
	CycleNo   uint32
	LeafCode  uint64 // innermost frame's code object
	LeafInstr uint64 // innermost frame's instruction pointer (f_lasti on 3.10)
	// Frames and FrameAddrs are set when Flags has PyUnknown or PyStale: the code object
	// and frame address of every walked frame, innermost first.
	Frames     []uint64
	FrameAddrs []uint64
}

// APIEvent is a hooked call: a launch, a blocking call's entry, a
// collective, a capture step or a marker.
type APIEvent struct {
	Header
	API API
	// LostSeq counts the call and sync-exit records lost to a full ring
	// buffer before this one was submitted: when it changes, records went
	// missing in between, and cycles open then are incomplete.
	LostSeq uint32
	Stream  uint64
	Handle  uint64 // CUfunction, CUgraphExec, CUevent or ncclComm_t
	Arg0    uint64 // launches: packed grid; copies: bytes; NCCL: count
	Arg1    uint64 // launches: packed block; NCCL: datatype | op<<8 | (root|peer)+1 << 16
	Py      Py
}

// Dims unpacks a grid or block packed by the BPF program.
func Dims(v uint64) [3]uint32 {
	return [3]uint32{uint32(v & 0x1fffff), uint32(v >> 21 & 0x1fffff), uint32(v >> 42 & 0x1fffff)}
}

// NCCLArgs unpacks Arg1 of a collective: datatype, reduction op (0xff: none)
// and root or peer (-1: none).
func (e *APIEvent) NCCLArgs() (datatype, op uint8, rootOrPeer int) {
	return uint8(e.Arg1), uint8(e.Arg1 >> 8), int(int64(uint32(e.Arg1>>16))) - 1
}

// SyncExit is the return of a blocking call.
type SyncExit struct {
	Header
	API API
	Ret int32
}

// LibOpen reports that a tracked process opened libcuda or libnccl.
type LibOpen struct {
	Header
	FD      int32
	Stopped bool // the process was sent SIGSTOP and waits for SIGCONT
	Path    string
}

// ProcEvent is a fork (Child is the new process), exec or exit.
type ProcEvent struct {
	Header
	Child uint32
}

const (
	headerSize    = int(unsafe.Sizeof(specprofApiEvent{}.H))
	apiEventSize  = int(unsafe.Sizeof(specprofApiEvent{}))
	syncExitSize  = int(unsafe.Sizeof(specprofSyncExitEvent{}))
	libEventSize  = int(unsafe.Sizeof(specprofLibEvent{}))
	procEventSize = int(unsafe.Sizeof(specprofProcEvent{}))
	maxFrames     = 256 // SP_MAX_FRAMES
)

// ErrShortRecord is wrapped by Decode when a record is smaller than its type requires.
var ErrShortRecord = errors.New("short record")

var le = binary.LittleEndian

// Decode parses one ring buffer record into *APIEvent, *SyncExit, *LibOpen,
// *ProcEvent or *Sample.
func Decode(b []byte) (any, error) {
	if len(b) < headerSize {
		return nil, fmt.Errorf("decode record of %d bytes: %w", len(b), ErrShortRecord)
	}
	h := Header{
		Type:  EventType(le.Uint32(b[0:])),
		PID:   le.Uint32(b[4:]),
		TID:   le.Uint32(b[8:]),
		CPU:   le.Uint32(b[12:]),
		Ktime: le.Uint64(b[16:]),
	}
	need := func(n int) error {
		if len(b) < n {
			return fmt.Errorf("decode record type %d: %d bytes, want %d: %w", h.Type, len(b), n, ErrShortRecord)
		}
		return nil
	}
	switch h.Type {
	case EvLaunch, EvSyncEnter, EvColl, EvCapture, EvMark:
		if err := need(apiEventSize); err != nil {
			return nil, err
		}
		e := &APIEvent{Header: h}
		e.API = API(le.Uint32(b[24:]))
		e.LostSeq = le.Uint32(b[unsafe.Offsetof(specprofApiEvent{}.LostSeq):])
		e.Stream = le.Uint64(b[32:])
		e.Handle = le.Uint64(b[40:])
		e.Arg0 = le.Uint64(b[48:])
		e.Arg1 = le.Uint64(b[56:])
		n := decodePy(&e.Py, b[64:])
		if n > 0 {
			if n > maxFrames {
				return nil, fmt.Errorf("decode %s event: %d frames, at most %d", e.API, n, maxFrames)
			}
			// Compacted: n code objects, then their n frame addresses.
			if err := need(apiEventSize + 16*n); err != nil {
				return nil, err
			}
			e.Py.Frames = make([]uint64, n)
			e.Py.FrameAddrs = make([]uint64, n)
			st := b[apiEventSize:]
			for i := 0; i < n; i++ {
				e.Py.Frames[i] = le.Uint64(st[8*i:])
				e.Py.FrameAddrs[i] = le.Uint64(st[8*(n+i):])
			}
		}
		return e, nil
	case EvSample:
		s, err := decodeSample(h, b)
		if err != nil {
			return nil, err
		}
		return s, nil
	case EvSyncExit:
		if err := need(syncExitSize); err != nil {
			return nil, err
		}
		return &SyncExit{Header: h, API: API(le.Uint32(b[24:])), Ret: int32(le.Uint32(b[28:]))}, nil
	case EvLibOpen:
		if err := need(libEventSize); err != nil {
			return nil, err
		}
		path := b[32 : 32+256]
		if i := bytes.IndexByte(path, 0); i >= 0 {
			path = path[:i]
		}
		return &LibOpen{Header: h, FD: int32(le.Uint32(b[24:])), Stopped: le.Uint32(b[28:]) != 0, Path: string(path)}, nil
	case EvFork, EvExec, EvExit:
		if err := need(procEventSize); err != nil {
			return nil, err
		}
		return &ProcEvent{Header: h, Child: le.Uint32(b[24:])}, nil
	}
	return nil, fmt.Errorf("decode record: unknown type %d", h.Type)
}

// decodePy fills py from the fixed part of struct sp_py at p and returns
// its nframes.
func decodePy(py *Py, p []byte) int {
	py.Phase = le.Uint16(p[0:])
	py.Flags = PyFlags(le.Uint16(p[2:]))
	py.Depth = le.Uint16(p[6:])
	py.Match = int(int32(le.Uint32(p[8:])))
	py.CycleNo = le.Uint32(p[12:])
	py.PhaseCode = le.Uint64(p[16:])
	py.CycleFrame = le.Uint64(p[24:])
	py.LeafCode = le.Uint64(p[32:])
	py.LeafInstr = le.Uint64(p[40:])
	return int(le.Uint16(p[4:]))
}
