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

	"github.com/specprof/specprof/model"
	"github.com/specprof/specprof/session"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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

// sessionFlags binds the command line of run and attach to a
// session.Config.
type sessionFlags struct {
	cfg    session.Config
	config string // --config
	cmd    *cobra.Command
}

func (f *sessionFlags) register(c *cobra.Command) {
	f.cfg, f.cmd = session.Defaults(), c
	cfg := &f.cfg
	fl := c.Flags()
	fl.StringVar(&f.config, "config", "", "YAML file of session settings, which SPECPROF_* variables and the flags given override")
	fl.StringVar(&cfg.Preset, "preset", "", "phase preset "+fmt.Sprint(phase.Presets())+" (default "+session.DefaultPreset+")")
	fl.StringVar(&cfg.Rules, "rules", "", "YAML file with phase rules, used instead of --preset (it may extend a preset)")
	fl.IntVar(&cfg.Interval, "interval", cfg.Interval, "print the phase table every N cycles of a thread (0: only the final report)")
	fl.StringVarP(&cfg.OutDir, "output", "o", "", "output directory (default ./specprof-out/<timestamp>)")
	fl.BoolVar(&cfg.Force, "force", false, "write into an output directory that is not empty and over an existing --events file, replacing files of the same names (links are never written through)")
	fl.StringVar(&cfg.Events, "events", "", "also write every attributed call as JSON lines to this file (a new file, unless --force)")
	fl.BoolVarP(&cfg.Quiet, "quiet", "q", false, "print no periodic tables or status lines, only the final report")
	fl.BoolVar(&cfg.Wide, "wide", false, "show every column of the phase tables and leave long lines unwrapped")
	fl.BoolVarP(&cfg.Verbose, "verbose", "v", false, "log debug messages, among them every tracing window and flush request")
	fl.StringVar((*string)(&cfg.Mode), "mode", string(cfg.Mode), "how much tracing may cost: auto (chosen per process within --max-overhead), cpu, sampled, snapshot or full")
	fl.Float64Var(&cfg.MaxOverhead, "max-overhead", cfg.MaxOverhead, "the share of the target's throughput --mode auto lets the launch probes cost, as a fraction")
	fl.StringVar(&cfg.Window, "window", "", "GPU tracing window ON/PERIOD of --mode sampled, snapshot and auto (default 100ms/1s sampled, 500ms/2s otherwise)")
	fl.IntVar(&cfg.Windows, "windows", 0, "GPU windows of decode cycles --mode snapshot and auto trace before CUPTI detaches (default 3)")
	fl.StringVar(&cfg.GPURecords, "gpu-records", cfg.GPURecords, "how CUDA graph replays are recorded: 'node' (every kernel) or 'graph' (one record per replay, with --mode full)")
	fl.StringVar(&cfg.CUPTILib, "cupti-lib", "", "path of libspecprof_cupti.so (default: next to the specprof executable)")
	for _, k := range sinkKinds {
		k.flags(fl)
	}
	fl.IntVar(&cfg.CollectiveRanks, "collective-ranks", 0, "ranks per NCCL communicator, for bus bandwidth (default: the number of traced processes making collectives)")
	fl.IntVar(&cfg.CPUHz, "cpu-hz", cfg.CPUHz, "sample the CPU of the target's threads this many times per second, with their Python stacks (0: off)")
	fl.BoolVar(&cfg.CallTree, "calltree", cfg.CallTree, "record the Python stacks of launches the rules leave unattributed into "+calltree.FileName+", for `specprof rules suggest`")
	fl.StringVar(&cfg.SpecMetrics, "spec-metrics", cfg.SpecMetrics, "accept length and tok/s: 'log' (the target's Decode batch / SpecDecoding log lines, run only), a Prometheus URL (http://host:port/metrics), or 'off'")

	// Developer knobs: the mechanisms the modes are made of, for tests and
	// benchmarks (session.DevConfig). Hidden from --help; not with --mode.
	dev := &cfg.Dev
	fl.StringVar(&dev.CUPTI, "cupti", dev.CUPTI, "developer: GPU-side records through the injected CUPTI library: auto, on or off")
	fl.StringVar(&dev.Duty, "cupti-duty", "", "developer: trace GPU work only in windows of ON every PERIOD (e.g. 200ms/2s)")
	fl.StringVar(&dev.DutyStart, "cupti-duty-start", dev.DutyStart, "developer: when --cupti-duty windows open, 'now' or 'cycles' (once the agent sees decode cycles)")
	fl.IntVar(&dev.Windows, "cupti-windows", 0, "developer: trace at most N --cupti-duty windows (0: no limit)")
	fl.BoolVar(&dev.Detach, "cupti-detach", false, "developer: detach CUPTI after the last of --cupti-windows")
	fl.StringVar(&dev.ProbeDuty, "probe-duty", "", "developer: put the launch probes in place only in windows of ON every PERIOD (e.g. 500ms/10s)")
	fl.StringVar(&cfg.GPURecords, "cupti-graphs", cfg.GPURecords, "developer: the old name of --gpu-records")
	for _, n := range []string{"cupti", "cupti-duty", "cupti-duty-start", "cupti-windows", "cupti-detach", "probe-duty", "cupti-graphs"} {
		_ = fl.MarkHidden(n)
	}
}

// resolve builds the session's Config: the defaults, then --config, then
// the SPECPROF_* variables, then the flags given; and validates it.
func (f *sessionFlags) resolve() error {
	given := map[string]string{}
	f.cmd.Flags().Visit(func(fl *pflag.Flag) { given[fl.Name] = fl.Value.String() })
	f.cfg = session.Defaults()
	if f.config != "" {
		if err := f.cfg.LoadFile(f.config); err != nil {
			return err
		}
	}
	if err := f.cfg.FromEnv(os.LookupEnv); err != nil {
		return err
	}
	for name, v := range given {
		if name == "config" || f.cmd.Flags().Lookup(name) == nil {
			continue
		}
		if err := f.cmd.Flags().Set(name, v); err != nil {
			return fmt.Errorf("--%s %s: %w", name, v, err)
		}
	}
	return f.cfg.Validate()
}

func (f *sessionFlags) loadPreset() (*phase.Preset, error) {
	if f.cfg.Rules != "" {
		return phase.LoadRulesFile(f.cfg.Rules)
	}
	name := f.cfg.Preset
	if name == "" {
		name = session.DefaultPreset
	}
	return phase.LoadPreset(name)
}

// runSession wires the tracer, the agent and the outputs of one run/attach.
type runSession struct {
	flags  *sessionFlags
	cfg    *session.Config
	plan   session.Plan
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
	clock  model.Clock // monotonic → wall, measured once for every sink
	detail bool        // a sink wants individual GPU records (agent.Options.Detail)
	// bpfStats: SPECPROF_BPF_STATS=1, the kernel's run-time statistics of
	// the probes' programs, logged at the end (a diagnostic of their cost).
	bpfStats io.Closer
	watchdog *gateWatchdog // run: resumes gated processes if specprof cannot
}

func newSession(f *sessionFlags, out io.Writer) (_ *runSession, err error) {
	if err := f.resolve(); err != nil {
		return nil, err
	}
	cfg := &f.cfg
	plan := cfg.Plan()
	preset, err := f.loadPreset()
	if err != nil {
		return nil, err
	}
	level := slog.LevelInfo
	if cfg.Verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s := &runSession{flags: f, cfg: cfg, plan: plan, out: out, log: log, layout: summary.Layout{Width: terminalWidth(out), Wide: cfg.Wide}}
	log.Debug("tracing mode", "mode", plan.Mode, "plan", plan.Describe())
	// The outputs are checked before anything else is set up, and before
	// the command starts: a session that cannot write its results must
	// not run.
	if s.dir, err = openOutDir(cfg.OutDir, cfg.Force); err != nil {
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
	if cfg.Events != "" {
		s.evFile, err = createFile(cfg.Events, cfg.Force)
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
	tr, err := bpf.LoadWith(bpf.LoadOptions{NoUprobeMulti: cfg.Dev.NoUprobeMulti})
	if err != nil {
		return nil, err
	}
	s.tr = tr
	if tr.MountedTracefs() {
		log.Info("mounted tracefs at /sys/kernel/tracing (it was not mounted)")
	}
	if cfg.Dev.BPFStats {
		if s.bpfStats, err = bpf.EnableStats(); err != nil {
			log.Warn("SPECPROF_BPF_STATS=1: no BPF statistics", "err", err)
		}
	}
	if cfg.CPUHz > 0 {
		if err := tr.StartSampler(cfg.CPUHz); err != nil {
			tr.Close()
			return nil, fmt.Errorf("%w (--cpu-hz 0 turns CPU sampling off)", err)
		}
	}
	if cfg.CollectiveRanks < 0 {
		return nil, fmt.Errorf("--collective-ranks %d: must be 0 (count the traced processes) or more", cfg.CollectiveRanks)
	}
	opts := agent.Options{Preset: preset, Interval: cfg.Interval, Logger: log, CollectiveRanks: cfg.CollectiveRanks, CallTree: cfg.CallTree,
		ProbeOn: plan.ProbeOn, ProbePeriod: plan.ProbePeriod, GateHold: cfg.Dev.GateHold, NoQuietFlush: cfg.Dev.NoQuietFlush}
	if plan.ProbePeriod != 0 && plan.DutyOn != 0 {
		opts.ProbeGPUWindows = plan.Windows
	}
	if plan.AutoProbes {
		// The probes stay while CUPTI traces its windows: GPU records are
		// joined to every launch's probe event.
		opts.AutoProbes, opts.MaxOverhead, opts.ProbeGPUWindows = true, plan.MaxOverhead, plan.Windows
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
	if !cfg.Quiet && cfg.Interval > 0 {
		opts.OnWindow = func(w *model.Window) {
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
	s.clock = model.NewClock()
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
	opts.OnCycle = func(c *model.CycleTrace) {
		for _, sk := range s.sinks {
			sk.cycle(c)
		}
	}
	if len(s.sinks) > 0 {
		opts.OnSample = func(c *model.CPUSample) {
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
func (s *runSession) startCUPTI() ([]string, error) {
	switch s.plan.CUPTI {
	case "off":
		return nil, nil
	case "auto", "on":
	default:
		return nil, fmt.Errorf("--cupti %q: want auto, on or off", s.plan.CUPTI)
	}
	if s.plan.ProbeOn != 0 && (s.plan.DutyOn == 0 || s.plan.Windows <= 0) {
		s.log.Info("GPU-side records off with --probe-duty (CPU figures only; --cupti-duty ON/PERIOD --cupti-windows N traces N windows first)")
		return nil, nil
	}
	if v := os.Getenv("CUDA_INJECTION64_PATH"); v != "" {
		s.log.Warn("CUDA_INJECTION64_PATH is already set; leaving it alone, so no GPU-side records", "path", v)
		return nil, nil
	}
	lib := s.cfg.CUPTILib
	if lib == "" {
		if exe, err := os.Executable(); err == nil {
			lib = filepath.Join(filepath.Dir(exe), "libspecprof_cupti.so")
		}
	}
	if _, err := os.Stat(lib); err != nil {
		if s.plan.CUPTI == "on" {
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
	if p := s.plan; p.DutyOn != 0 {
		env = append(env, fmt.Sprintf("SPECPROF_CUPTI_DUTY=%d/%d", p.DutyOn.Milliseconds(), p.DutyPeriod.Milliseconds()))
	}
	if s.plan.DutyStart == "cycles" {
		env = append(env, "SPECPROF_CUPTI_DUTY_START=cycles")
	}
	if s.plan.Windows > 0 {
		env = append(env, fmt.Sprintf("SPECPROF_CUPTI_WINDOWS=%d", s.plan.Windows))
	}
	if s.plan.Detach {
		env = append(env, "SPECPROF_CUPTI_DETACH=1")
	}
	if s.plan.GraphRecords {
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
func (s *runSession) listenCUPTI() (*cupti.Receiver, error) {
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
func (s *runSession) finish() error {
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
	if r.Tracing == nil {
		r.Tracing = &model.Tracing{}
	}
	r.Tracing.Mode, r.Tracing.Plan = string(s.plan.Mode), s.plan.Describe()
	if s.plan.DutyStart == "cycles" {
		for _, p := range r.Processes {
			if p.GPU != nil && (p.Duty == nil || p.Duty.Windows == 0) {
				p.Problems = append(p.Problems, "no GPU tracing window opened (windows open only while decode cycles run): the agent saw no decode cycle of this process; check --preset or --rules")
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
	if s.cfg.CallTree {
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
func (s *runSession) writeReportJSON(r *model.Report) (string, error) {
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
func (s *runSession) writeCallTree() (string, error) {
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

func (s *runSession) close() {
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
func (s *runSession) logBPFStats() {
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
func (s *runSession) runAgent(done <-chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-done; cancel() }()
	if !s.cfg.Quiet {
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
func (s *runSession) statusLines(done <-chan struct{}) {
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

func anyLibrary(r *model.Report) bool {
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
func (s *runSession) startSpecMetrics(canTee bool) (stdout, stderr *specmetrics.LineScanner, err error) {
	src := s.cfg.SpecMetrics
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
func (s *runSession) writeSpecWindow() {
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

func (s *runSession) specTotal() *model.SpecMetrics {
	if s.spec == nil {
		return nil
	}
	t := s.spec.Total()
	if !t.HasAccept && !t.HasTok && s.specLinesDropped == 0 {
		return nil
	}
	m := &model.SpecMetrics{Source: s.specSrc, Samples: t.Samples,
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
