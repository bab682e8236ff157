package bpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// PyConfig tells BPF how to walk one process's interpreter. All offsets are
// bytes; user space (agent/python) derives them from the target's version or
// its _Py_DebugOffsets.
// PyCycleAtStart is PyConfig.CycleFlags' bit for phase.Cycle.BeforeStart
// "outside": a cycle-function call opens a cycle only at its first entry
// into the start phase. Mirrors SP_CYCCFG_AT_START in c/events.h.
const PyCycleAtStart = uint32(specprofSpCyccfgSP_CYCCFG_AT_START)

type PyConfig = specprofPyConfig

// Interpreter layout flags for PyConfig.Flags.
const (
	CfgCFrame      = uint32(specprofSpCfgFlagsSP_CFG_CFRAME)
	CfgSkipOwner   = uint32(specprofSpCfgFlagsSP_CFG_SKIP_OWNER)
	CfgTaggedExec  = uint32(specprofSpCfgFlagsSP_CFG_TAGGED_EXEC)
	CfgPthreadTID  = uint32(specprofSpCfgFlagsSP_CFG_PTHREAD_TID)
	CfgFrameObject = uint32(specprofSpCfgFlagsSP_CFG_FRAME_OBJECT)
)

// CodeClass is what BPF needs to know about one code object.
type CodeClass struct {
	Phase    uint16 // phase when this frame is the innermost match; 0 none
	AltPhase uint16 // phase when a marker frame lies below; 0 none
	Marker   bool   // satisfies an outer frame's requires_below
	Cycle    bool   // the cycle function
	// Volatile marks a code object that can be freed while the process
	// runs (a module body, exec'd code): BPF checks its Qualname on every
	// new frame and never treats it as plain.
	Volatile bool
	Qualname uint64 // co_qualname pointer, to catch reused addresses; 0 skips the check
}

// Lost counts records the BPF side could not deliver.
type Lost struct {
	RingBuf uint64 // ring buffer full
	Scratch uint64 // per-CPU scratch unavailable
	OpenAt  uint64 // openat bookkeeping map full
	Sample  uint64 // ring buffer full: CPU samples dropped
	// LibOpen counts library-open records lost to a full ring buffer (also
	// in RingBuf): the process was not stopped, and its probes go in when
	// the agent finds the library in its maps.
	LibOpen uint64
}

// Tracer owns the loaded programs, the ring buffer and the uprobe links.
type Tracer struct {
	objs   specprofObjects
	rd     *ringbuf.Reader
	rec    ringbuf.Record // Read's buffer
	global []link.Link

	mu    sync.Mutex
	links map[libKey][]link.Link
	// multi: probes are uprobe_multi links (one per program and library)
	// rather than one perf-event uprobe per symbol. The kernel removes a
	// perf-event uprobe in about 0.1 s, one after the other (a libcuda's
	// 40 took 3-6 s); a uprobe_multi link in tens of milliseconds, and
	// they close concurrently. Probe windows (agent, --probe-duty) need
	// that.
	multi bool
	exes  map[string]*libExe // opened libraries by path, for re-attaching

	genMu sync.Mutex
	gen   uint64 // last value written to code_gen

	smpMu    sync.Mutex
	samplers []int // the CPU sampler's perf event fds (sample.go)

	mountedTracefs bool
}

// MountedTracefs reports whether Load mounted tracefs, which was not mounted.
func (t *Tracer) MountedTracefs() bool { return t.mountedTracefs }

type libKey struct {
	pid  int
	path string
}

// libExe is an opened library and the symbols it defines.
type libExe struct {
	ex   *link.Executable
	syms map[string]bool
}

// Load loads the BPF objects and attaches the process lifecycle and openat
// tracepoints, mounting tracefs first if it is not mounted. It needs root or
// CAP_BPF+CAP_PERFMON (and CAP_SYS_ADMIN for the mount).
func Load() (*Tracer, error) { return LoadWith(LoadOptions{}) }

// LoadOptions are the choices of LoadWith.
type LoadOptions struct {
	// NoUprobeMulti attaches perf-event uprobes even where the kernel has
	// uprobe_multi links (6.6+): a diagnostic of the older path.
	NoUprobeMulti bool
}

// LoadWith is Load with options.
func LoadWith(o LoadOptions) (*Tracer, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}
	t := &Tracer{links: map[libKey][]link.Link{}, exes: map[string]*libExe{}}
	mounted, err := ensureTracefs()
	if err != nil {
		return nil, err
	}
	t.mountedTracefs = mounted
	spec, err := loadSpecprof()
	if err != nil {
		return nil, fmt.Errorf("load BPF object: %w", err)
	}
	t.multi = !o.NoUprobeMulti && features.HaveBPFLinkUprobeMulti() == nil
	if t.multi {
		// A program is attached either way, never both: the attach type is
		// fixed when it is loaded.
		for _, name := range uprobePrograms() {
			ps, ok := spec.Programs[name]
			if !ok {
				return nil, fmt.Errorf("load BPF object: no program %s", name)
			}
			ps.AttachType = ebpf.AttachTraceUprobeMulti
		}
	}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load BPF programs (verifier): %+v", ve)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("load BPF programs: %w (run as root or grant CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)", err)
		}
		return nil, fmt.Errorf("load BPF programs: %w", err)
	}
	attach := func(what string, f func() (link.Link, error)) error {
		l, err := f()
		if err != nil {
			return fmt.Errorf("attach %s: %w", what, err)
		}
		t.global = append(t.global, l)
		return nil
	}
	err = errors.Join(
		attach("tp_btf/sched_process_fork", func() (link.Link, error) {
			return link.AttachTracing(link.TracingOptions{Program: t.objs.SpFork})
		}),
		attach("tracepoint sched/sched_process_exec", func() (link.Link, error) {
			return link.Tracepoint("sched", "sched_process_exec", t.objs.SpExec, nil)
		}),
		attach("tracepoint sched/sched_process_exit", func() (link.Link, error) {
			return link.Tracepoint("sched", "sched_process_exit", t.objs.SpExit, nil)
		}),
		attach("tracepoint syscalls/sys_enter_openat", func() (link.Link, error) {
			return link.Tracepoint("syscalls", "sys_enter_openat", t.objs.SpOpenatEnter, nil)
		}),
		attach("tracepoint syscalls/sys_exit_openat", func() (link.Link, error) {
			return link.Tracepoint("syscalls", "sys_exit_openat", t.objs.SpOpenatExit, nil)
		}),
	)
	if err != nil {
		t.Close()
		return nil, err
	}
	rd, err := ringbuf.NewReader(t.objs.Events)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t.rd = rd
	return t, nil
}

// Track starts following pid (and the processes it forks from now on).
// With stopOnLib the process is stopped with SIGSTOP whenever it opens
// libcuda or libnccl, so probes can be attached before the first call; the
// caller must then attach and send SIGCONT (see LibOpen.Stopped).
func (t *Tracer) Track(pid int, stopOnLib bool) error {
	var flags uint32
	if stopOnLib {
		flags |= uint32(specprofSpTrackFlagsSP_TRACK_STOP_ON_LIB)
	}
	if err := t.objs.Tracked.Put(uint32(pid), flags); err != nil {
		return fmt.Errorf("track pid %d: %w", pid, err)
	}
	return nil
}

// SetStopOnLib changes whether pid is stopped on library loads.
func (t *Tracer) SetStopOnLib(pid int, stop bool) error { return t.Track(pid, stop) }

// SetPyConfig publishes the interpreter layout of pid.
func (t *Tracer) SetPyConfig(pid int, cfg PyConfig) error {
	if err := t.objs.PyConfigs.Put(uint32(pid), cfg); err != nil {
		return fmt.Errorf("set Python config of pid %d: %w", pid, err)
	}
	return nil
}

// SetCodeClass publishes the classification of one code object of pid.
func (t *Tracer) SetCodeClass(pid int, code uint64, c CodeClass) error {
	v := specprofCodeClass{Phase: c.Phase, AltPhase: c.AltPhase, Qualname: c.Qualname}
	if c.Marker {
		v.Flags |= uint16(specprofSpClassFlagsSP_CLASS_MARKER)
	}
	if c.Cycle {
		v.Flags |= uint16(specprofSpClassFlagsSP_CLASS_CYCLE)
	}
	if c.Volatile {
		v.Flags |= uint16(specprofSpClassFlagsSP_CLASS_VOLATILE)
	}
	key := specprofCodeKey{Pid: uint32(pid), Code: code}
	err := t.objs.CodeClasses.Update(key, v, ebpf.UpdateNoExist)
	if errors.Is(err, ebpf.ErrKeyExist) {
		// BPF caches classes (code_cache): replacing one must invalidate
		// the cached copies, after the map holds the new value.
		var old specprofCodeClass
		if t.objs.CodeClasses.Lookup(key, &old) == nil && old == v {
			return nil
		}
		if err = t.objs.CodeClasses.Put(key, v); err == nil {
			err = t.invalidateClasses()
		}
	}
	if err != nil {
		return fmt.Errorf("set class of code object %#x in pid %d: %w", code, pid, err)
	}
	return nil
}

// invalidateClasses bumps the generation that BPF's code class cache
// entries must match. Call it after removing or changing code_classes
// entries (a new entry needs nothing: BPF never caches a miss).
func (t *Tracer) invalidateClasses() error {
	t.genMu.Lock()
	defer t.genMu.Unlock()
	t.gen++
	if err := t.objs.CodeGen.Put(uint32(0), t.gen); err != nil {
		return fmt.Errorf("invalidate cached code classes: %w", err)
	}
	return nil
}

// Forget removes everything BPF holds about pid: tracking, interpreter
// layout, code classes, and detaches its uprobes.
func (t *Tracer) Forget(pid int) {
	_ = t.objs.Tracked.Delete(uint32(pid))
	_ = t.objs.PyConfigs.Delete(uint32(pid))
	t.ForgetCode(pid)
	t.forgetThreadCycles(pid)
	t.mu.Lock()
	for k, ls := range t.links {
		if k.pid == pid {
			for _, l := range ls {
				_ = l.Close()
			}
			delete(t.links, k)
		}
	}
	t.mu.Unlock()
}

// ForgetCode drops the code classes of pid (after exec, or to reclassify).
func (t *Tracer) ForgetCode(pid int) {
	var (
		k    specprofCodeKey
		v    specprofCodeClass
		dead []specprofCodeKey
	)
	it := t.objs.CodeClasses.Iterate()
	for it.Next(&k, &v) {
		if k.Pid == uint32(pid) {
			dead = append(dead, k)
		}
	}
	for _, k := range dead {
		_ = t.objs.CodeClasses.Delete(k)
	}
	// Always, even when nothing was found: the iteration may have raced
	// with a concurrent update. Writing one array element only fails once
	// the maps are closed, and then no program can use a stale class.
	_ = t.invalidateClasses()
}

// Attached is the result of AttachLibrary.
type Attached struct {
	Symbols []string // symbols hooked
	Missing []string // symbols the library does not export
}

// AttachLibrary attaches every hook of lib to the library file at path (as
// openable by the agent, e.g. /proc/PID/root/...), filtered to pid. It is
// idempotent per (pid, path); after DetachLibraries it attaches again.
func (t *Tracer) AttachLibrary(pid int, path string, lib Library) (Attached, error) {
	var res Attached
	key := libKey{pid, path}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.links[key]; ok {
		return res, nil
	}
	le, err := t.exe(path)
	if err != nil {
		return res, fmt.Errorf("open %s %s: %w", lib, path, err)
	}
	var links []link.Link
	fail := func(err error) (Attached, error) {
		closeAll(links)
		return Attached{}, err
	}
	for _, h := range Hooks {
		if h.Lib != lib {
			continue
		}
		prog := t.program(h.Prog)
		ret := t.program(h.RetProg)
		var syms []string
		for _, sym := range h.Symbols {
			if le.syms[sym] {
				syms = append(syms, sym)
			} else {
				res.Missing = append(res.Missing, sym)
			}
		}
		if len(syms) == 0 {
			continue
		}
		if t.multi {
			l, err := le.ex.UprobeMulti(syms, prog, &link.UprobeMultiOptions{PID: uint32(pid)})
			if err != nil {
				return fail(fmt.Errorf("attach uprobe_multi %s (%s) in %s: %w", h.Name, strings.Join(syms, " "), path, err))
			}
			links = append(links, l)
			if ret != nil {
				l, err := le.ex.UretprobeMulti(syms, ret, &link.UprobeMultiOptions{PID: uint32(pid)})
				if err != nil {
					return fail(fmt.Errorf("attach uretprobe_multi %s (%s) in %s: %w", h.Name, strings.Join(syms, " "), path, err))
				}
				links = append(links, l)
			}
			res.Symbols = append(res.Symbols, syms...)
			continue
		}
		for _, sym := range syms {
			l, err := le.ex.Uprobe(sym, prog, &link.UprobeOptions{PID: pid})
			if err != nil {
				return fail(fmt.Errorf("attach uprobe %s in %s: %w", sym, path, err))
			}
			links = append(links, l)
			if ret != nil {
				l, err := le.ex.Uretprobe(sym, ret, &link.UprobeOptions{PID: pid})
				if err != nil {
					return fail(fmt.Errorf("attach uretprobe %s in %s: %w", sym, path, err))
				}
				links = append(links, l)
			}
			res.Symbols = append(res.Symbols, sym)
		}
	}
	if len(res.Symbols) == 0 {
		return res, fmt.Errorf("attach %s %s: none of the hooked symbols is exported (is this really %s?)", lib, path, lib)
	}
	t.links[key] = links
	return res, nil
}

// exe opens the library at path once (under t.mu): re-attaching it (probe
// windows) must not parse a 100 MB libcuda again.
func (t *Tracer) exe(path string) (*libExe, error) {
	if le := t.exes[path]; le != nil {
		return le, nil
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	syms, err := definedSymbols(path)
	if err != nil {
		return nil, err
	}
	le := &libExe{ex: ex, syms: syms}
	t.exes[path] = le
	return le, nil
}

// definedSymbols lists the functions the ELF file at path defines (dynamic
// and static symbol tables): a uprobe_multi link fails whole on one
// missing symbol, so the hooks' variants a library lacks are left out first.
func definedSymbols(path string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read symbols: %w", err)
	}
	defer f.Close()
	out := map[string]bool{}
	for _, read := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("read symbols: %w", err)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Section != elf.SHN_UNDEF {
				out[s.Name] = true
			}
		}
	}
	return out, nil
}

// UprobeMulti reports whether probes are uprobe_multi links (kernel 6.6+;
// LoadOptions.NoUprobeMulti turns them off) rather than perf-event uprobes.
func (t *Tracer) UprobeMulti() bool { return t.multi }

// uprobePrograms names every program attached as a uprobe.
func uprobePrograms() []string {
	names := []string{"sp_empty"}
	for _, h := range Hooks {
		names = append(names, h.Prog)
		if h.RetProg != "" {
			names = append(names, h.RetProg)
		}
	}
	return names
}

// closeAll closes links concurrently: each removal waits for the kernel's
// grace period, and uprobe_multi links wait in parallel.
func closeAll(ls []link.Link) {
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.Close()
		}()
	}
	wg.Wait()
}

func (t *Tracer) program(name string) *ebpf.Program {
	switch name {
	case "":
		return nil
	case "sp_launch_kernel":
		return t.objs.SpLaunchKernel
	case "sp_launch_kernel_ex":
		return t.objs.SpLaunchKernelEx
	case "sp_graph_launch":
		return t.objs.SpGraphLaunch
	case "sp_stream_sync":
		return t.objs.SpStreamSync
	case "sp_stream_sync_ret":
		return t.objs.SpStreamSyncRet
	case "sp_event_sync":
		return t.objs.SpEventSync
	case "sp_event_sync_ret":
		return t.objs.SpEventSyncRet
	case "sp_ctx_sync":
		return t.objs.SpCtxSync
	case "sp_ctx_sync_ret":
		return t.objs.SpCtxSyncRet
	case "sp_memcpy_dtoh":
		return t.objs.SpMemcpyDtoh
	case "sp_memcpy_dtoh_ret":
		return t.objs.SpMemcpyDtohRet
	case "sp_memcpy_dtoh_async":
		return t.objs.SpMemcpyDtohAsync
	case "sp_memcpy_dtoh_async_ret":
		return t.objs.SpMemcpyDtohAsyncRet
	case "sp_memcpy_htod":
		return t.objs.SpMemcpyHtod
	case "sp_memcpy_htod_ret":
		return t.objs.SpMemcpyHtodRet
	case "sp_memcpy_htod_async":
		return t.objs.SpMemcpyHtodAsync
	case "sp_memcpy_htod_async_ret":
		return t.objs.SpMemcpyHtodAsyncRet
	case "sp_memcpy":
		return t.objs.SpMemcpy
	case "sp_memcpy_ret":
		return t.objs.SpMemcpyRet
	case "sp_memcpy_async":
		return t.objs.SpMemcpyAsync
	case "sp_memcpy_async_ret":
		return t.objs.SpMemcpyAsyncRet
	case "sp_memcpy_dtod_async":
		return t.objs.SpMemcpyDtodAsync
	case "sp_memset_async":
		return t.objs.SpMemsetAsync
	case "sp_memcpy_dtod":
		return t.objs.SpMemcpyDtod
	case "sp_memset":
		return t.objs.SpMemset
	case "sp_begin_capture":
		return t.objs.SpBeginCapture
	case "sp_end_capture":
		return t.objs.SpEndCapture
	case "sp_graph_instantiate":
		return t.objs.SpGraphInstantiate
	case "sp_event_record":
		return t.objs.SpEventRecord
	case "sp_stream_wait_event":
		return t.objs.SpStreamWaitEvent
	case "sp_nccl_all_reduce":
		return t.objs.SpNcclAllReduce
	case "sp_nccl_all_gather":
		return t.objs.SpNcclAllGather
	case "sp_nccl_reduce_scatter":
		return t.objs.SpNcclReduceScatter
	case "sp_nccl_broadcast":
		return t.objs.SpNcclBroadcast
	case "sp_nccl_reduce":
		return t.objs.SpNcclReduce
	case "sp_nccl_send":
		return t.objs.SpNcclSend
	case "sp_nccl_recv":
		return t.objs.SpNcclRecv
	case "sp_nccl_group_start":
		return t.objs.SpNcclGroupStart
	case "sp_nccl_group_end":
		return t.objs.SpNcclGroupEnd
	}
	panic("bpf: unknown program " + name)
}

// Read blocks until the next record and decodes it. It returns
// ringbuf.ErrClosed (wrapped) after Close. Call it from one goroutine at a
// time (it reuses one record buffer).
func (t *Tracer) Read() (any, error) {
	// One record buffer serves every read (Decode copies what it keeps):
	// an allocation per record is garbage at the launch rate.
	err := t.rd.ReadInto(&t.rec)
	if err != nil {
		return nil, fmt.Errorf("read ring buffer: %w", err)
	}
	ev, err := Decode(t.rec.RawSample)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return ev, nil
}

// ErrDecode wraps Read errors about a malformed record (counted, not fatal).
var ErrDecode = errors.New("bad record")

// ErrClosed is returned by Read after Close.
var ErrClosed = ringbuf.ErrClosed

// Lost sums the per-CPU loss counters.
func (t *Tracer) Lost() (Lost, error) {
	var l Lost
	for idx, dst := range map[uint32]*uint64{
		uint32(specprofSpLostSP_LOST_RINGBUF):  &l.RingBuf,
		uint32(specprofSpLostSP_LOST_SCRATCH):  &l.Scratch,
		uint32(specprofSpLostSP_LOST_OPENAT):   &l.OpenAt,
		uint32(specprofSpLostSP_LOST_SAMPLE):   &l.Sample,
		uint32(specprofSpLostSP_LOST_LIB_OPEN): &l.LibOpen,
	} {
		var per []uint64
		if err := t.objs.Lost.Lookup(idx, &per); err != nil {
			return l, fmt.Errorf("read loss counters: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return l, nil
}

// Close detaches everything and frees the BPF objects.
func (t *Tracer) Close() error {
	t.StopSampler()
	if t.rd != nil {
		_ = t.rd.Close()
	}
	t.mu.Lock()
	var all []link.Link
	for k, ls := range t.links {
		all = append(all, ls...)
		delete(t.links, k)
	}
	t.mu.Unlock()
	closeAll(all)
	closeAll(t.global)
	t.global = nil
	return t.objs.Close()
}

// SetDeadline makes a blocked Read return os.ErrDeadlineExceeded at t (to
// drain the ring buffer at the end of a session).
func (t *Tracer) SetDeadline(d time.Time) { t.rd.SetDeadline(d) }

// AttachEmpty attaches a program that does nothing to symbol in the library
// at path, for pid: the cost of the uprobe trap alone, the baseline that
// benchmarks compare specprof's programs with. Close the link to detach.
func (t *Tracer) AttachEmpty(pid int, path, symbol string) (link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var l link.Link
	if t.multi {
		l, err = ex.UprobeMulti([]string{symbol}, t.objs.SpEmpty, &link.UprobeMultiOptions{PID: uint32(pid)})
	} else {
		l, err = ex.Uprobe(symbol, t.objs.SpEmpty, &link.UprobeOptions{PID: pid})
	}
	if err != nil {
		return nil, fmt.Errorf("attach empty uprobe %s in %s: %w", symbol, path, err)
	}
	return l, nil
}

// DetachLibraries removes pid's uprobes (the tracking and the published
// interpreter layout stay), e.g. to measure the target without probes.
func (t *Tracer) DetachLibraries(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var all []link.Link
	for k, ls := range t.links {
		if k.pid == pid {
			all = append(all, ls...)
			delete(t.links, k)
		}
	}
	closeAll(all)
}

// ProgramStats returns the kernel's accumulated run time and run count of
// the program named prog (e.g. "sp_launch_kernel", the one on
// cuLaunchKernel), or of the empty baseline program for "": the cost of the
// BPF program itself, without the uprobe trap around it. The kernel counts only while
// BPF statistics are enabled (EnableStats, or the sysctl
// kernel.bpf_stats_enabled).
func (t *Tracer) ProgramStats(prog string) (*ebpf.ProgramStats, error) {
	p := t.objs.SpEmpty
	if prog != "" {
		if p = t.program(prog); p == nil {
			return nil, fmt.Errorf("program stats: no program named %q", prog)
		}
	}
	st, err := p.Stats()
	if err != nil {
		return nil, fmt.Errorf("program stats %q: %w", prog, err)
	}
	return st, nil
}

// EnableStats turns on the kernel's BPF run-time statistics until the
// returned closer is closed (they cost two clock reads per program run).
func EnableStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	return c, nil
}
