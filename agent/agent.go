package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/specprof/specprof/agent/correlate"
	"github.com/specprof/specprof/agent/gpuinfo"
	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/agent/proc"
	"github.com/specprof/specprof/agent/python"
	"github.com/specprof/specprof/bpf"
)

// Probes is what the agent needs from the BPF side (bpf.Tracer implements
// it); an interface so the attribution logic can be tested on recorded events.
type Probes interface {
	Read() (any, error)
	Track(pid int, stopOnLib bool) error
	SetPyConfig(pid int, cfg bpf.PyConfig) error
	SetCodeClass(pid int, code uint64, c bpf.CodeClass) error
	ForgetCode(pid int)
	Forget(pid int)
	AttachLibrary(pid int, path string, lib bpf.Library) (bpf.Attached, error)
	DetachLibraries(pid int)
	Lost() (bpf.Lost, error)
	SetDeadline(t time.Time)
	// Ungate takes pid off the library-open gate before the agent resumes
	// it; false: the gate watchdog resumed it already (bpf.GateWatch).
	Ungate(pid int) (bool, error)
	// TrackedPIDs lists the processes the kernel side follows; IsTracked
	// asks for one.
	TrackedPIDs() ([]int, error)
	IsTracked(pid int) bool
	// ThreadCycles lists the cycle counts BPF keeps per thread (Forget
	// drops a process's).
	ThreadCycles() ([]bpf.ThreadCycle, error)
}

// Options configure an Agent.
type Options struct {
	Preset   *phase.Preset
	Interval int                 // cycles per summary window (per thread); 0 disables windows
	OnWindow func(*Window)       // called for every completed window
	OnEvent  func(*Event)        // optional: every attributed call, in arrival order
	OnKernel func(*KernelRecord) // optional: every GPU kernel record from CUPTI
	OnAPI    func(*APIRecord)    // optional: every driver-API record from CUPTI
	// OnCycle receives every closed cycle's timeline once its GPU side is
	// final (exporters: OTLP, Perfetto, pprof). Detail adds the individual
	// GPU records (GPUActivity) to it; without it only per-phase figures,
	// collectives and syncs travel.
	OnCycle func(*CycleTrace)
	Detail  bool
	// CollectiveRanks is the number of ranks in the NCCL communicators, for
	// bus bandwidth; 0 counts the traced processes that make collectives.
	CollectiveRanks int
	// GPUs names the GPUs of each traced process (NVML); nil: none.
	GPUs *gpuinfo.Registry
	// OnSample receives the CPU sampler's samples, symbolized.
	OnSample func(*CPUSample)
	// GPUHorizon is how late CUPTI records may arrive after the launch
	// (default 2 s); LaunchSlack how long before a CUPTI API record's start
	// its uprobe may fire (default 2 ms: the trap, preemption and, while code objects
	// are still being classified, the frame walk precede the driver's
	// own entry callback).
	GPUHorizon  time.Duration
	LaunchSlack time.Duration
	Logger      *slog.Logger
	// ProbeOn and ProbePeriod, when ProbePeriod is set, attach the
	// libraries' probes only ProbeOn out of every ProbePeriod (probe
	// windows, probeduty.go): cycles wholly inside a window are measured,
	// and between them no uprobe is in place and the CPU sampler pauses.
	ProbeOn, ProbePeriod time.Duration
	// ProbeGPUWindows, with probe windows, is the number of duty windows
	// the targets' CUPTI libraries trace before they stop (--cupti-windows):
	// every launch's probe joins its CUPTI records, so the probes stay in
	// place while any connected library still traces, and go in at once
	// when one connects while they are out. 0: no GPU records with probe
	// windows.
	ProbeGPUWindows int
	// CallTree records the Python stacks of unattributed launches into
	// call trees (CallTree), taking the stack of every call in recording
	// windows while at least half of a process's launches are
	// unattributed (calltree.go).
	CallTree bool
	// GateHold keeps every process the library-open gate stopped this much
	// longer before resuming it: a slow agent on purpose, for the
	// fault-injection tests of the gate watchdog. 0 in normal use.
	GateHold time.Duration
}

// Event is one attributed call, as handed to Options.OnEvent.
type Event struct {
	PID, TID int
	Ktime    uint64
	Kind     string // launch, sync, sync_exit, copy (device-side copy or set), coll, capture, mark
	API      string
	Phase    string
	Cycle    int // 1-based cycle number of the thread, 0 outside cycles
	// CycleTID, when not 0, is the thread whose cycle Cycle is: a late wait
	// (phase.Cycle.LatePhases) on one thread for another thread's cycle.
	CycleTID int
	Stream   uint64
	Handle   uint64
	Bytes    int64 // collectives and copies
	WaitNs   int64 // sync: time blocked (set on the return)
	Site     string
}

// Agent attributes probe events to phases and cycles.
type Agent struct {
	pr   Probes
	opts Options
	log  *slog.Logger

	matchers map[bool]*phase.Matcher // by py310
	order    map[string]int

	mu      sync.Mutex
	procs   map[int]*process
	rep     Report
	roots   map[int]bool
	exited  chan int
	started time.Time
	gpu     *GPUHandler
	joiner  *correlate.Joiner[correlate.Key]
	// streams follows each stream's timeline for the hand-over gaps of
	// queued work; gpuBatch is feedJoiner's reused record slice.
	streams  correlate.StreamOrder
	gpuBatch []correlate.GPURecord
	// Kernel names by pid and the CUPTI library's name id, copied from the
	// connection as records arrive (the joiner hands out ids, later).
	kernelNames map[int]map[uint32]kernelName
	corrAlias   map[int]*corrAliases // by pid (gpujoin.go)
	inSample    bool                 // resolving a CPU sample's stack (classify counts its failures apart)
	reconciled  uint64               // bpf.Lost.RingBuf when reconcile last looked
	behind      uint64               // bpf.Lost.RingBuf when caughtUp last said so
	ranks       map[int]*rankTrack   // tensor-parallel ranks (ranks.go)
	duty        map[int]*dutyState   // duty-cycled GPU tracing windows by pid (duty.go)
	pw          *probeWindows        // probe windows (probeduty.go); nil: probes always in place
	lostSeq     uint32               // the last call record's bpf.APIEvent.LostSeq
	// learning: when the last record with unknown code objects was read
	// (Run polls every learnPoll until learnQuiet after it).
	learning time.Time
	// noQuietFlush: SPECPROF_QUIET_FLUSH=off, no flush requests to quiet
	// libraries (flushQuiet; a diagnostic).
	noQuietFlush bool
}

// New creates an Agent over the given probes.
func New(pr Probes, opts Options) (*Agent, error) {
	if opts.Preset == nil {
		return nil, errors.New("agent: no phase preset")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	a := &Agent{pr: pr, opts: opts, log: log, matchers: map[bool]*phase.Matcher{}, procs: map[int]*process{},
		roots: map[int]bool{}, exited: make(chan int, 16), started: time.Now(),
		noQuietFlush: os.Getenv("SPECPROF_QUIET_FLUSH") == "off"}
	for _, py310 := range []bool{false, true} {
		m, err := opts.Preset.Compile(py310)
		if err != nil {
			return nil, fmt.Errorf("compile preset %s: %w", opts.Preset.Name, err)
		}
		a.matchers[py310] = m
	}
	a.order = map[string]int{}
	for i, p := range a.matchers[false].Phases() {
		a.order[p] = i
	}
	a.rep = Report{Preset: opts.Preset.Name, Phases: a.matchers[false].Phases(), Start: time.Now()}
	if opts.ProbePeriod != 0 {
		if opts.ProbeOn <= 0 || opts.ProbeOn >= opts.ProbePeriod {
			return nil, fmt.Errorf("agent: probe windows %v every %v: want 0 < ON < PERIOD", opts.ProbeOn, opts.ProbePeriod)
		}
		a.pw = newProbeWindows(opts.ProbeOn, opts.ProbePeriod)
	}
	if a.opts.LaunchSlack == 0 {
		a.opts.LaunchSlack = 2 * time.Millisecond
	}
	if err := a.newJoiner(); err != nil {
		return nil, fmt.Errorf("create GPU joiner: %w", err)
	}
	return a, nil
}

// Exited delivers the pid of every root process that exits.
func (a *Agent) Exited() <-chan int { return a.exited }

// AddRoot starts tracing pid and the processes it forks. With stopOnLib the
// process is stopped briefly whenever it opens libcuda or libnccl so that
// probes are in place before the first call (used by `specprof run`).
func (a *Agent) AddRoot(pid int, stopOnLib bool) error {
	if !proc.Exists(pid) {
		return fmt.Errorf("pid %d does not exist", pid)
	}
	if err := a.pr.Track(pid, stopOnLib); err != nil {
		return err
	}
	a.mu.Lock()
	a.roots[pid] = true
	a.proc(pid)
	a.mu.Unlock()
	return nil
}

// AttachRunning prepares an already running process: it must be a Python
// process; libcuda/libnccl already loaded get their probes now, and those
// loaded later are attached when they are opened.
func (a *Agent) AttachRunning(pid int) error {
	if err := a.AddRoot(pid, false); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.proc(pid)
	if err := a.ensurePython(p); err != nil {
		return err
	}
	n, err := a.attachMapped(p)
	if err != nil {
		return err
	}
	if n == 0 {
		a.log.Warn("libcuda is not loaded yet; probes will be attached when the process loads it", "pid", pid)
	}
	return nil
}

// stopProbes removes the uprobes of every traced process, when the session
// ends (the target goes on without paying for them, and the drain sees an
// end) and when a probe window closes. The report keeps each process's
// libraries.
func (a *Agent) stopProbes() {
	a.mu.Lock()
	pids := make([]int, 0, len(a.procs))
	for pid := range a.procs {
		pids = append(pids, pid)
	}
	a.mu.Unlock()
	t0 := time.Now()
	for _, pid := range pids {
		a.pr.DetachLibraries(pid)
	}
	a.log.Debug("probes removed", "processes", len(pids), "took", time.Since(t0).Round(time.Microsecond))
}

// Detach removes pid's probes; AttachRunning puts them back.
func (a *Agent) Detach(pid int) {
	a.pr.DetachLibraries(pid)
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[pid]; p != nil {
		p.libs = map[string]bool{}
		p.wanted = nil
		p.rep.Libraries = nil
	}
}

// While the agent learns code objects, BPF wakes the reader for their
// records at most once a millisecond per CPU (a forced wakeup costs the
// target about 17 µs in a VM), so Run polls the ring buffer every learnPoll
// until learnQuiet after the last such record: their code objects are then
// read within a few milliseconds, while the process still lives.
const (
	learnPoll  = 5 * time.Millisecond
	learnQuiet = time.Second
)

// drainLimit bounds the drain after cancellation: with the probes removed
// the backlog is at most one ring buffer, read in well under a second.
const drainLimit = 5 * time.Second

// Run processes events until ctx is cancelled, then removes every traced
// process's uprobes and drains what is left.
func (a *Agent) Run(ctx context.Context) error {
	// Reads wake up at least every pollInterval so cancellation is seen even
	// when nothing is traced; after cancellation, the backlog is drained
	// until the ring buffer stays empty for at least half an interval.
	const pollInterval = 200 * time.Millisecond
	// The deadline is renewed only now and then (every 64 reads, once half
	// of it has passed): setting it costs a clock read and a timer update,
	// too much for every record at the launch rate.
	var set, stopped time.Time
	for n := 0; ; n++ {
		if n%64 == 0 {
			now := time.Now()
			// A busy target (attach --duration, Ctrl-C) keeps the ring buffer
			// from ever running empty, so cancellation is checked here too.
			if stopped.IsZero() && ctx.Err() != nil {
				// Removing perf-event uprobes takes the kernel about 0.1 s each
				// (3-6 s for a libcuda's); the drain's clock starts after.
				if a.pw != nil {
					a.closeProbeWindow()
				} else {
					a.stopProbes()
				}
				now = time.Now()
				stopped = now
			}
			if stopped.IsZero() && a.probeTick(now) {
				now = time.Now()
				set = time.Time{}
			}
			if !stopped.IsZero() && now.Sub(stopped) > drainLimit {
				a.log.Warn("events still arriving after the probes were removed; stopping the drain",
					"after", now.Sub(stopped).Round(time.Millisecond))
				return nil
			}
			if now.Sub(set) > pollInterval/2 || now.Before(a.learning.Add(learnQuiet)) && now.Sub(set) > learnPoll/2 {
				dl := now.Add(pollInterval)
				if now.Before(a.learning.Add(learnQuiet)) {
					dl = now.Add(learnPoll)
				}
				// Wake up for the next probe window's open or close.
				if due := a.probeDue(); stopped.IsZero() && !due.IsZero() && due.Before(dl) {
					dl = due
				}
				a.pr.SetDeadline(dl)
				set = now
				a.flushQuiet(now)
				a.requestWindows()
				if stopped.IsZero() {
					a.reconcile()
				}
			}
		}
		ev, err := a.pr.Read()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if ctx.Err() != nil {
					if !stopped.IsZero() {
						a.log.Debug("drained", "took", time.Since(stopped).Round(time.Microsecond))
					}
					return nil
				}
				a.caughtUp()
				set, n = time.Time{}, -1
				continue
			}
			if errors.Is(err, bpf.ErrClosed) {
				return nil
			}
			if errors.Is(err, bpf.ErrDecode) {
				a.mu.Lock()
				a.rep.Loss.DecodeErrors++
				a.mu.Unlock()
				continue
			}
			return err
		}
		a.mu.Lock()
		a.handle(ev)
		a.mu.Unlock()
	}
}

func (a *Agent) handle(ev any) {
	switch e := ev.(type) {
	case *bpf.APIEvent:
		a.rep.Events++
		a.onAPI(e)
	case *bpf.SyncExit:
		a.rep.Events++
		a.onSyncExit(e)
	case *bpf.LibOpen:
		a.onLibOpen(e)
	case *bpf.ProcEvent:
		a.onProc(e)
	case *bpf.Sample:
		a.onSample(e)
	}
}

func (a *Agent) proc(pid int) *process {
	p := a.procs[pid]
	if p == nil {
		p = &process{pid: pid, classes: map[uint64]phase.Class{}, threads: map[int]*thread{}, libs: map[string]bool{},
			rep: &ProcessReport{PID: pid, Start: time.Now()}}
		p.rep.Cmdline, _ = proc.Cmdline(pid)
		if own, err := proc.OwnNamespaceID(pid, pid); err == nil && own != pid {
			p.rep.NSPID = own
		}
		a.procs[pid] = p
	}
	return p
}

// ensurePython discovers the interpreter of p once and publishes its layout.
func (a *Agent) ensurePython(p *process) error {
	if p.rt != nil {
		return nil
	}
	rt, err := python.Discover(p.pid)
	if err != nil {
		p.pyErr = err
		return err
	}
	if err := rt.Version.Supported(); err != nil {
		p.pyErr = err
		return err
	}
	py310 := rt.Version.Minor == 10
	cfg := pyConfig(rt)
	cfg.CycleStart = uint32(a.matchers[py310].CycleStartPhase())
	if a.matchers[py310].CyclesAtStart() {
		cfg.CycleFlags |= bpf.PyCycleAtStart
	}
	if err := a.pr.SetPyConfig(p.pid, cfg); err != nil {
		return err
	}
	p.rt = rt
	p.sym = python.NewSymbolizer(rt)
	p.py310 = py310
	p.matcher = a.matchers[p.py310]
	p.rep.Python = rt.Version.String()
	if cl, err := proc.Cmdline(p.pid); err == nil {
		p.rep.Cmdline = cl
	}
	a.log.Debug("python runtime", "pid", p.pid, "version", rt.Version.String(), "runtime", fmt.Sprintf("%#x", rt.RuntimeAddr))
	return nil
}

// pyConfig converts agent/python's offsets into the BPF layout.
func pyConfig(rt *python.Runtime) bpf.PyConfig {
	o := rt.Offsets
	c := bpf.PyConfig{
		Runtime:           rt.RuntimeAddr,
		InterpHead:        uint32(o.InterpretersHead),
		InterpThreadsHead: uint32(o.InterpThreadsHead),
		TsNext:            uint32(o.TstateNext),
		TsNativeTid:       uint32(o.TstateNativeThreadID),
		TsThreadId:        uint32(o.TstateThreadID),
		TsFrame:           uint32(o.TstateFrame),
		CframeCurrent:     uint32(o.CFrameCurrentFrame),
		FrameCode:         uint32(o.FrameCode),
		FramePrev:         uint32(o.FramePrevious),
		FrameOwner:        uint32(o.FrameOwner),
		FrameInstr:        uint32(o.FrameInstr),
		PthreadTid:        uint32(o.PthreadTID),
		CodeQualname:      uint32(qualnameOffset(o)),
	}
	if o.Flags&python.FlagCFrame != 0 {
		c.Flags |= bpf.CfgCFrame
	}
	if o.Flags&python.FlagSkipOwnerGE3 != 0 {
		c.Flags |= bpf.CfgSkipOwner
	}
	if o.Flags&python.FlagTaggedExecutable != 0 {
		c.Flags |= bpf.CfgTaggedExec
	}
	if o.Flags&python.FlagPthreadTID != 0 {
		c.Flags |= bpf.CfgPthreadTID
	}
	if o.Flags&python.FlagFrameObject != 0 {
		c.Flags |= bpf.CfgFrameObject
	}
	return c
}

// qualnameOffset is the code-object field BPF compares to validate a phase
// hit (co_qualname, or co_name where there is no qualname).
func qualnameOffset(o python.Offsets) uint64 {
	if o.CodeQualname != 0 {
		return o.CodeQualname
	}
	return o.CodeName
}

// attachMapped attaches probes to libcuda/libnccl already mapped by p.
func (a *Agent) attachMapped(p *process) (int, error) {
	mods, err := proc.Modules(p.pid)
	if err != nil {
		return 0, fmt.Errorf("list libraries of pid %d: %w", p.pid, err)
	}
	n := 0
	for _, m := range mods {
		if lib, ok := libKind(m.Path); ok {
			if err := a.attach(p, m.HostPath, m.Path, lib); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// mapsCUDA reports whether pid has libcuda or libnccl mapped.
func mapsCUDA(pid int) bool {
	mods, err := proc.Modules(pid)
	if err != nil {
		return false
	}
	for _, m := range mods {
		if _, ok := libKind(m.Path); ok {
			return true
		}
	}
	return false
}

func libKind(path string) (bpf.Library, bool) {
	switch {
	case proc.IsCUDADriver(path):
		return bpf.LibCUDA, true
	case proc.IsNCCL(path):
		return bpf.LibNCCL, true
	}
	return 0, false
}

func (a *Agent) attach(p *process, hostPath, path string, lib bpf.Library) error {
	if a.pw != nil {
		// Probe windows attach it again at every window's open.
		if p.wanted == nil {
			p.wanted = map[string]wantedLib{}
		}
		p.wanted[hostPath] = wantedLib{path, lib}
		if !a.probesIn() {
			if !p.libs[hostPath] {
				p.libs[hostPath] = true
				p.rep.Libraries = append(p.rep.Libraries, path)
				a.log.Info("library found; its probes go in at the next probe window", "pid", p.pid, "library", path)
			}
			return nil
		}
	} else if p.libs[hostPath] {
		return nil
	}
	res, err := a.pr.AttachLibrary(p.pid, hostPath, lib)
	if err != nil {
		return fmt.Errorf("attach to %s of pid %d: %w", path, p.pid, err)
	}
	if a.pw != nil {
		p.readyWin, p.readyAt = len(a.pw.opens), monotonicNow()
	}
	if !p.libs[hostPath] {
		p.libs[hostPath] = true
		p.rep.Libraries = append(p.rep.Libraries, path)
		a.log.Info("probes attached", "pid", p.pid, "library", path, "symbols", len(res.Symbols))
	}
	return nil
}

// wantedLib is a library whose probes go in at every probe window.
type wantedLib struct {
	path string
	lib  bpf.Library
}

func (a *Agent) onLibOpen(e *bpf.LibOpen) {
	pid := int(e.PID)
	p := a.proc(pid)
	if e.Stopped {
		// Never leave the target stopped, whatever happens below.
		defer func() {
			if a.opts.GateHold > 0 {
				time.Sleep(a.opts.GateHold)
			}
			ours, err := a.pr.Ungate(pid)
			if err != nil {
				a.log.Error("resume target", "pid", pid, "err", err)
			} else if !ours {
				// The watchdog let it go on before its probes were in.
				a.rep.Loss.GateLate++
				p.problem(fmt.Sprintf("resumed by the gate watchdog before its probes on %s were in place (the agent was late): its first calls to it may be missing", filepath.Base(e.Path)))
			}
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				a.log.Error("resume target", "pid", pid, "err", err)
			}
		}()
	}
	path := e.Path
	if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, e.FD)); err == nil && filepath.IsAbs(target) {
		path = target
	}
	lib, ok := libKind(path)
	if !ok {
		return
	}
	// Python is initialised by the time a CUDA library is loaded: the
	// process is stopped, so this is the moment to learn its layout.
	if p.rt == nil {
		if err := a.ensurePython(p); err != nil {
			p.problem(fmt.Sprintf("python: %v", err))
			a.log.Warn("cannot read Python frames; calls will be attributed to 'other'", "pid", pid, "err", err)
		}
	}
	host := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path)
	if err := a.attach(p, host, path, lib); err != nil {
		p.problem(err.Error())
		a.log.Error("attach probes", "pid", pid, "err", err)
	}
}

func (a *Agent) onProc(e *bpf.ProcEvent) {
	switch e.Type {
	case bpf.EvFork:
		child := int(e.Child)
		p := a.proc(child)
		// A forked child inherits its parent's libraries but not the probes.
		if _, err := a.attachMapped(p); err != nil {
			p.problem(err.Error())
		}
	case bpf.EvExec:
		p := a.proc(int(e.PID))
		p.closeCycles(a)
		p.rt, p.sym, p.matcher = nil, nil, nil
		p.classes = map[uint64]phase.Class{}
		p.forgetPublished()
		p.libs = map[string]bool{}
		p.wanted = nil
		p.rep.Libraries = nil
		a.pr.ForgetCode(p.pid)
		if cl, err := proc.Cmdline(p.pid); err == nil {
			p.rep.Cmdline = cl
		}
	case bpf.EvExit:
		pid := int(e.PID)
		if p := a.procs[pid]; p != nil {
			a.countTailLoss(map[int]bool{pid: true})
			p.closeCycles(a)
			p.exited = true
		}
		a.pr.Forget(pid)
		if a.roots[pid] {
			select {
			case a.exited <- pid:
			default:
			}
		}
	}
}

// caughtUp runs when the ring buffer has been read to its end: after
// records were lost to it, the user learns that the agent fell behind and
// has caught up again.
func (a *Agent) caughtUp() {
	l, err := a.pr.Lost()
	if err != nil || l.RingBuf == a.behind {
		return
	}
	a.log.Warn("specprof fell behind and lost records to a full ring buffer; caught up now (the report counts what was lost)",
		"lost", l.RingBuf-a.behind, "lost_in_all", l.RingBuf)
	a.behind = l.RingBuf
}

// reconcile recovers what records lost to a full ring buffer would have
// told: processes forked unseen (the kernel side still follows them) and
// libraries opened unseen (their probes go in from the process's maps). It
// looks only after the loss counters moved.
func (a *Agent) reconcile() {
	l, err := a.pr.Lost()
	if err != nil || l.RingBuf == a.reconciled {
		return
	}
	a.reconciled = l.RingBuf
	pids, err := a.pr.TrackedPIDs()
	if err != nil {
		a.log.Warn("after lost records: list traced processes", "err", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pid := range pids {
		p, known := a.procs[pid]
		if !known {
			p = a.proc(pid)
			a.rep.Loss.ProcessesFoundLate++
			a.log.Info("found a process whose fork record was lost", "pid", pid)
		}
		// As at a library open: the interpreter's layout goes to BPF
		// before the probes, or their first calls have no Python frames.
		if p.rt == nil && p.pyErr == nil && mapsCUDA(pid) {
			_ = a.ensurePython(p)
		}
		if _, err := a.attachMapped(p); err != nil && proc.Exists(pid) {
			p.problem(err.Error())
		}
	}
}

// Report returns the session report so far (cycles still open are not in it).
func (a *Agent) Report() *Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.joinLoss()
	r := a.rep
	r.End = time.Now()
	if l, err := a.pr.Lost(); err == nil {
		r.Loss.RingBuf, r.Loss.Scratch, r.Loss.OpenAt = l.RingBuf, l.Scratch, l.OpenAt
		r.Loss.SamplesLost = l.Sample
		r.Loss.LibOpenLost = l.LibOpen
	}
	r.Processes = nil
	for _, p := range a.procs {
		if len(p.threads) == 0 && !a.roots[p.pid] {
			continue
		}
		r.Processes = append(r.Processes, p.report(a))
	}
	sortProcesses(r.Processes)
	r.Ranks = a.rankReport()
	r.ProbeWindows = a.probeStats()
	return &r
}

// countTailLoss adds the cycles lost whole at the end of each thread of the
// processes in pids (every known process when pids is nil): those BPF
// counted after the last cycle number a record brought (bpf.ThreadCycles).
func (a *Agent) countTailLoss(pids map[int]bool) {
	cs, err := a.pr.ThreadCycles()
	if err != nil {
		a.log.Warn("cycles lost whole at the end of threads not counted", "err", err)
	}
	for _, c := range cs {
		if pids != nil && !pids[c.PID] {
			continue
		}
		p := a.procs[c.PID]
		if p == nil {
			continue
		}
		t := p.thread(c.TID)
		if d := c.Cycles - t.bpfCycle; d > 0 && d < 1<<31 {
			t.lostWhole += int(d)
			a.rep.Loss.CyclesLostWhole += uint64(d)
			t.bpfCycle = c.Cycles
		}
	}
}

// Finish closes every open cycle (at the end of a session).
func (a *Agent) Finish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.countTailLoss(nil)
	for _, p := range a.procs {
		if a.pw != nil {
			// The probes went before the cycle ended.
			for _, t := range p.threads {
				t.cutCur = t.cutCur || t.inCycle
			}
		}
		p.closeCycles(a)
	}
	a.flushJoiner()
	if a.tracing() {
		a.flushRanks()
	}
}

func (a *Agent) phaseOrder(id uint16, m *phase.Matcher) int {
	if o, ok := a.order[m.PhaseName(id)]; ok {
		return o
	}
	return 1 << 20
}

// Status is a cheap summary of a running session, for a live status line.
type Status struct {
	Processes int    // processes with CUDA libraries traced
	Cycles    int    // cycles folded into the figures, all threads
	OpenCycle bool   // some thread is inside a cycle now
	Calls     int64  // hooked calls attributed
	Lost      uint64 // records lost to a full ring buffer or scratch space
}

// Status returns the session's Status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Status{Lost: a.rep.Loss.RingBuf + a.rep.Loss.Scratch}
	for _, p := range a.procs {
		if len(p.libs) > 0 && !p.exited {
			s.Processes++
		}
		for _, t := range p.threads {
			s.Cycles += t.cycles
			s.Calls += t.calls
			s.OpenCycle = s.OpenCycle || t.inCycle
		}
	}
	return s
}
