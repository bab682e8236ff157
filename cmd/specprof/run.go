package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func newRunCmd() *cobra.Command {
	var f sessionFlags
	c := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Start COMMAND under specprof and profile it (and the processes it starts) until it exits",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runCommand(&f, args)
		},
	}
	f.register(c)
	// Everything from COMMAND on is the command's, with or without "--".
	c.Flags().SetInterspersed(false)
	return c
}

func runCommand(f *sessionFlags, args []string) error {
	if _, err := exec.LookPath(args[0]); err != nil {
		return fmt.Errorf("command %q: %w", args[0], err)
	}
	s, err := newSession(f, os.Stdout)
	if err != nil {
		return err
	}
	defer s.close()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(self, append([]string{gateArg, "--"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	env, err := s.startCUPTI()
	if err != nil {
		return err
	}
	cmd.Env = append(os.Environ(), env...)
	tout, terr, err := s.startSpecMetrics(true)
	if err != nil {
		return err
	}
	var t *tee
	if tout != nil {
		// The target writes into pipes held by the output helper, which
		// passes its output on to the terminal whatever becomes of
		// specprof and forwards a copy of its lines for the log scanners.
		if t, err = startTee(self, tout, terr); err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = t.stdout, t.stderr
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		if t != nil {
			t.started()
		}
		return fmt.Errorf("create exec gate pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{rd}
	if err := s.startGateWatchdog(); err != nil {
		rd.Close()
		wr.Close()
		if t != nil {
			t.started()
		}
		return err
	}
	err = cmd.Start()
	rd.Close()
	if t != nil {
		t.started()
	}
	if err != nil {
		wr.Close()
		return fmt.Errorf("start %s: %w", args[0], err)
	}
	if err := s.ag.AddRoot(cmd.Process.Pid, true); err != nil {
		_, _ = wr.Write([]byte{'x'})
		wr.Close()
		_ = cmd.Wait()
		return fmt.Errorf("trace %s: %w", args[0], err)
	}
	wr.Close() // release the gate: the target execs now, traced

	// The terminal's Ctrl-C reaches the target too; forward what is sent to
	// specprof alone, and keep running until the target is gone.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			_ = cmd.Process.Signal(sig)
		}
	}()

	done := make(chan struct{})
	agentErr := make(chan error, 1)
	go func() { agentErr <- s.runAgent(done) }()
	waitErr := cmd.Wait()
	if t != nil {
		lines, n, err := t.finish()
		if err != nil {
			fmt.Fprintln(os.Stderr, "specprof:", err)
		}
		tout.Flush()
		terr.Flush()
		s.specLinesDropped, s.specBytesDropped = lines, n
	}
	close(done)
	if err := <-agentErr; err != nil {
		fmt.Fprintln(os.Stderr, "specprof: agent:", err)
	}
	if err := s.finish(); err != nil {
		return err
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
			core := ""
			if ws.CoreDump() {
				core = " (core dumped)"
			}
			fmt.Fprintf(os.Stderr, "specprof: %s was killed by signal %s%s; the profile above covers it until then\n",
				args[0], unix.SignalName(ws.Signal()), core)
		}
		return exitError{code}
	}
	return waitErr
}
