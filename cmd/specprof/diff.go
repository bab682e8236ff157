package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/specprof/specprof/model"

	"github.com/spf13/cobra"
)

func newDiffCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "diff A/report.json B/report.json",
		Short: "Compare two sessions phase by phase (per cycle means), e.g. a sweep of draft steps",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			a, err := loadReport(args[0])
			if err != nil {
				return err
			}
			b, err := loadReport(args[1])
			if err != nil {
				return err
			}
			return writeDiff(os.Stdout, args[0], args[1], a, b)
		},
	}
}

func loadReport(path string) (*model.Report, error) {
	f, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r model.Report
	if err := json.Unmarshal(f, &r); err != nil {
		return nil, fmt.Errorf("report %s: %w (is it a specprof report.json?)", path, err)
	}
	return &r, nil
}

// perCycle sums, over every thread that ran cycles, the phase figures and
// divides them by the cycle count: per-cycle means of the whole session.
type perCycle struct {
	cycles  int
	cycleNs float64
	phases  map[string]*model.PhaseStats
	order   []string
}

func summarize(r *model.Report) perCycle {
	pc := perCycle{phases: map[string]*model.PhaseStats{}}
	for _, p := range r.Processes {
		for _, t := range p.Threads {
			if t.Cycles == 0 {
				continue
			}
			pc.cycles += t.Cycles
			pc.cycleNs += float64(t.CycleNs)
			for _, ph := range t.Phases {
				s := pc.phases[ph.Phase]
				if s == nil {
					s = &model.PhaseStats{Phase: ph.Phase}
					pc.phases[ph.Phase] = s
					pc.order = append(pc.order, ph.Phase)
				}
				s.Launches += ph.Launches
				s.CPUSpanNs += ph.CPUSpanNs
				s.SyncWaitNs += ph.SyncWaitNs
				s.GPUBusyNs += ph.GPUBusyNs
				s.GPUActiveNs += ph.GPUActiveNs
				s.GPUKernels += ph.GPUKernels
				s.CollBytes += ph.CollBytes
			}
		}
	}
	return pc
}

func writeDiff(w io.Writer, an, bn string, a, b *model.Report) error {
	sa, sb := summarize(a), summarize(b)
	if sa.cycles == 0 || sb.cycles == 0 {
		return fmt.Errorf("diff needs cycles in both reports (A: %d, B: %d): were they made with the right preset?", sa.cycles, sb.cycles)
	}
	fmt.Fprintf(w, "A: %s (%d cycles)\nB: %s (%d cycles)\nper-cycle means, B relative to A\n\n", an, sa.cycles, bn, sb.cycles)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tmetric\tA\tB\tΔ\tΔ %\t")
	row := func(phase, metric string, va, vb float64, unit string) {
		d := vb - va
		pct := "-"
		if va != 0 {
			pct = fmt.Sprintf("%+.1f", 100*d/va)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f%s\t%.3f%s\t%+.3f\t%s\t\n", phase, metric, va, unit, vb, unit, d, pct)
	}
	row("cycle", "cpu ms", sa.cycleNs/float64(sa.cycles)/1e6, sb.cycleNs/float64(sb.cycles)/1e6, "")
	seen := map[string]bool{}
	names := append(append([]string(nil), sa.order...), sb.order...)
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		pa, pb := sa.phases[n], sb.phases[n]
		if pa == nil {
			pa = &model.PhaseStats{}
		}
		if pb == nil {
			pb = &model.PhaseStats{}
		}
		ca, cb := float64(sa.cycles), float64(sb.cycles)
		if pa.GPUBusyNs+pb.GPUBusyNs > 0 {
			row(n, "gpu busy ms", float64(pa.GPUBusyNs)/ca/1e6, float64(pb.GPUBusyNs)/cb/1e6, "")
			if pa.GPUActiveNs+pb.GPUActiveNs > 0 {
				row(n, "gpu active ms", float64(pa.GPUActiveNs)/ca/1e6, float64(pb.GPUActiveNs)/cb/1e6, "")
			}
			row(n, "kernels", float64(pa.GPUKernels)/ca, float64(pb.GPUKernels)/cb, "")
		}
		row(n, "cpu span ms", float64(pa.CPUSpanNs)/ca/1e6, float64(pb.CPUSpanNs)/cb/1e6, "")
		row(n, "launches", float64(pa.Launches)/ca, float64(pb.Launches)/cb, "")
		if pa.SyncWaitNs+pb.SyncWaitNs > 0 {
			row(n, "sync wait ms", float64(pa.SyncWaitNs)/ca/1e6, float64(pb.SyncWaitNs)/cb/1e6, "")
		}
	}
	if a.Spec != nil && b.Spec != nil && a.Spec.AcceptLen != nil && b.Spec.AcceptLen != nil {
		row("server", "accept len", *a.Spec.AcceptLen, *b.Spec.AcceptLen, "")
	}
	if a.Spec != nil && b.Spec != nil && a.Spec.TokPerSec != nil && b.Spec.TokPerSec != nil {
		row("server", "tok/s", *a.Spec.TokPerSec, *b.Spec.TokPerSec, "")
	}
	return tw.Flush()
}
