package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/export/summary"
)

type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func asExit(err error, ee *exitError) bool { return errors.As(err, ee) }

// sessionFlags are shared by run and attach.
type sessionFlags struct {
	preset   string
	rules    string
	interval int
	outDir   string
	events   string
	quiet    bool
	verbose  bool
}

func (f *sessionFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.preset, "preset", "sglang-eagle", "phase preset ("+fmt.Sprint(phase.Presets())+")")
	fl.StringVar(&f.rules, "rules", "", "YAML file with phase rules (may extend a preset)")
	fl.IntVar(&f.interval, "interval", 100, "print the phase table every N cycles (0: only the final report)")
	fl.StringVarP(&f.outDir, "output", "o", "", "output directory (default ./specprof-out/<timestamp>)")
	fl.StringVar(&f.events, "events", "", "also write every attributed call as JSON lines to this file")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no periodic tables")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "debug logging")
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
	mu     sync.Mutex
	evFile *os.File
	evEnc  *eventWriter
	outDir string
}

func newSession(f *sessionFlags, out io.Writer) (*session, error) {
	preset, err := f.loadPreset()
	if err != nil {
		return nil, err
	}
	if f.interval < 0 {
		return nil, fmt.Errorf("--interval %d: must be 0 or more", f.interval)
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s := &session{flags: f, out: out}
	s.outDir = f.outDir
	if s.outDir == "" {
		s.outDir = filepath.Join("specprof-out", time.Now().Format("20060102-150405"))
	}
	if f.events != "" {
		s.evFile, err = os.Create(f.events)
		if err != nil {
			return nil, fmt.Errorf("create events file: %w", err)
		}
		s.evEnc = newEventWriter(s.evFile)
	}
	if os.Geteuid() != 0 {
		log.Warn("not running as root: specprof needs root or CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH")
	}
	tr, err := bpf.Load()
	if err != nil {
		return nil, err
	}
	s.tr = tr
	opts := agent.Options{Preset: preset, Interval: f.interval, Logger: log}
	if !f.quiet && f.interval > 0 {
		opts.OnWindow = func(w *agent.Window) {
			s.mu.Lock()
			defer s.mu.Unlock()
			_ = summary.WriteWindow(s.out, fmt.Sprintf("[specprof] pid %d", w.PID), w)
		}
	}
	if s.evEnc != nil {
		opts.OnEvent = s.evEnc.write
	}
	s.ag, err = agent.New(tr, opts)
	if err != nil {
		tr.Close()
		return nil, err
	}
	return s, nil
}

// finish writes the final report to the terminal and the output directory.
func (s *session) finish() error {
	s.ag.Finish()
	r := s.ag.Report()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := summary.WriteReport(s.out, r); err != nil {
		return err
	}
	if !anyLibrary(r) {
		fmt.Fprintln(s.out, "specprof: no traced process loaded libcuda.so or libnccl.so, so no CUDA call was traced "+
			"(check that the program uses CUDA and that its libcuda.so.1 is the one on its library path)")
	}
	path, err := summary.WriteJSON(s.outDir, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "report: %s\n", path)
	if s.evFile != nil {
		s.evEnc.flush()
		s.evFile.Close()
	}
	return nil
}

func (s *session) close() { s.tr.Close() }

// runAgent runs the agent until done is closed, then drains events.
func (s *session) runAgent(done <-chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-done; cancel() }()
	return s.ag.Run(ctx)
}

func anyLibrary(r *agent.Report) bool {
	for _, p := range r.Processes {
		if len(p.Libraries) > 0 {
			return true
		}
	}
	return false
}
