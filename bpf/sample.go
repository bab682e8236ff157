package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Sample is one CPU sample of a thread of a tracked process, taken by the
// perf-event sampler (Tracer.StartSampler).
type Sample struct {
	Header
	// UserIP is the native leaf: the user-mode instruction pointer (where
	// the thread entered the kernel when Kernel is set), 0 when unknown.
	UserIP uint64
	// KernelIP is the kernel instruction pointer when Kernel is set.
	KernelIP uint64
	// PeriodNs is the CPU time the sample stands for (the period of the
	// cpu-clock event: 1e9 / frequency).
	PeriodNs uint64
	// Kernel reports that the thread was in the kernel on its own behalf
	// (a system call, a page fault).
	Kernel bool
	// Py is the walk of the thread's Python stack. Py.Frames and
	// Py.FrameAddrs hold every walked frame, innermost first (at most
	// SP_MAX_FRAMES; Py.Flags has PyTruncated when the stack was deeper).
	Py Py
}

// sampleFixed is the size of a sample record without its frames.
var sampleFixed = int(unsafe.Offsetof(specprofSampleEvent{}.Py)) + int(unsafe.Sizeof(specprofSampleEvent{}.Py))

// decodeSample parses an SP_EV_SAMPLE record: the fixed part, then
// py.nframes code objects and as many frame addresses.
func decodeSample(h Header, b []byte) (*Sample, error) {
	if len(b) < sampleFixed {
		return nil, fmt.Errorf("decode sample: %d bytes, want %d: %w", len(b), sampleFixed, ErrShortRecord)
	}
	flags := le.Uint32(b[48:])
	s := &Sample{Header: h, UserIP: le.Uint64(b[24:]), KernelIP: le.Uint64(b[32:]), PeriodNs: le.Uint64(b[40:]),
		Kernel: flags&uint32(specprofSpSampleFlagsSP_SAMPLE_KERNEL) != 0}
	if flags&uint32(specprofSpSampleFlagsSP_SAMPLE_NO_USER) != 0 {
		s.UserIP = 0
	}
	n := decodePy(&s.Py, b[int(unsafe.Offsetof(specprofSampleEvent{}.Py)):])
	if n > maxFrames {
		return nil, fmt.Errorf("decode sample: %d frames, at most %d", n, maxFrames)
	}
	if want := sampleFixed + 16*n; len(b) < want {
		return nil, fmt.Errorf("decode sample: %d bytes for %d frames, want %d: %w", len(b), n, want, ErrShortRecord)
	}
	if n > 0 {
		st := b[sampleFixed:]
		s.Py.Frames = make([]uint64, n)
		s.Py.FrameAddrs = make([]uint64, n)
		for i := range n {
			s.Py.Frames[i] = le.Uint64(st[8*i:])
			s.Py.FrameAddrs[i] = le.Uint64(st[8*(n+i):])
		}
	}
	return s, nil
}

// DefaultSampleHz is the sampler's default frequency: prime, so that it
// does not beat with periodic work of the target (perf's habit).
const DefaultSampleHz = 99

// StartSampler samples the threads of the tracked processes hz times per
// second of CPU time: one cpu-clock perf event per online CPU runs the
// sp_sample program, which reports the interrupted thread when its process
// is tracked (Sample records). Calling it again restarts the sampler at the
// new frequency. CPUs brought online later are not sampled. It needs
// CAP_PERFMON (or root), and hz at most kernel.perf_event_max_sample_rate.
func (t *Tracer) StartSampler(hz int) error {
	if hz <= 0 {
		return fmt.Errorf("start CPU sampler: frequency %d Hz: must be positive", hz)
	}
	t.StopSampler()
	cpus, err := onlineCPUs()
	if err != nil {
		return fmt.Errorf("start CPU sampler: %w", err)
	}
	var fds []int
	for _, cpu := range cpus {
		fd, err := openSampler(cpu, hz, t.objs.SpSample.FD())
		if err != nil {
			closeSamplers(fds)
			return err
		}
		fds = append(fds, fd)
	}
	t.smpMu.Lock()
	t.samplers = fds
	t.smpMu.Unlock()
	return nil
}

// StopSampler stops the CPU sampler (a no-op when it is not running).
func (t *Tracer) StopSampler() {
	t.smpMu.Lock()
	fds := t.samplers
	t.samplers = nil
	t.smpMu.Unlock()
	closeSamplers(fds)
}

// SetSamplerEnabled pauses (false) or resumes (true) a running CPU sampler
// without closing its perf events: probe windows (agent) sample only while
// the probes are in place. A no-op when the sampler is not running.
func (t *Tracer) SetSamplerEnabled(on bool) error {
	req := uint(unix.PERF_EVENT_IOC_DISABLE)
	if on {
		req = unix.PERF_EVENT_IOC_ENABLE
	}
	t.smpMu.Lock()
	defer t.smpMu.Unlock()
	for _, fd := range t.samplers {
		if err := unix.IoctlSetInt(fd, req, 0); err != nil {
			return fmt.Errorf("switch the CPU sampler (enable %v): %w", on, err)
		}
	}
	return nil
}

// openSampler opens the cpu-clock event of one CPU in frequency mode,
// attaches prog and enables it.
func openSampler(cpu, hz, prog int) (int, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(hz),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			if max, rerr := os.ReadFile("/proc/sys/kernel/perf_event_max_sample_rate"); rerr == nil {
				return -1, fmt.Errorf("open perf event cpu %d at %d Hz: %w (the kernel allows at most %s Hz: kernel.perf_event_max_sample_rate)",
					cpu, hz, err, strings.TrimSpace(string(max)))
			}
		}
		return -1, fmt.Errorf("open perf event cpu %d at %d Hz: %w", cpu, hz, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("attach perf event cpu %d: %w", cpu, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("enable perf event cpu %d: %w", cpu, err)
	}
	return fd, nil
}

// closeSamplers disables and closes perf events (closing detaches the
// program).
func closeSamplers(fds []int) {
	for _, fd := range fds {
		_ = unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
		_ = unix.Close(fd)
	}
}

// onlineCPUs lists the online CPUs (/sys/devices/system/cpu/online).
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("list online CPUs: %w", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("list online CPUs: %w", err)
	}
	return cpus, nil
}

// parseCPUList parses the kernel's CPU list format ("0-3,5,7-8").
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse CPU list %q: %w", s, err)
			}
		}
		if a < 0 || b < a {
			return nil, fmt.Errorf("parse CPU list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("parse CPU list %q: no CPU", s)
	}
	return cpus, nil
}

// EnableRunStats turns on the kernel's BPF run-time statistics (read by
// SamplerRunStats) until the returned Closer is closed. While on, every BPF
// program in the system pays two clock reads per run.
func EnableRunStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	return c, nil
}

// SamplerRunStats returns how many times the sampler's program ran (on
// every CPU, whatever thread it interrupted) and the time it spent, as
// counted while run statistics were enabled (EnableRunStats).
func (t *Tracer) SamplerRunStats() (runs uint64, total time.Duration, err error) {
	st, err := t.objs.SpSample.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("read sampler program statistics: %w", err)
	}
	return st.RunCount, st.Runtime, nil
}
