package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/agent/calltree"
	"github.com/specprof/specprof/agent/gpuinfo"
	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/agent/specmetrics"
	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/cupti"
	"github.com/specprof/specprof/export/summary"
)

type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func asExit(err error, ee *exitError) bool { return errors.As(err, ee) }

// maxCPUHz bounds --cpu-hz.
const maxCPUHz = 4999

// sessionFlags are shared by run and attach.
type sessionFlags struct {
	preset   string
	rules    string
	interval int
	outDir   string
	force    bool
	events   string
	quiet    bool
	verbose  bool
	cupti    string
	cuptiLib string
	spec     string
	cpuHz    int
	ranks    int
	duty     string
	dutyFrom string // --cupti-duty-start
	detach   bool
	windows  int
	graphs   string
	probes   string // --probe-duty
	wide     bool
	calltree bool
}

func (f *sessionFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.preset, "preset", "sglang-eagle", "phase preset ("+fmt.Sprint(phase.Presets())+")")
	fl.StringVar(&f.rules, "rules", "", "YAML file with phase rules (may extend a preset)")
	fl.IntVar(&f.interval, "interval", 100, "print the phase table every N cycles of a thread (0: only the final report)")
	fl.StringVarP(&f.outDir, "output", "o", "", "output directory (default ./specprof-out/<timestamp>)")
	fl.BoolVar(&f.force, "force", false, "write into an output directory that is not empty and over an existing --events file, replacing files of the same names (links are never written through)")
	fl.StringVar(&f.events, "events", "", "also write every attributed call as JSON lines to this file (a new file, unless --force)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print no periodic tables or status lines, only the final report")
	fl.BoolVar(&f.wide, "wide", false, "show every column of the phase tables and leave long lines unwrapped")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log debug messages, among them every tracing window and flush request")
	fl.StringVar(&f.cupti, "cupti", "auto", "GPU-side records through the injected CUPTI library: auto (when the library is found), on, off")
	fl.StringVar(&f.cuptiLib, "cupti-lib", "", "path of libspecprof_cupti.so (default: next to the specprof executable)")
	for _, k := range sinkKinds {
		k.flags(fl)
	}
	fl.StringVar(&f.duty, "cupti-duty", "", "trace GPU kernels and copies only in windows of ON every PERIOD (e.g. 200ms/2s), so that only the cycles wholly inside a window get GPU figures")
	fl.StringVar(&f.probes, "probe-duty", "", "put the CUDA and NCCL probes in place only in windows of ON every PERIOD (e.g. 500ms/10s), measuring the cycles wholly inside a window (with GPU records, add --cupti-duty and --cupti-windows)")
	fl.StringVar(&f.dutyFrom, "cupti-duty-start", "now", "with --cupti-duty, when windows open: 'now' (as the process starts CUDA) or 'cycles' (each only once the agent sees decode cycles, run only)")
	fl.IntVar(&f.windows, "cupti-windows", 0, "with --cupti-duty: trace at most N windows, then no more GPU records (0: no limit)")
	fl.BoolVar(&f.detach, "cupti-detach", false, "with --cupti-windows, detach CUPTI from the target for good after the last window (a process that has built CUDA graphs gets every CUPTI callback turned off instead)")
	fl.StringVar(&f.graphs, "cupti-graphs", "node", "how CUDA graph replays are recorded: 'node' (every kernel of a replay) or 'graph' (one record per replay, cheaper for graphs of many kernels)")
	fl.IntVar(&f.ranks, "collective-ranks", 0, "ranks per NCCL communicator, for bus bandwidth (default: the number of traced processes making collectives)")
	fl.IntVar(&f.cpuHz, "cpu-hz", bpf.DefaultSampleHz, "sample the CPU of the target's threads this many times per second, with their Python stacks (0: off)")
	fl.BoolVar(&f.calltree, "calltree", true, "record the Python stacks of launches the rules leave unattributed into "+calltree.FileName+", for `specprof rules suggest`")
	fl.StringVar(&f.spec, "spec-metrics", "log", "accept length and tok/s: 'log' (the target's Decode batch / SpecDecoding log lines, run only), a Prometheus URL (http://host:port/metrics), or 'off'")
}

func (f *sessionFlags) loadPreset() (*phase.Preset, error) {
	if f.rules != "" {
		return phase.LoadRulesFile(f.rules)
	}
	return phase.LoadPreset(f.preset)
}

// session wires the tracer, the agent and the outputs of one run/attach.
type session struct {
	flags  *sessionFlags
	tr     *bpf.Tracer
	ag     *agent.Agent
	out    io.Writer
	layout summary.Layout
	mu     sync.Mutex
	tables int // phase tables printed (statusLines)
	evFile *os.File
	evEnc  *eventWriter
	dir    *outDir
	rcv    *cupti.Receiver
	log    *slog.Logger

	spec       *specmetrics.Tracker
	specSrc    string
	specCancel context.CancelFunc
	scraper    *specmetrics.Scraper
	specSaid   bool
	// specLinesDropped and specBytesDropped: the target's output that the
	// output helper did not forward to the log scanners (tee.go).
	specLinesDropped, specBytesDropped uint64

	gpus   *gpuinfo.Registry // nil without NVML
	sinks  []sink
	clock  agent.Clock // monotonic → wall, measured once for every sink
	detail bool        // a sink wants individual GPU records (agent.Options.Detail)
	// bpfStats: SPECPROF_BPF_STATS=1, the kernel's run-time statistics of
	// the probes' programs, logged at the end (a diagnostic of their cost).
	bpfStats io.Closer
	dev      devKnobs
	watchdog *gateWatchdog // run: resumes gated processes if specprof cannot
}

func newSession(f *sessionFlags, out io.Writer) (_ *session, err error) {
	preset, err := f.loadPreset()
	if err != nil {
		return nil, err
	}
	if f.cpuHz < 0 || f.cpuHz > maxCPUHz {
		// Far above the kernel's perf sample-rate limit (which it lowers by
		// itself under load) samples are throttled away unseen.
		return nil, fmt.Errorf("--cpu-hz %d: must be 0 (off) to %d; %d is the default and costs a CPU-bound thread about 0.5 %%", f.cpuHz, maxCPUHz, bpf.DefaultSampleHz)
	}
	if f.duty != "" {
		if _, _, err := parseDuty(f.duty); err != nil {
			return nil, err
		}
	}
	switch {
	case f.dutyFrom != "now" && f.dutyFrom != "cycles":
		return nil, fmt.Errorf("--cupti-duty-start %q: want 'now' (windows from the start) or 'cycles' (each window once decode cycles run)", f.dutyFrom)
	case f.dutyFrom == "cycles" && f.duty == "":
		return nil, fmt.Errorf("--cupti-duty-start cycles: it says when duty windows open; give --cupti-duty ON/PERIOD too")
	}
	if f.windows < 0 || f.windows > 0 && f.duty == "" {
		return nil, fmt.Errorf("--cupti-windows %d: give a number of windows >= 1 together with --cupti-duty ON/PERIOD", f.windows)
	}
	if f.detach && f.windows == 0 {
		return nil, fmt.Errorf("--cupti-detach: the detach is final, so it comes after the last window: give --cupti-duty ON/PERIOD and --cupti-windows N")
	}
	if f.graphs != "node" && f.graphs != "graph" {
		return nil, fmt.Errorf("--cupti-graphs %q: want 'node' (every kernel of a graph replay) or 'graph' (one record per replay)", f.graphs)
	}
	if f.graphs == "graph" && f.duty != "" {
		// Switching CUPTI's graph-level tracing on and off crashes the next
		// CUDA graph launch, even when the launching thread makes the switch.
		return nil, fmt.Errorf("--cupti-graphs graph with --cupti-duty: not supported, switching graph-level tracing on and off crashes CUDA graph launches (docs/overhead.md, known hazards); use one or the other")
	}
	if f.interval < 0 {
		return nil, fmt.Errorf("--interval %d: must be 0 or more", f.interval)
	}
	var probeOn, probePeriod time.Duration
	if f.probes != "" {
		if probeOn, probePeriod, err = parseProbeDuty(f.probes); err != nil {
			return nil, err
		}
		if (f.cupti == "on" || f.duty != "") && (f.duty == "" || f.windows <= 0) {
			// A launch made between windows would have CUPTI records and no probe event to join them to.
			return nil, fmt.Errorf("--probe-duty with GPU records needs them to end: GPU records are joined to every launch's probe event, so the probes stay in place while CUPTI traces; give --cupti-duty ON/PERIOD --cupti-windows N (and --cupti-detach), or use --cupti off")
		}
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s := &session{flags: f, out: out, log: log, layout: summary.Layout{Width: terminalWidth(out), Wide: f.wide}}
	if s.dev, err = readDevKnobs(); err != nil {
		return nil, err
	}
	// The outputs are checked before anything else is set up, and before
	// the command starts: a session that cannot write its results must
	// not run.
	if s.dir, err = openOutDir(f.outDir, f.force); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.dir.close()
			if s.evFile != nil {
				s.evFile.Close()
			}
		}
	}()
	if f.events != "" {
		s.evFile, err = createFile(f.events, f.force)
		if err != nil {
			return nil, fmt.Errorf("events file: %w", err)
		}
		s.evEnc = newEventWriter(s.evFile)
	}
	if missing, err := missingCaps(); err != nil {
		log.Warn("not running as root, and the capabilities could not be read", "err", err)
	} else if len(missing) > 0 {
		log.Warn("not running as root and missing " + strings.Join(missing, ", ") + ": specprof needs root or CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH")
	}
	tr, err := bpf.Load()
	if err != nil {
		return nil, err
	}
	s.tr = tr
	if tr.MountedTracefs() {
		log.Info("mounted tracefs at /sys/kernel/tracing (it was not mounted)")
	}
	if os.Getenv("SPECPROF_BPF_STATS") == "1" {
		if s.bpfStats, err = bpf.EnableStats(); err != nil {
			log.Warn("SPECPROF_BPF_STATS=1: no BPF statistics", "err", err)
		}
	}
	if f.cpuHz > 0 {
		if err := tr.StartSampler(f.cpuHz); err != nil {
			tr.Close()
			return nil, fmt.Errorf("%w (--cpu-hz 0 turns CPU sampling off)", err)
		}
	}
	if f.ranks < 0 {
		return nil, fmt.Errorf("--collective-ranks %d: must be 0 (count the traced processes) or more", f.ranks)
	}
	opts := agent.Options{Preset: preset, Interval: f.interval, Logger: log, CollectiveRanks: f.ranks, CallTree: f.calltree,
		ProbeOn: probeOn, ProbePeriod: probePeriod, GateHold: s.dev.gateHold}
	if probePeriod != 0 && f.duty != "" {
		opts.ProbeGPUWindows = f.windows
	}
	// GPU names and UUIDs for the traces (NVML): initialized here, before
	// tracing, as loading NVML takes a while.
	gpus := gpuinfo.New()
	if devs, err := gpus.Devices(); err != nil {
		log.Debug("GPU names off", "err", err)
		gpus.Close()
	} else {
		log.Debug("GPUs", "devices", devs)
		opts.GPUs = gpus
		s.gpus = gpus
	}
	if !f.quiet && f.interval > 0 {
		opts.OnWindow = func(w *agent.Window) {
			s.mu.Lock()
			defer s.mu.Unlock()
			_ = summary.WriteWindow(s.out, fmt.Sprintf("[specprof] pid %d", w.PID), w, s.layout)
			s.tables++
			s.writeSpecWindow()
		}
	}
	if s.evEnc != nil {
		opts.OnEvent = s.evEnc.write
		opts.OnKernel = s.evEnc.kernel
		opts.OnAPI = s.evEnc.api
	}
	s.clock = agent.NewClock()
	for _, k := range sinkKinds {
		sk, err := k.make(s)
		if err != nil {
			tr.Close()
			return nil, fmt.Errorf("set up %s output: %w", k.name, err)
		}
		if sk != nil {
			s.sinks = append(s.sinks, sk)
		}
	}
	opts.Detail = s.detail
	// Cycle timelines are built even without a sink that takes them: the
	// report's comparison of tensor-parallel ranks is made from them.
	opts.OnCycle = func(c *agent.CycleTrace) {
		for _, sk := range s.sinks {
			sk.cycle(c)
		}
	}
	if len(s.sinks) > 0 {
		opts.OnSample = func(c *agent.CPUSample) {
			for _, sk := range s.sinks {
				sk.sample(c)
			}
		}
	}
	s.ag, err = agent.New(tr, opts)
	if err != nil {
		tr.Close()
		return nil, err
	}
	for _, sk := range s.sinks {
		if st, ok := sk.(sinkStarter); ok {
			if err := st.start(s); err != nil {
				tr.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

// startCUPTI listens for the injected library and returns the environment
// the target needs (nil when GPU records are off).
func (s *session) startCUPTI() ([]string, error) {
	switch s.flags.cupti {
	case "off":
		return nil, nil
	case "auto", "on":
	default:
		return nil, fmt.Errorf("--cupti %q: want auto, on or off", s.flags.cupti)
	}
	if s.flags.probes != "" && (s.flags.duty == "" || s.flags.windows <= 0) {
		s.log.Info("GPU-side records off with --probe-duty (CPU figures only; --cupti-duty ON/PERIOD --cupti-windows N traces N windows first)")
		return nil, nil
	}
	if v := os.Getenv("CUDA_INJECTION64_PATH"); v != "" {
		s.log.Warn("CUDA_INJECTION64_PATH is already set; leaving it alone, so no GPU-side records", "path", v)
		return nil, nil
	}
	lib := s.flags.cuptiLib
	if lib == "" {
		if exe, err := os.Executable(); err == nil {
			lib = filepath.Join(filepath.Dir(exe), "libspecprof_cupti.so")
		}
	}
	if _, err := os.Stat(lib); err != nil {
		if s.flags.cupti == "on" {
			return nil, fmt.Errorf("--cupti on: injection library %s: %w (build it with 'make cupti' or pass --cupti-lib)", lib, err)
		}
		s.log.Info("GPU-side records off: libspecprof_cupti.so not found next to specprof (make cupti, or --cupti-lib)")
		return nil, nil
	}
	lib, _ = filepath.Abs(lib)
	rcv, err := s.listenCUPTI()
	if err != nil {
		return nil, err
	}
	s.rcv = rcv
	sock := rcv.Path()
	gpu := s.ag.GPU() // before the target starts: probe windows wait for its library (agent.Options.ProbeGPUWindows)
	go func() {
		if err := rcv.Serve(gpu); err != nil {
			s.log.Error("CUPTI receiver", "err", err)
		}
	}()
	env := []string{"CUDA_INJECTION64_PATH=" + lib, "SPECPROF_SOCKET=" + sock}
	if s.flags.duty != "" {
		on, period, err := parseDuty(s.flags.duty)
		if err != nil {
			return nil, err
		}
		env = append(env, fmt.Sprintf("SPECPROF_CUPTI_DUTY=%d/%d", on.Milliseconds(), period.Milliseconds()))
	}
	if s.flags.dutyFrom == "cycles" {
		env = append(env, "SPECPROF_CUPTI_DUTY_START=cycles")
	}
	if s.flags.windows > 0 {
		env = append(env, fmt.Sprintf("SPECPROF_CUPTI_WINDOWS=%d", s.flags.windows))
	}
	if s.flags.detach {
		env = append(env, "SPECPROF_CUPTI_DETACH=1")
	}
	if s.flags.graphs == "graph" {
		env = append(env, "SPECPROF_CUPTI_KINDS=all,graph")
	}
	return env, nil
}

// authorizeWait bounds how long a connection from a process the agent does
// not (yet) know as traced waits to become known: its fork event may still
// be in the ring buffer (Agent.Traces finds a child of a traced process at
// once; an orphan reparented away waits for that event).
const authorizeWait = time.Second

// listenCUPTI listens for the injected library in a fresh session directory:
// under /run/specprof (0711) when this agent may write there, else, for an
// agent without root, $XDG_RUNTIME_DIR/specprof or a specprof-<uid>
// directory in the temporary directory (0700: only this user's targets can
// connect there, which is said in the log). Only the processes this session
// traces may deliver records (Agent.Traces), each under its own pid.
func (s *session) listenCUPTI() (*cupti.Receiver, error) {
	cfg := cupti.Config{Logger: s.log, Authorize: func(ctx context.Context, p cupti.Peer) error {
		ctx, cancel := context.WithTimeout(ctx, authorizeWait)
		defer cancel()
		for !s.ag.Traces(p.Pid) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("pid %d (uid %d) is not a process this session traces", p.Pid, p.Uid)
			case <-time.After(10 * time.Millisecond):
			}
		}
		return nil
	}}
	dirs := []string{cupti.DefaultDir}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		dirs = append(dirs, filepath.Join(x, "specprof"))
	}
	dirs = append(dirs, filepath.Join(os.TempDir(), fmt.Sprintf("specprof-%d", os.Geteuid())))
	var errs []error
	for i, d := range dirs {
		if i > 0 {
			// A private parent: Listen keeps a directory's mode when it is
			// tighter than its own 0711.
			if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				errs = append(errs, fmt.Errorf("creating %s: %w", d, err))
				continue
			}
		}
		cfg.Dir = d
		rcv, err := cupti.Listen(cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if i > 0 {
			s.log.Info("CUPTI socket in a private directory: only this user's processes can deliver GPU records",
				"socket", rcv.Path(), "because", errors.Join(errs...))
		}
		return rcv, nil
	}
	return nil, fmt.Errorf("listen for the CUPTI library: %w", errors.Join(errs...))
}

// finish writes the final report to the terminal and the output directory.
func (s *session) finish() error {
	if s.rcv != nil {
		// The library flushes at the target's exit: read every connection
		// to its end (a busy agent may still be behind), give late ones
		// (other processes of the tree) a moment, then stop.
		s.ag.GPU().Ending()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = s.rcv.FlushWait(ctx)
		cancel()
		_ = s.rcv.Close()
	}
	s.ag.Finish()
	if s.specCancel != nil {
		s.specCancel()
	}
	r := s.ag.Report()
	r.Spec = s.specTotal()
	if s.flags.dutyFrom == "cycles" {
		for _, p := range r.Processes {
			if p.GPU != nil && (p.Duty == nil || p.Duty.Windows == 0) {
				p.Problems = append(p.Problems, "no GPU tracing window opened (--cupti-duty-start cycles): the agent saw no decode cycle of this process; check --preset or --rules")
			}
		}
	}
	if s.rcv != nil {
		r.GPUReceiver = agent.NewReceiverStats(s.rcv.Stats())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The exporters finish first: what they lost on the way out is in the
	// report. Their files and errors are listed after it.
	type finished struct {
		files []string
		err   error
	}
	done := make([]finished, len(s.sinks))
	for i, sk := range s.sinks {
		done[i].files, done[i].err = sk.finish(r, s.dir)
		if ea, ok := sk.(exportAccounter); ok {
			r.Exports = append(r.Exports, ea.exportStats())
		}
	}
	if err := summary.WriteReport(s.out, r, s.layout); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if s.specLinesDropped > 0 {
		fmt.Fprintf(s.out, "spec metrics: %d lines (%d bytes) of the target's output were not read for them: specprof fell behind or was stopped, "+
			"and the copy it reads is dropped rather than hold the target back (the output itself was passed on whole)\n",
			s.specLinesDropped, s.specBytesDropped)
	}
	if !anyLibrary(r) {
		fmt.Fprintln(s.out, "specprof: no traced process loaded libcuda.so or libnccl.so, so no CUDA call was traced "+
			"(check that the program uses CUDA and that its libcuda.so.1 is the one on its library path)")
	}
	// Every output is written even when one fails.
	path, repErr := s.writeReportJSON(r)
	if repErr == nil {
		fmt.Fprintf(s.out, "report: %s\n", path)
	}
	if s.flags.calltree {
		if path, err := s.writeCallTree(); err != nil {
			fmt.Fprintf(s.out, "specprof: %v\n", err)
		} else if path != "" {
			fmt.Fprintf(s.out, "call tree of unattributed launches: %s\n", path)
		}
	}
	for _, d := range done {
		for _, f := range d.files {
			fmt.Fprintf(s.out, "wrote: %s\n", f)
		}
		if d.err != nil {
			fmt.Fprintf(s.out, "specprof: %v\n", d.err)
		}
	}
	if s.evFile != nil {
		s.evEnc.flush()
		s.evFile.Close()
	}
	return repErr
}

// writeReportJSON writes the report to report.json in the output directory.
func (s *session) writeReportJSON(r *agent.Report) (string, error) {
	f, err := s.dir.create(summary.JSONFile)
	if err != nil {
		return "", err
	}
	if err := summary.WriteJSON(f, r); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// writeCallTree writes the call tree of unattributed launches to
// calltree.json in the output directory, when any was recorded.
func (s *session) writeCallTree() (string, error) {
	ct := s.ag.CallTree()
	if len(ct.Processes) == 0 {
		return "", nil
	}
	f, err := s.dir.create(calltree.FileName)
	if err != nil {
		return "", err
	}
	if err := calltree.Write(f, ct); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

func (s *session) close() {
	s.dir.close()
	if s.bpfStats != nil {
		s.logBPFStats()
		_ = s.bpfStats.Close()
	}
	s.tr.Close()
	// After the tracer: its programs are gone, so nothing is gated anew
	// while the watchdog makes its last sweep.
	s.watchdog.stop(s.log)
	if s.gpus != nil {
		s.gpus.Close()
	}
}

// logBPFStats logs, for every probe program that ran, its runs and the
// kernel's mean run time per run: the program's own cost, without the
// uprobe trap around it.
func (s *session) logBPFStats() {
	seen := map[string]bool{}
	for _, h := range bpf.Hooks {
		for _, prog := range []string{h.Prog, h.RetProg} {
			if prog == "" || seen[prog] {
				continue
			}
			seen[prog] = true
			st, err := s.tr.ProgramStats(prog)
			if err != nil {
				s.log.Warn("BPF statistics", "program", prog, "err", err)
				continue
			}
			if st.RunCount > 0 {
				s.log.Info("BPF program run time", "program", prog, "runs", st.RunCount,
					"mean", st.Runtime/time.Duration(st.RunCount))
			}
		}
	}
}

// runAgent runs the agent until done is closed, then drains events.
func (s *session) runAgent(done <-chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-done; cancel() }()
	if !s.flags.quiet {
		go s.statusLines(done)
	}
	return s.ag.Run(ctx)
}

// statusEvery is how often a status line is printed while no phase table
// is (a server waiting for requests, or --interval 0).
const statusEvery = 10 * time.Second

// statusLines prints one status line every statusEvery in which no phase
// table was printed, until done is closed. Whole lines only: the target
// writes to the same terminal.
func (s *session) statusLines(done <-chan struct{}) {
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	seen := 0
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		st := s.ag.Status()
		s.mu.Lock()
		if s.tables == seen {
			what := "waiting for cycles"
			if st.OpenCycle || st.Cycles > 0 {
				what = "running"
			}
			fmt.Fprintf(s.out, "[specprof] %s: %d processes traced, %d cycles, %d calls, %d records lost\n", what, st.Processes, st.Cycles, st.Calls, st.Lost)
		}
		seen = s.tables
		s.mu.Unlock()
	}
}

func anyLibrary(r *agent.Report) bool {
	for _, p := range r.Processes {
		if len(p.Libraries) > 0 {
			return true
		}
	}
	return false
}

// startSpecMetrics sets up the source of accept length and tok/s. It
// returns the scanners for the target's stdout and stderr lines (log
// source), or nils.
func (s *session) startSpecMetrics(canTee bool) (stdout, stderr *specmetrics.LineScanner, err error) {
	src := s.flags.spec
	switch {
	case src == "off" || src == "":
		return nil, nil, nil
	case src == "log":
		if !canTee {
			s.log.Info("--spec-metrics log needs `specprof run` (it reads the target's output); give a Prometheus URL to attach")
			return nil, nil, nil
		}
		s.spec = &specmetrics.Tracker{}
		s.specSrc = specmetrics.SourceLog
		return specmetrics.NewLineScanner(s.spec), specmetrics.NewLineScanner(s.spec), nil
	case strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://"):
		s.spec = &specmetrics.Tracker{}
		s.specSrc = specmetrics.SourcePrometheus
		s.scraper = specmetrics.NewScraper(src, s.spec)
		ctx, cancel := context.WithCancel(context.Background())
		s.specCancel = cancel
		go func() { _ = s.scraper.Run(ctx) }()
		return nil, nil, nil
	}
	return nil, nil, fmt.Errorf("--spec-metrics %q: want log, off or an http(s):// Prometheus URL", src)
}

// writeSpecWindow prints the server's figures under a window table; when
// the source never reported any, it says so once.
func (s *session) writeSpecWindow() {
	if s.spec == nil {
		return
	}
	w := s.spec.Window()
	if !w.HasAccept && !w.HasTok {
		if !s.specSaid {
			s.specSaid = true
			why := "no Decode batch / SpecDecoding lines in the target's output"
			if s.scraper != nil {
				why = "nothing from " + s.scraper.URL
				if err := s.scraper.Err(); err != nil {
					why += ": " + err.Error()
				}
			}
			fmt.Fprintf(s.out, "spec metrics: %s; accept length and tok/s columns omitted\n", why)
		}
		return
	}
	if w.Samples == 0 {
		return // nothing new since the previous window
	}
	line := "  server:"
	if w.HasAccept && !math.IsNaN(w.AcceptLen) {
		line += fmt.Sprintf(" accept len %.2f", w.AcceptLen)
	}
	if w.HasTok && !math.IsNaN(w.TokPerSec) {
		line += fmt.Sprintf(" gen %.1f tok/s", w.TokPerSec)
	}
	fmt.Fprintf(s.out, "%s (%d %s samples)\n", line, w.Samples, s.specSrc)
}

func (s *session) specTotal() *agent.SpecMetrics {
	if s.spec == nil {
		return nil
	}
	t := s.spec.Total()
	if !t.HasAccept && !t.HasTok && s.specLinesDropped == 0 {
		return nil
	}
	m := &agent.SpecMetrics{Source: s.specSrc, Samples: t.Samples,
		LogLinesDropped: s.specLinesDropped, LogBytesDropped: s.specBytesDropped}
	if !math.IsNaN(t.AcceptLen) {
		v := t.AcceptLen
		m.AcceptLen = &v
	}
	if !math.IsNaN(t.TokPerSec) {
		v := t.TokPerSec
		m.TokPerSec = &v
	}
	return m
}

// splitDuty reads ON/PERIOD as two durations.
func splitDuty(v string) (on, period time.Duration, ok bool) {
	a, b, ok := strings.Cut(v, "/")
	if !ok {
		return 0, 0, false
	}
	on, err := time.ParseDuration(a)
	if err != nil {
		return 0, 0, false
	}
	period, err = time.ParseDuration(b)
	return on, period, err == nil
}

// parseProbeDuty reads --probe-duty ON/PERIOD. ON is at least 50 ms: a
// window's probes take tens of milliseconds to go in and out.
func parseProbeDuty(v string) (on, period time.Duration, err error) {
	on, period, ok := splitDuty(v)
	if !ok || on < 50*time.Millisecond || period <= on || period > time.Hour {
		return 0, 0, fmt.Errorf("--probe-duty %q: want ON/PERIOD durations with 50ms <= ON < PERIOD <= 1h, e.g. 500ms/10s", v)
	}
	return on, period, nil
}

// parseDuty reads --cupti-duty ON/PERIOD (durations, whole milliseconds).
func parseDuty(v string) (on, period time.Duration, err error) {
	on, period, ok := splitDuty(v)
	if !ok || on < time.Millisecond || period < on || period > time.Hour {
		return 0, 0, fmt.Errorf("--cupti-duty %q: want ON/PERIOD durations with 1ms <= ON <= PERIOD <= 1h, e.g. 200ms/2s", v)
	}
	return on, period, nil
}

// terminalWidth returns the column count of the terminal w writes to, 0
// when it is not a terminal (summary.DefaultWidth then applies).
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 0
	}
	return int(ws.Col)
}
