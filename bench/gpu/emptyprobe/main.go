package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/specprof/specprof/agent/proc"
	"github.com/specprof/specprof/bpf"
)

func main() {
	pid := flag.Int("pid", 0, "process whose libcuda gets the empty probes")
	duration := flag.Duration("duration", 10*time.Second, "how long the probes stay")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *pid, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "emptyprobe:", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, pid int, duration time.Duration) error {
	if pid <= 0 {
		return fmt.Errorf("-pid is required")
	}
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return fmt.Errorf("read the maps of pid %d: %w", pid, err)
	}
	lib := ""
	for _, m := range maps {
		if m.FileBacked() && proc.IsCUDADriver(m.Path) {
			lib = fmt.Sprintf("/proc/%d/root%s", pid, m.Path)
			break
		}
	}
	if lib == "" {
		return fmt.Errorf("pid %d has not loaded libcuda", pid)
	}
	tr, err := bpf.Load()
	if err != nil {
		return err
	}
	defer tr.Close()
	var links []link.Link
	defer func() {
		for _, l := range links {
			_ = l.Close()
		}
	}()
	missing := 0
	for _, h := range bpf.Hooks {
		if h.Lib != bpf.LibCUDA {
			continue
		}
		for _, sym := range h.Symbols {
			l, err := tr.AttachEmpty(pid, lib, sym)
			if err != nil {
				missing++ // older drivers lack some variants, as for specprof
				continue
			}
			links = append(links, l)
		}
	}
	if len(links) == 0 {
		return fmt.Errorf("no symbol of specprof's hooks could be probed in %s", lib)
	}
	log.Info("probes attached", "pid", pid, "library", lib, "symbols", len(links), "missing", missing)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(duration):
	}
	return nil
}
