package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// sampleRecord builds a sample record as sp_sample sends it: the fixed part
// laid out by the generated mirror of struct sample_event, then n code
// objects and n frame addresses.
func sampleRecord(t *testing.T, ev specprofSampleEvent, frames, addrs []uint64) []byte {
	t.Helper()
	ev.Py.Nframes = uint16(len(frames))
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, &ev); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[:sampleFixed]
	for _, v := range append(append([]uint64(nil), frames...), addrs...) {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func TestDecodeSample(t *testing.T) {
	var ev specprofSampleEvent
	ev.H.Type = uint32(EvSample)
	ev.H.Pid, ev.H.Tid, ev.H.Cpu, ev.H.Ktime = 10, 11, 3, 123456789
	ev.UserIp, ev.KernelIp, ev.PeriodNs = 0x7f0000001234, 0xffffffff81000000, 1001001
	ev.Flags = uint32(specprofSpSampleFlagsSP_SAMPLE_KERNEL)
	ev.Py.Phase, ev.Py.Flags, ev.Py.Depth, ev.Py.Match = 2, uint16(PyWalked|PyUnknown), 3, 1
	ev.Py.PhaseCode, ev.Py.CycleFrame, ev.Py.LeafCode, ev.Py.LeafInstr = 0xc1, 0xf2, 0xc0, 0x1c0
	frames := []uint64{0xc0, 0xc1, 0xc2}
	addrs := []uint64{0xf0, 0xf1, 0xf2}
	got, err := Decode(sampleRecord(t, ev, frames, addrs))
	if err != nil {
		t.Fatal(err)
	}
	want := &Sample{
		Header:   Header{Type: EvSample, PID: 10, TID: 11, CPU: 3, Ktime: 123456789},
		UserIP:   0x7f0000001234,
		KernelIP: 0xffffffff81000000,
		PeriodNs: 1001001,
		Kernel:   true,
		Py: Py{Phase: 2, Flags: PyWalked | PyUnknown, Depth: 3, Match: 1, PhaseCode: 0xc1, CycleFrame: 0xf2,
			LeafCode: 0xc0, LeafInstr: 0x1c0, Frames: frames, FrameAddrs: addrs},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
	}

	// No user registers: the instruction pointer is not trusted.
	ev.Flags |= uint32(specprofSpSampleFlagsSP_SAMPLE_NO_USER)
	got, err = Decode(sampleRecord(t, ev, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if s := got.(*Sample); s.UserIP != 0 || len(s.Py.Frames) != 0 || s.Py.Frames != nil {
		t.Errorf("no-user sample without frames decoded as %+v", s)
	}
}

func TestDecodeSampleErrors(t *testing.T) {
	var ev specprofSampleEvent
	ev.H.Type = uint32(EvSample)
	rec := sampleRecord(t, ev, []uint64{1, 2}, []uint64{3, 4})
	for _, n := range []int{headerSize + 1, sampleFixed - 1, len(rec) - 1} {
		if _, err := Decode(rec[:n]); !errors.Is(err, ErrShortRecord) {
			t.Errorf("%d of %d bytes: err %v, want ErrShortRecord", n, len(rec), err)
		}
	}
	// More frames than BPF ever sends.
	binary.LittleEndian.PutUint16(rec[unsafe.Offsetof(ev.Py)+unsafe.Offsetof(ev.Py.Nframes):], maxFrames+1)
	if _, err := Decode(rec); err == nil {
		t.Errorf("a sample claiming %d frames decoded", maxFrames+1)
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"0":         {0},
		"0-3":       {0, 1, 2, 3},
		"0-1,4,6-7": {0, 1, 4, 6, 7},
		"":          nil,
		"3-1":       nil,
		"a-2":       nil,
		"0-1,,5":    {0, 1, 5},
		"-1":        nil,
		"1-x":       nil,
		"0-0":       {0},
		"10-11,2":   {10, 11, 2},
	} {
		got, err := parseCPUList(in)
		if want == nil {
			if err == nil {
				t.Errorf("parseCPUList(%q) = %v, want an error", in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestSampler runs the sampler over a busy child process: it must deliver
// samples of that process only, from its thread, with the period of the
// requested frequency and a user-mode instruction pointer; without a
// published interpreter layout the walk reports no configuration.
func TestSampler(t *testing.T) {
	requireRoot(t)
	tr, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	// A second busy process that is not tracked: none of its samples may
	// arrive.
	other := exec.Command("sh", "-c", "while :; do :; done")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	pid := busy.Process.Pid
	if err := tr.Track(pid, false); err != nil {
		t.Fatal(err)
	}
	const hz = 997
	if err := tr.StartSampler(hz); err != nil {
		t.Fatal(err)
	}
	var n int
	deadline := time.Now().Add(10 * time.Second)
	for n < 100 && time.Now().Before(deadline) {
		tr.SetDeadline(time.Now().Add(200 * time.Millisecond))
		ev, err := tr.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		s, ok := ev.(*Sample)
		if !ok {
			continue
		}
		n++
		if int(s.PID) != pid || int(s.TID) != pid {
			t.Fatalf("sample of pid %d tid %d; only %d is tracked", s.PID, s.TID, pid)
		}
		if want := uint64(1_000_000_000 / hz); s.PeriodNs != want {
			t.Errorf("period %d ns at %d Hz, want %d", s.PeriodNs, hz, want)
		}
		if s.UserIP == 0 && !s.Kernel {
			t.Errorf("user-mode sample without an instruction pointer: %+v", s)
		}
		if s.Py.Flags != PyNoConfig || len(s.Py.Frames) != 0 {
			t.Errorf("sample of a process without a Python layout: py %+v", s.Py)
		}
	}
	if n < 100 {
		t.Fatalf("%d samples of a busy tracked process in 10 s at %d Hz", n, hz)
	}
	tr.StopSampler()
	// Stopped: what is still buffered drains, then nothing comes.
	drainUntil := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(drainUntil) {
		tr.SetDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = tr.Read()
	}
	tr.SetDeadline(time.Now().Add(500 * time.Millisecond))
	for {
		ev, err := tr.Read()
		if err != nil {
			break
		}
		if _, ok := ev.(*Sample); ok {
			t.Fatal("a sample arrived after StopSampler")
		}
	}
	l, err := tr.Lost()
	if err != nil {
		t.Fatal(err)
	}
	if l.Sample != 0 {
		t.Errorf("%d samples lost", l.Sample)
	}
}

func TestStartSamplerBadFrequency(t *testing.T) {
	var tr Tracer
	if err := tr.StartSampler(0); err == nil {
		t.Error("StartSampler(0) succeeded")
	}
}
