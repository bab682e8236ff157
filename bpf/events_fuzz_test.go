package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// encodeRecord lays out a decoded event as the BPF program sends it,
// through the generated mirrors of the C structs, so that decoding it again
// must give the same event: a decoder reading a field from the wrong
// offset fails the round trip.
func encodeRecord(ev any) ([]byte, error) {
	var buf bytes.Buffer
	write := func(v any) {
		// A bytes.Buffer does not fail, nor do fixed-size values.
		_ = binary.Write(&buf, binary.LittleEndian, v)
	}
	frames := func(py Py) {
		for _, v := range append(append([]uint64(nil), py.Frames...), py.FrameAddrs...) {
			write(v)
		}
	}
	switch e := ev.(type) {
	case *APIEvent:
		var r specprofApiEvent
		setHeader(&r.H.Type, &r.H.Pid, &r.H.Tid, &r.H.Cpu, &r.H.Ktime, e.Header)
		r.Api, r.LostSeq, r.Stream, r.Handle, r.Arg0, r.Arg1 = uint32(e.API), e.LostSeq, e.Stream, e.Handle, e.Arg0, e.Arg1
		r.Py.Phase, r.Py.Flags, r.Py.Nframes, r.Py.Depth = e.Py.Phase, uint16(e.Py.Flags), uint16(len(e.Py.Frames)), e.Py.Depth
		r.Py.Match, r.Py.CycleNo, r.Py.PhaseCode, r.Py.CycleFrame, r.Py.LeafCode, r.Py.LeafInstr = uint32(int32(e.Py.Match)), e.Py.CycleNo, e.Py.PhaseCode, e.Py.CycleFrame, e.Py.LeafCode, e.Py.LeafInstr
		write(&r)
		frames(e.Py)
	case *Sample:
		var r specprofSampleEvent
		setHeader(&r.H.Type, &r.H.Pid, &r.H.Tid, &r.H.Cpu, &r.H.Ktime, e.Header)
		r.UserIp, r.KernelIp, r.PeriodNs = e.UserIP, e.KernelIP, e.PeriodNs
		if e.Kernel {
			r.Flags = uint32(specprofSpSampleFlagsSP_SAMPLE_KERNEL)
		}
		r.Py.Phase, r.Py.Flags, r.Py.Nframes, r.Py.Depth = e.Py.Phase, uint16(e.Py.Flags), uint16(len(e.Py.Frames)), e.Py.Depth
		r.Py.Match, r.Py.CycleNo, r.Py.PhaseCode, r.Py.CycleFrame, r.Py.LeafCode, r.Py.LeafInstr = uint32(int32(e.Py.Match)), e.Py.CycleNo, e.Py.PhaseCode, e.Py.CycleFrame, e.Py.LeafCode, e.Py.LeafInstr
		write(&r)
		buf.Truncate(sampleFixed) // the stack array is not sent
		frames(e.Py)
	case *SyncExit:
		var r specprofSyncExitEvent
		setHeader(&r.H.Type, &r.H.Pid, &r.H.Tid, &r.H.Cpu, &r.H.Ktime, e.Header)
		r.Api, r.Ret = uint32(e.API), e.Ret
		write(&r)
	case *LibOpen:
		var r specprofLibEvent
		setHeader(&r.H.Type, &r.H.Pid, &r.H.Tid, &r.H.Cpu, &r.H.Ktime, e.Header)
		r.Fd = e.FD
		if e.Stopped {
			r.Stopped = 1
		}
		for i := range len(e.Path) {
			r.Path[i] = int8(e.Path[i])
		}
		write(&r)
	case *ProcEvent:
		var r specprofProcEvent
		setHeader(&r.H.Type, &r.H.Pid, &r.H.Tid, &r.H.Cpu, &r.H.Ktime, e.Header)
		r.Child = e.Child
		write(&r)
	default:
		return nil, fmt.Errorf("encode a %T: not a record", ev)
	}
	return buf.Bytes(), nil
}

func setHeader(typ, pid, tid, cpu *uint32, ktime *uint64, h Header) {
	*typ, *pid, *tid, *cpu, *ktime = uint32(h.Type), h.PID, h.TID, h.CPU, h.Ktime
}

// FuzzDecode feeds Decode arbitrary ring buffer records. A record decodes
// to the event its type names or to an error; what it decodes to never
// claims more frames than the record holds, and survives a round trip
// through the C layout.
func FuzzDecode(f *testing.F) {
	seed := func(ev any) {
		b, err := encodeRecord(ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	h := func(typ EventType) Header { return Header{Type: typ, PID: 10, TID: 11, CPU: 3, Ktime: 123456789} }
	py := Py{Phase: 2, Flags: PyWalked | PyUnknown, Depth: 3, Match: 1, PhaseCode: 0xc1, CycleFrame: 0xf2, LeafCode: 0xc0, LeafInstr: 0x1c0,
		Frames: []uint64{0xc0, 0xc1, 0xc2}, FrameAddrs: []uint64{0xf0, 0xf1, 0xf2}}
	seed(&APIEvent{Header: h(EvLaunch), API: APILaunchKernel, LostSeq: 7, Stream: 0x5000, Handle: 0x6000, Arg0: 1 | 2<<21, Arg1: 128, Py: py})
	seed(&APIEvent{Header: h(EvSyncEnter), API: APILaunchKernel, Py: Py{Flags: PyWalked, Match: -1}})
	seed(&Sample{Header: h(EvSample), UserIP: 0x7f0000001234, KernelIP: 0xffffffff81000000, PeriodNs: 1001001, Kernel: true, Py: py})
	seed(&SyncExit{Header: h(EvSyncExit), API: APILaunchKernel, Ret: -2})
	seed(&LibOpen{Header: h(EvLibOpen), FD: 5, Stopped: true, Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1"})
	seed(&ProcEvent{Header: h(EvFork), Child: 12})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			if ev != nil {
				t.Fatalf("Decode returned %+v with error %v", ev, err)
			}
			if len(b) < headerSize && !errors.Is(err, ErrShortRecord) {
				t.Fatalf("%d bytes: error %v, want ErrShortRecord", len(b), err)
			}
			return
		}
		var hdr Header
		var p *Py
		fixed := 0
		switch e := ev.(type) {
		case *APIEvent:
			hdr, p, fixed = e.Header, &e.Py, apiEventSize
		case *Sample:
			hdr, p, fixed = e.Header, &e.Py, sampleFixed
		case *SyncExit:
			hdr, fixed = e.Header, syncExitSize
		case *LibOpen:
			hdr, fixed = e.Header, libEventSize
			if bytes.IndexByte([]byte(e.Path), 0) >= 0 || len(e.Path) > 256 {
				t.Fatalf("path %q", e.Path)
			}
		case *ProcEvent:
			hdr, fixed = e.Header, procEventSize
		default:
			t.Fatalf("Decode returned a %T", ev)
		}
		if uint32(hdr.Type) != binary.LittleEndian.Uint32(b) || hdr.Ktime != binary.LittleEndian.Uint64(b[16:]) {
			t.Fatalf("header %+v from % x", hdr, b[:headerSize])
		}
		if len(b) < fixed {
			t.Fatalf("a %T decoded from %d bytes, want %d", ev, len(b), fixed)
		}
		if p != nil {
			n := len(p.Frames)
			if n != len(p.FrameAddrs) || n > maxFrames || len(b) < fixed+16*n {
				t.Fatalf("%d frames and %d addresses from %d bytes", n, len(p.FrameAddrs), len(b))
			}
		}
		rec, err := encodeRecord(ev)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(rec)
		if err != nil {
			t.Fatalf("re-encoded %+v: %v", ev, err)
		}
		if !reflect.DeepEqual(again, ev) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", again, ev)
		}
	})
}
