package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/specprof/specprof/agent/proc"
	"github.com/specprof/specprof/session"
)

func newAttachCmd() *cobra.Command {
	var (
		f        sessionFlags
		pid      int
		duration time.Duration
	)
	c := &cobra.Command{
		Use:   "attach --pid PID",
		Short: "Profile a running Python process until Ctrl-C, --duration, or its exit",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return fmt.Errorf("--pid is required (the PID of a running Python process)")
			}
			if !proc.Exists(pid) {
				return fmt.Errorf("pid %d does not exist", pid)
			}
			// CUPTI's library is loaded by the driver at cuInit (CUDA_INJECTION64_PATH): a
			// running process cannot be given it. Checked on the flags as
			// given, before the combination rules of Validate.
			what := "--mode full"
			if f.cfg.Dev.CUPTI == "on" {
				what = "--cupti on"
			}
			if f.cfg.Dev.CUPTI == "on" || f.cfg.Mode == session.ModeFull {
				return fmt.Errorf("%s: attach cannot inject the CUPTI library into a running process; "+
					"start it under `specprof run` for GPU-side records, or attach with --mode cpu", what)
			}
			if f.cfg.Dev.DutyStart != "now" {
				return fmt.Errorf("--cupti-duty-start %s: attach cannot change when a running process's CUPTI library opens its windows; "+
					"start the process with SPECPROF_CUPTI_DUTY_START=cycles in its environment (every session tells its library when cycles run)", f.cfg.Dev.DutyStart)
			}
			s, err := newSession(&f, os.Stdout)
			if err != nil {
				return err
			}
			defer s.close()
			if _, _, err := s.startSpecMetrics(false); err != nil {
				return err
			}
			if err := s.ag.AttachRunning(pid); err != nil {
				return fmt.Errorf("attach to pid %d: %w", pid, err)
			}
			fmt.Fprintf(os.Stderr, "specprof: attached to pid %d; Ctrl-C to stop\n", pid)
			done := make(chan struct{})
			agentErr := make(chan error, 1)
			go func() { agentErr <- s.runAgent(done) }()
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			var timeout <-chan time.Time
			if duration > 0 {
				timeout = time.After(duration)
			}
			select {
			case <-sigs:
			case <-timeout:
			case <-s.ag.Exited():
				fmt.Fprintf(os.Stderr, "specprof: pid %d exited\n", pid)
			}
			signal.Stop(sigs)
			close(done)
			if err := <-agentErr; err != nil {
				fmt.Fprintln(os.Stderr, "specprof: agent:", err)
			}
			return s.finish()
		},
	}
	f.register(c)
	c.Flags().IntVarP(&pid, "pid", "p", 0, "PID of the Python process to profile")
	c.Flags().DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C or exit)")
	return c
}
