package summary

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/agent/calltree"
)

// Process names a process in table titles.
type Process struct {
	PID     int
	Cmdline string
}

func ms(ns float64) string { return fmt.Sprintf("%.3f", ns/1e6) }

// WriteWindow prints the table of one window of cycles: per phase the
// launches, CPU span, blocked time, collectives and bytes, per cycle.
// When the CPU sampler ran, "cpu ms" is the CPU time sampled in the phase
// (samples × period) per cycle.
func WriteWindow(w io.Writer, title string, win *agent.Window) error {
	n := float64(win.Cycles())
	fmt.Fprintf(w, "\n%s tid %d  cycles %d-%d  mean cycle %s ms\n", title, win.TID, win.FirstCycle, win.LastCycle, ms(float64(win.CycleNs)/n))
	return writePhases(w, win.Phases, n, float64(win.CycleNs), n-float64(win.Untraced))
}

// writePhases prints the phase table: per-cycle figures over cycles, GPU
// figures over gpuCycles (fewer with duty-cycled GPU tracing).
func writePhases(w io.Writer, phases []*agent.PhaseStats, cycles, cycleNs, gpuCycles float64) error {
	gpu, cpu, graphs := false, false, false
	for _, p := range phases {
		gpu = gpu || p.GPUCycles > 0
		cpu = cpu || p.CPUSamples > 0 // the CPU sampler ran
		graphs = graphs || p.GPUGraphs > 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := "phase\tlaunches/cyc\tgraph/cyc\tcpu span ms\t% cycle\tsync wait ms\tsyncs/cyc\tcoll/cyc\tcoll MB/cyc\t"
	if gpu {
		hdr += "gpu busy ms\tgpu active ms\thost gap ms\tgpu % cycle\tkernels/cyc\tcoll % gpu\t"
		if graphs { // graph-level tracing: replays counted whole, their kernels not
			hdr += "gpu graphs/cyc\t"
		}
	}
	if cpu {
		hdr += "cpu ms\t"
	}
	fmt.Fprintln(tw, hdr)
	pct := func(ns int64) float64 {
		if cycleNs <= 0 {
			return 0
		}
		return 100 * float64(ns) / cycleNs
	}
	for _, p := range phases {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%s\t%.1f\t%s\t%.1f\t%.1f\t%.3f\t", p.Phase,
			float64(p.Launches)/cycles, float64(p.GraphLaunch)/cycles, ms(float64(p.CPUSpanNs)/cycles), pct(p.CPUSpanNs),
			ms(float64(p.SyncWaitNs)/cycles), float64(p.Syncs)/cycles, float64(p.Colls)/cycles,
			float64(p.CollBytes)/cycles/1e6)
		if gpu {
			// The collectives' share of the phase's GPU time (allreduce in
			// verify): their kernels' time over the phase's busy time.
			share := 0.0
			if p.GPUBusyNs > 0 {
				share = 100 * float64(p.CollGPUNs) / float64(p.GPUBusyNs)
			}
			gc := max(gpuCycles, 1)
			busy := float64(p.GPUBusyNs) / gc
			// Active: busy plus the GPU's hand-over gaps between queued
			// work (agent.PhaseStats.GPUActiveNs), what CUDA events around
			// a GPU-bound phase measure. Host gap: the GPU idle before the
			// phase's work, waiting for the host (agent.PhaseStats.GPUHostGapNs).
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t", ms(busy), ms(float64(p.GPUActiveNs)/gc), ms(float64(p.GPUHostGapNs)/gc),
				100*busy/max(cycleNs/cycles, 1), float64(p.GPUKernels)/gc, share)
			if graphs {
				fmt.Fprintf(tw, "%.1f\t", float64(p.GPUGraphs)/gc)
			}
		}
		if cpu {
			fmt.Fprintf(tw, "%s\t", ms(float64(p.CPUNs)/cycles))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteReport prints the final report: per process and thread, the phase
// table over all cycles, calls outside cycles, and every loss counter.
func WriteReport(w io.Writer, r *agent.Report) error {
	fmt.Fprintf(w, "\n=== specprof report (preset %s, %s) ===\n", r.Preset, r.End.Sub(r.Start).Round(1e6))
	if pw := r.ProbeWindows; pw != nil {
		kind := "perf-event uprobes"
		if pw.UprobeMulti {
			kind = "uprobe_multi links"
		}
		fmt.Fprintf(w, "probes in place only in windows (--probe-duty %v/%v): %d windows, %.1f %% of the time; "+
			"removing a window's probes (%s) took %s ms on average, at most %s ms. Only cycles wholly inside a window are measured "+
			"(those cut by a window's edge are left out and counted per thread), and CPU samples are taken only in windows\n",
			time.Duration(pw.OnNs), time.Duration(pw.PeriodNs), pw.Windows, 100*pw.Share, kind,
			ms(float64(pw.DetachMeanNs)), ms(float64(pw.DetachMaxNs)))
		if pw.GPUHeldNs > 0 {
			fmt.Fprintf(w, "  the probes stayed in place %.1f s while the CUPTI libraries traced their GPU windows (--cupti-windows): GPU figures come from those windows only\n",
				float64(pw.GPUHeldNs)/1e9)
		}
	}
	for _, p := range r.Processes {
		fmt.Fprintf(w, "\npid %d  %s\n", p.PID, trim(p.Cmdline, 100))
		if p.Python != "" {
			fmt.Fprintf(w, "  python %s; libraries: %s\n", p.Python, strings.Join(p.Libraries, ", "))
		}
		if g := p.GPU; g != nil {
			fmt.Fprintf(w, "  GPU (CUPTI %d): %d kernels (%d from graphs), %s ms kernel time, %d memcpy (%d bytes), %d memset, %d API records, %d graph nodes; %.0f records/s; dropped: by CUPTI %s, no agent %s, backpressure %s, disconnect %s; buffer requests refused %s\n",
				g.CUPTI, g.Kernels, g.GraphKernel, ms(float64(g.KernelNs)), g.Memcpys, g.MemcpyBytes, g.Memsets, g.APIs, g.GraphNodes,
				g.RecordsPerSecond(), count(g.DroppedCUPTI), count(g.DroppedNoAgent), count(g.DroppedBackpressure), count(g.DroppedDisconnect),
				count(g.BuffersRefused))
			if deref(g.DroppedGraphNodes)+deref(g.NamesDropped)+g.DecodeErrors+g.NameTableFull > 0 {
				fmt.Fprintf(w, "  GPU records incomplete: %d graph-node events beyond the library's table, %d kernels sent unnamed (its name table full), %d names the agent did not keep (its table full), %d malformed records\n",
					deref(g.DroppedGraphNodes), deref(g.NamesDropped), g.NameTableFull, g.DecodeErrors)
			}
		}
		if d := p.Duty; d != nil {
			open := ""
			if d.StillOpen {
				open = " (the last one still open at the end)"
			}
			fmt.Fprintf(w, "  GPU traced in windows (--cupti-duty): %d windows%s, %.1f %% of the time; GPU figures are those of the cycles inside them\n",
				d.Windows, open, 100*d.Share)
			if win, cyc := windowVsCycle(d, p.Threads); cyc > win/2 {
				fmt.Fprintf(w, "  windows (%s ms on average) are not much longer than the cycles (%s ms): few cycles lie wholly inside one; give --cupti-duty an ON time of several cycles\n",
					ms(win), ms(cyc))
			}
		}
		if g := p.GPU; g != nil && g.GPUSwitches > 0 {
			fmt.Fprintf(w, "  switches of CUPTI's GPU tracing: %d, each made by an application thread in a CUDA call, outside any launch: %s ms in all, at most %s ms at once\n",
				g.GPUSwitches, ms(float64(g.GPUSwitchNs)), ms(float64(g.GPUSwitchMaxNs)))
		}
		if g := p.GPU; g != nil && g.DutyStopped > 0 {
			fmt.Fprintf(w, "  GPU tracing windows stopped once the process built CUDA graphs (SPECPROF_CUPTI_DUTY_GRAPHS=0, cupti/README.md); later cycles have CPU figures only\n")
		}
		if g := p.GPU; g != nil && g.Detaches > 0 {
			fmt.Fprintf(w, "  CUPTI detached once nothing more was to be traced (--cupti-detach): the application thread that ran the detach waited %s ms; no GPU records from this process after it\n",
				ms(float64(g.DetachStallNs)))
		}
		if g := p.GPU; g != nil && g.DetachRefused > 0 {
			switch g.DetachQuiet {
			case 0:
				fmt.Fprintf(w, "  CUPTI stayed attached after the last window (--cupti-detach): the process had built CUDA graphs, whose launches fail once CUPTI is finalized; attached, CUPTI still costs every CUDA call (cupti/README.md)\n")
			default:
				how := "every CUPTI callback turned off"
				if g.DetachQuiet == 2 {
					how += " and CUPTI unsubscribed"
				}
				fmt.Fprintf(w, "  CUPTI not finalized after the last window (--cupti-detach): the process had built CUDA graphs, whose launches fail once CUPTI is finalized; %s instead; no GPU records from this process after it (cupti/README.md)\n", how)
			}
		}
		for _, pr := range p.Problems {
			fmt.Fprintf(w, "  problem: %s\n", pr)
		}
		for _, t := range p.Threads {
			fmt.Fprintf(w, "  tid %d: %d calls, %d cycles", t.TID, t.Calls, t.Cycles)
			if t.GPUPartial > 0 {
				fmt.Fprintf(w, " (%d begun before the CUPTI library connected: CPU figures only)", t.GPUPartial)
			}
			if t.Untraced > 0 {
				fmt.Fprintf(w, " (%d outside the GPU tracing windows: CPU figures only)", t.Untraced)
			}
			if t.GPULost > 0 {
				fmt.Fprintf(w, " (%d with a launch whose CUPTI API record was lost: CPU figures only)", t.GPULost)
			}
			if t.ProbeCut > 0 {
				fmt.Fprintf(w, " (and %d cut by a probe window's edge, left out)", t.ProbeCut)
			}
			if t.LossCut > 0 {
				fmt.Fprintf(w, " (and %d with call records lost to a full ring buffer, left out)", t.LossCut)
			}
			if t.Cycles > 0 {
				fmt.Fprintf(w, ", mean cycle %s ms\n", ms(float64(t.CycleNs)/float64(t.Cycles)))
				if err := writePhases(w, t.Phases, float64(t.Cycles), float64(t.CycleNs), float64(t.Cycles-t.Untraced-t.GPUPartial-t.GPULost)); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(w)
			}
			if len(t.Outside) > 0 {
				fmt.Fprintf(w, "  outside cycles (totals):")
				for _, s := range t.Outside {
					fmt.Fprintf(w, " %s=%d calls", s.Phase, s.Launches+s.Syncs+s.Colls+s.Markers)
					if s.CPUSamples > 0 {
						fmt.Fprintf(w, "/%s ms cpu", ms(float64(s.CPUNs)))
					}
				}
				fmt.Fprintln(w)
			}
		}
		writeVersion(w, p.Version)
		writeAttribution(w, p.Attribution)
	}
	l := r.Loss
	if l.LaunchesWithoutAPI+l.GPUUnhooked+l.GPUWithoutAPI+l.GPULate+l.GPUDuplicates+l.GPUPending+l.GPUStreamInversions+l.APIDuplicates > 0 {
		fmt.Fprintf(w, "GPU join: launches without a CUPTI API record %d; GPU records of unhooked calls %d, without API record %d, late %d, duplicated %d, pending %d, out of stream order %d; API records with a correlation id seen before %d\n",
			l.LaunchesWithoutAPI, l.GPUUnhooked, l.GPUWithoutAPI, l.GPULate, l.GPUDuplicates, l.GPUPending, l.GPUStreamInversions, l.APIDuplicates)
		if l.APIDuplicates > 0 {
			fmt.Fprintln(w, "  CUPTI gave several calls one correlation id, so their GPU work could not be joined; with duty-cycled tracing, leave SPECPROF_CUPTI_API_SOURCE unset (API records from CUPTI's callbacks)")
		}
	}
	if l.LaunchesStraddled > 0 {
		fmt.Fprintf(w, "GPU tracing windows: %d launches made just before a window closed had no API record: their calls may have run past the close (their thread likely preempted in the call); their cycles have CPU figures only\n",
			l.LaunchesStraddled)
	}
	if c := r.CPU; c.Samples > 0 || l.SamplesLost > 0 {
		fmt.Fprintf(w, "\ncpu samples %d (%s ms of CPU): %d with a Python stack, %d in the kernel; without a Python stack: %d native threads, %d unknown interpreter, %d read errors; %d stacks truncated, %d torn frames (taken mid frame push); %d lost (ring buffer full)\n",
			c.Samples, ms(float64(c.CPUNs)), c.Python, c.Kernel, c.NoThreadState, c.NoPython, c.ReadErrors, c.Truncated, l.SampleTornFrames, l.SamplesLost)
	}
	if len(r.Ranks) > 0 {
		fmt.Fprintf(w, "\ntensor-parallel ranks (collectives compared by cycle and order):\n")
		for _, k := range r.Ranks {
			share := 0.0
			if k.Collectives > 0 {
				share = 100 * float64(k.LastArrivals) / float64(k.Collectives)
			}
			fmt.Fprintf(w, "  TP%d pid %d: last to arrive at %d of %d collectives (%.1f %%), the others waited %s ms for it; the straggler in %d of %d cycles",
				k.Rank, k.PID, k.LastArrivals, k.Collectives, share, ms(float64(k.WaitImposedNs)), k.StragglerCycles, k.Cycles)
			if k.Uncompared > 0 {
				fmt.Fprintf(w, " (%d cycles no other rank matched)", k.Uncompared)
			}
			fmt.Fprintln(w)
		}
	}
	if g := r.GPUReceiver; g != nil && g.Rejected+g.Malformed+g.NamesNotKept > 0 {
		fmt.Fprintf(w, "CUPTI socket: %d connections accepted, %d rejected (not traced %d, pid mismatch %d, over limit %d, no HELLO in time %d, bad HELLO %d, peer unknown %d; at most %d held at once); malformed records %d (bad length %d, unknown type %d, short %d, truncated %d, bad name %d, extra HELLO %d); kernel names not kept %d\n",
			g.Accepted, g.Rejected, g.NotTraced, g.PidMismatch, g.OverLimit, g.NoHello, g.BadHello, g.PeerUnknown, g.PeakOpen,
			g.Malformed, g.BadLength, g.UnknownType, g.Short, g.Truncated, g.BadName, g.ExtraHello, g.NamesNotKept)
	}
	for _, e := range r.Exports {
		if e.Dropped+e.Failed+e.Unsent > 0 && !e.OwnLine {
			fmt.Fprintf(w, "export %s: %d %s dropped, %d failed, %d unsent", e.Exporter, e.Dropped, e.Unit, e.Failed, e.Unsent)
			if e.Detail != "" {
				fmt.Fprintf(w, " (%s)", e.Detail)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "\nevents %d; lost: ringbuf %d, scratch %d, openat %d, decode %d; unattributed: no-python %d, no-thread-state %d, read-errors %d, truncated %d, stale %d, symbolize %d, after the process exited %d, unmatched sync exits %d\n",
		r.Events, l.RingBuf, l.Scratch, l.OpenAt, l.DecodeErrors, l.NoPython, l.NoThreadState, l.ReadErrors, l.Truncated, l.Stale, l.SymbolErrors, l.ExitedUnread, l.UnmatchedExit)
	return nil
}

// count prints a counter that may be unknown (nil).
func count(p *uint64) string {
	if p == nil {
		return "unknown"
	}
	return fmt.Sprint(*p)
}

// deref is a counter's value, 0 when unknown (the report says so elsewhere).
func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// JSONFile is the name of the report's JSON file in a session's output
// directory.
const JSONFile = "report.json"

// WriteJSON writes the report as indented JSON to w.
func WriteJSON(w io.Writer, r *agent.Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// windowVsCycle returns the mean length of a process's tracing windows and
// the mean cycle of its busiest thread (ns; 0 when unknown). A cycle counts
// as traced only when it lies wholly inside a window, so windows that are
// not several cycles long leave most cycles without GPU figures (on the H200,
// 100 ms windows over HF's 110 ms cycles traced 2 to 4 cycles of 91).
func windowVsCycle(d *agent.DutyStats, threads []*agent.ThreadReport) (win, cyc float64) {
	if d.Windows == 0 {
		return 0, 0
	}
	var busiest *agent.ThreadReport
	for _, t := range threads {
		if t.Cycles > 0 && (busiest == nil || t.Cycles > busiest.Cycles) {
			busiest = t
		}
	}
	if busiest == nil {
		return 0, 0
	}
	return float64(d.WindowNs) / float64(d.Windows), float64(busiest.CycleNs) / float64(busiest.Cycles)
}

// TerminalTopFrames is how many of the top unattributed frames the
// terminal lists (report.json has agent.MaxTopFrames).
const TerminalTopFrames = 5

// UnattributedHint is the share of unattributed launches or GPU time from
// which the report points at `specprof rules suggest`.
const UnattributedHint = 0.10

func pct(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// writeVersion says when the installed server version is not one the
// preset was checked against, or could not be found.
func writeVersion(w io.Writer, v *agent.VersionCheck) {
	if v == nil {
		return
	}
	switch v.Status {
	case agent.VersionChecked:
		fmt.Fprintf(w, "  server: %s %s, among the versions the rules were checked against (%s)\n", v.Distribution, v.Installed, strings.Join(v.Checked, ", "))
	case agent.VersionOutside:
		fmt.Fprintf(w, "  server version: %s\n", v.Problem)
	default:
		fmt.Fprintf(w, "  server version: %s (the rules were checked against %s %s)\n", v.Problem, v.Distribution, strings.Join(v.Checked, ", "))
	}
}

// writeAttribution prints the share of launches and GPU time the rules did
// not attribute, and the innermost frames that made the most of it.
func writeAttribution(w io.Writer, a *agent.Attribution) {
	if a == nil || a.Launches == 0 {
		return
	}
	fmt.Fprintf(w, "  unattributed: %.1f %% of %d launches (phase other %.1f %%, outside cycles %.1f %%)",
		pct(a.UnattributedLaunches, a.Launches), a.Launches, pct(a.OtherLaunches, a.Launches), pct(a.OutsideLaunches, a.Launches))
	if a.GPU {
		fmt.Fprintf(w, "; %.1f %% of %s ms GPU kernel time (phase other %.1f %%, outside cycles %.1f %%)",
			pct(a.UnattributedGPUNs, a.GPUNs), ms(float64(a.GPUNs)), pct(a.OtherGPUNs, a.GPUNs), pct(a.OutsideGPUNs, a.GPUNs))
	}
	fmt.Fprintln(w)
	if a.UnattributedLaunches == 0 {
		return
	}
	list := func(title string, fs []*agent.FrameStats, val func(*agent.FrameStats) string) {
		if len(fs) == 0 {
			return
		}
		fmt.Fprintf(w, "    %s:\n", title)
		for i, f := range fs {
			if i == TerminalTopFrames {
				break
			}
			name := f.Frame.String()
			if name == "" {
				name = "(frame unknown)"
			}
			fmt.Fprintf(w, "      %s  %s\n", val(f), trim(name, 140))
		}
	}
	list("by launches, innermost frame", a.TopByLaunches, func(f *agent.FrameStats) string {
		return fmt.Sprintf("%8d %5.1f %%", f.Launches, pct(f.Launches, a.Launches))
	})
	if a.GPU {
		list("by GPU kernel time, innermost frame", a.TopByGPU, func(f *agent.FrameStats) string {
			return fmt.Sprintf("%8s ms %5.1f %%", ms(float64(f.GPUNs)), pct(f.GPUNs, a.GPUNs))
		})
	}
	if pct(a.UnattributedLaunches, a.Launches) >= 100*UnattributedHint || a.GPU && pct(a.UnattributedGPUNs, a.GPUNs) >= 100*UnattributedHint {
		fmt.Fprintf(w, "    the phase rules do not know this code: `specprof rules suggest OUTPUT_DIR > my-rules.yaml` writes rules from its call tree (%s), to check and pass back with --rules\n", calltree.FileName)
	}
}
