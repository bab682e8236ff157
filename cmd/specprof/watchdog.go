package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/specprof/specprof/bpf"
)

// watchdogArg marks the hidden gate watchdog: `specprof run` starts itself
// with it, handing over the gated-process map (fd 3) and the read end of a
// pipe whose write end only specprof holds (fd 4). Whatever happens to
// specprof, the watchdog resumes the processes the library-open gate stopped
// (bpf.GateWatch).
const watchdogArg = "__specprof_gate_watchdog"

// gateSettle is how long the watchdog sweeps after specprof is gone (its
// BPF programs stay attached until the kernel has closed its files).
const gateSettle = time.Second

func runGateWatchdog(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("who", "specprof gate watchdog")
	if len(args) != 1 {
		log.Error("usage: " + watchdogArg + " TIMEOUT")
		return 2
	}
	timeout, err := time.ParseDuration(args[0])
	if err != nil || timeout <= 0 {
		log.Error("bad timeout", "arg", args[0])
		return 2
	}
	// The terminal's signals are for the target and specprof; the watchdog
	// ends when specprof has.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGTSTP,
		syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	m, err := bpf.OpenGateMap(3)
	if err != nil {
		log.Error("start", "err", err)
		return 1
	}
	defer m.Close()
	g := &bpf.GateWatch{Map: m, Timeout: timeout, Settle: gateSettle, Log: log}
	g.Run(bpf.AgentGone(os.NewFile(4, "agent")))
	return 0
}

// gateWatchdog is the running watchdog process, seen from specprof.
type gateWatchdog struct {
	cmd   *exec.Cmd
	alive *os.File // the pipe's write end: closing it (or dying) tells the watchdog
}

// startGateWatchdog starts the watchdog for the processes run's gate stops.
// It must run before the target starts.
func (s *runSession) startGateWatchdog() error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start the gate watchdog: find own executable: %w", err)
	}
	fd, err := unix.FcntlInt(uintptr(s.tr.GateMap().FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("start the gate watchdog: duplicate the gated-process map: %w", err)
	}
	mapFile := os.NewFile(uintptr(fd), "gated")
	defer mapFile.Close()
	rd, wr, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start the gate watchdog: create its pipe: %w", err)
	}
	defer rd.Close()
	cmd := exec.Command(self, watchdogArg, s.cfg.Dev.GateTimeout.String())
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{mapFile, rd}
	// Its own process group: job control (Ctrl-Z, Ctrl-C) is for the
	// target and specprof.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		wr.Close()
		return fmt.Errorf("start the gate watchdog: %w", err)
	}
	s.watchdog = &gateWatchdog{cmd: cmd, alive: wr}
	return nil
}

// stop tells the watchdog that specprof is done and waits for it (its final
// sweep resumes anything still gated).
func (w *gateWatchdog) stop(log *slog.Logger) {
	if w == nil {
		return
	}
	w.alive.Close()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			log.Warn("gate watchdog", "err", err)
		} else if err != nil {
			log.Warn("gate watchdog exited with an error", "code", ee.ExitCode())
		}
	case <-time.After(gateSettle + 2*time.Second):
		log.Warn("gate watchdog did not end; leaving it to finish on its own")
	}
}
