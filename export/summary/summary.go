package summary

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
func WriteWindow(w io.Writer, title string, win *agent.Window, lay Layout) error {
	n := float64(win.Cycles())
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n%s tid %d  cycles %d-%d  mean cycle %s ms\n", title, win.TID, win.FirstCycle, win.LastCycle, ms(float64(win.CycleNs)/n))
	if err := wrapped(w, lay, b.Bytes()); err != nil {
		return err
	}
	return writePhases(w, lay, win.Phases, n, float64(win.CycleNs), n-float64(win.Untraced))
}

// Phase table columns. Rank 0 always stays; the others go, highest rank
// first, when the table is wider than the terminal.
var (
	colPhase      = column{"phase", 0}
	colLaunches   = column{"launches/cyc", 0}
	colGraphs     = column{"graph/cyc", 12}
	colSpan       = column{"cpu span ms", 0}
	colSpanPct    = column{"% cycle", 0}
	colSyncWait   = column{"sync wait ms", 0}
	colSyncs      = column{"syncs/cyc", 9}
	colColls      = column{"coll/cyc", 10}
	colCollMB     = column{"coll MB/cyc", 11}
	colGPUBusy    = column{"gpu busy ms", 1}
	colGPUActive  = column{"gpu active ms", 5}
	colHostGap    = column{"host gap ms", 8}
	colGPUPct     = column{"gpu % cycle", 2}
	colKernels    = column{"kernels/cyc", 6}
	colCollPct    = column{"coll % gpu", 4}
	colGPUGraphs  = column{"gpu graphs/cyc", 13}
	colCPUSampled = column{"cpu ms", 3}
)

// writePhases prints the phase table: per-cycle figures over cycles, GPU
// figures over gpuCycles (fewer with duty-cycled GPU tracing).
func writePhases(w io.Writer, lay Layout, phases []*agent.PhaseStats, cycles, cycleNs, gpuCycles float64) error {
	gpu, cpu, graphs, colls := false, false, false, false
	for _, p := range phases {
		gpu = gpu || p.GPUCycles > 0
		cpu = cpu || p.CPUSamples > 0 // the CPU sampler ran
		graphs = graphs || p.GPUGraphs > 0
		colls = colls || p.Colls > 0
	}
	t := &table{cols: []column{colPhase, colLaunches, colGraphs, colSpan, colSpanPct, colSyncWait, colSyncs}}
	if colls {
		t.cols = append(t.cols, colColls, colCollMB)
	}
	if gpu {
		t.cols = append(t.cols, colGPUBusy, colGPUActive, colHostGap, colGPUPct, colKernels)
		if colls {
			t.cols = append(t.cols, colCollPct)
		}
		if graphs { // graph-level tracing: replays counted whole, their kernels not
			t.cols = append(t.cols, colGPUGraphs)
		}
	}
	if cpu {
		t.cols = append(t.cols, colCPUSampled)
	}
	pct := func(ns int64) float64 {
		if cycleNs <= 0 {
			return 0
		}
		return 100 * float64(ns) / cycleNs
	}
	f1 := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	for _, p := range phases {
		row := []string{p.Phase, f1(float64(p.Launches) / cycles), f1(float64(p.GraphLaunch) / cycles),
			ms(float64(p.CPUSpanNs) / cycles), f1(pct(p.CPUSpanNs)), ms(float64(p.SyncWaitNs) / cycles), f1(float64(p.Syncs) / cycles)}
		if colls {
			row = append(row, f1(float64(p.Colls)/cycles), fmt.Sprintf("%.3f", float64(p.CollBytes)/cycles/1e6))
		}
		if gpu {
			gc := max(gpuCycles, 1)
			busy := float64(p.GPUBusyNs) / gc
			// Active: busy plus the GPU's hand-over gaps between queued
			// work (agent.PhaseStats.GPUActiveNs), what CUDA events around
			// a GPU-bound phase measure. Host gap: the GPU idle before the
			// phase's work, waiting for the host (agent.PhaseStats.GPUHostGapNs).
			row = append(row, ms(busy), ms(float64(p.GPUActiveNs)/gc), ms(float64(p.GPUHostGapNs)/gc),
				f1(100*busy/max(cycleNs/cycles, 1)), f1(float64(p.GPUKernels)/gc))
			if colls {
				// The collectives' share of the phase's GPU time (allreduce
				// in verify): their kernels' time over the phase's busy time.
				share := 0.0
				if p.GPUBusyNs > 0 {
					share = 100 * float64(p.CollGPUNs) / float64(p.GPUBusyNs)
				}
				row = append(row, f1(share))
			}
			if graphs {
				row = append(row, f1(float64(p.GPUGraphs)/gc))
			}
		}
		if cpu {
			row = append(row, ms(float64(p.CPUNs)/cycles))
		}
		t.add(row...)
	}
	return t.render(w, lay)
}

// WriteReport prints the final report: per process and thread, the phase
// table over all cycles, calls outside cycles, and every loss counter.
// Long lines are wrapped to the layout's width.
func WriteReport(out io.Writer, r *agent.Report, lay Layout) error {
	pw := &prose{out: out, lay: lay}
	w := &pw.buf
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
		if p.NSPID != 0 {
			fmt.Fprintf(w, "\npid %d (%d in its pid namespace)  %s\n", p.PID, p.NSPID, trim(p.Cmdline, 100))
		} else {
			fmt.Fprintf(w, "\npid %d  %s\n", p.PID, trim(p.Cmdline, 100))
		}
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
			fmt.Fprintf(w, "  tid %d", t.TID)
			if t.NSTID != 0 {
				fmt.Fprintf(w, " (%d in its namespace)", t.NSTID)
			}
			fmt.Fprintf(w, ": %d calls, %d cycles", t.Calls, t.Cycles)
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
				if err := pw.flush(); err != nil {
					return err
				}
				if err := writePhases(out, lay, t.Phases, float64(t.Cycles), float64(t.CycleNs), float64(t.Cycles-t.Untraced-t.GPUPartial-t.GPULost)); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(w)
			}
			if len(t.Outside) > 0 {
				fmt.Fprintf(w, "  outside cycles (totals):")
				for _, s := range t.Outside {
					fmt.Fprintf(w, " %s=%d calls", s.Phase, s.Launches+s.Copies+s.Syncs+s.Colls+s.Markers)
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
	if g := r.GPUReceiver; g != nil && g.Rejected+g.Malformed+g.NamesNotKept+g.TidsUnmapped > 0 {
		fmt.Fprintf(w, "CUPTI socket: %d connections accepted, %d rejected (not traced %d, pid mismatch %d, over limit %d, no HELLO in time %d, bad HELLO %d, peer unknown %d; at most %d held at once); malformed records %d (bad length %d, unknown type %d, short %d, truncated %d, bad name %d, extra HELLO %d); kernel names not kept %d; container thread ids not mapped to host ids %d\n",
			g.Accepted, g.Rejected, g.NotTraced, g.PidMismatch, g.OverLimit, g.NoHello, g.BadHello, g.PeerUnknown, g.PeakOpen,
			g.Malformed, g.BadLength, g.UnknownType, g.Short, g.Truncated, g.BadName, g.ExtraHello, g.NamesNotKept, g.TidsUnmapped)
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
	return pw.flush()
}

// prose collects the report's lines between tables, to be wrapped.
type prose struct {
	out io.Writer
	lay Layout
	buf bytes.Buffer
}

func (p *prose) flush() error {
	if p.buf.Len() == 0 {
		return nil
	}
	err := wrapped(p.out, p.lay, p.buf.Bytes())
	p.buf.Reset()
	return err
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
// not several cycles long leave most cycles without GPU figures.
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
