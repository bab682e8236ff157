package agent

import (
	"fmt"
	"time"

	"github.com/specprof/specprof/model"
)

// Probes chosen per session from what the processes do (Options.AutoProbes,
// `--mode auto`): the launch probes stay in place while a process's hooked
// calls are few enough that their traps cost it less than the budget, and
// go into probe windows, ON every PERIOD, once some process makes them
// cost more. Every hooked call pays the probe's trap and the frame walk:
// about ProbeCallCost (docs/overhead.md: the eBPF-only cost of the
// launch-bound eager loop and of HF, over their launch rates). The cost of
// a process is its rate of hooked calls over the last autoEvery while it
// ran decode cycles, times ProbeCallCost: an upper bound where the GPU,
// not the launching thread, sets the pace.

// ProbeCallCost is what one hooked call's probe costs the calling thread.
const ProbeCallCost = 3300 * time.Nanosecond

const (
	// autoProbeOn is the ON time of the probe windows auto chooses: long
	// enough for many cycles of a launch-bound loop (HF's are 25 ms).
	autoProbeOn = 250 * time.Millisecond
	// autoEvery is how often the rates are measured.
	autoEvery = 2 * time.Second
	// autoProbeMinPeriod bounds how often the probes go in and out: a
	// window's attach and detach cost the target more than the call-rate
	// estimate accounts for (docs/overhead.md, `--mode auto`), so the
	// period is never shorter than the spacing measured within budget.
	autoProbeMinPeriod = 10 * time.Second
)

// autoProbes is the state of the choice.
type autoProbes struct {
	budget  float64 // Options.MaxOverhead
	decided bool    // probe windows chosen
	last    time.Time
	calls   map[int]int64  // per process, at the last measurement
	cycled  map[int]uint64 // lastCycleEnd at the last measurement
	worst   model.AutoProbeProcess
	why     string
}

func newAutoProbes(budget float64) *autoProbes {
	return &autoProbes{budget: budget, last: time.Now(), calls: map[int]int64{}, cycled: map[int]uint64{}}
}

// autoDecide measures the processes' call rates every autoEvery and
// reports whether probe windows were chosen now. Called from probeTick,
// without a.mu, while no GPU tracing holds the probes.
func (a *Agent) autoDecide(now time.Time) bool {
	w := a.pw
	au := w.auto
	dt := now.Sub(au.last)
	if dt < autoEvery {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	au.last = now
	for pid, p := range a.procs {
		calls := p.calls
		ran := p.lastCycleEnd != 0 && p.lastCycleEnd != au.cycled[pid]
		prev, seen := au.calls[pid]
		au.calls[pid], au.cycled[pid] = calls, p.lastCycleEnd
		if !seen || !ran || p.exited {
			continue
		}
		rate := float64(calls-prev) / dt.Seconds()
		cost := rate * ProbeCallCost.Seconds()
		if cost > au.worst.ProbeCost {
			au.worst = model.AutoProbeProcess{PID: pid, CallsPerSec: rate, ProbeCost: cost}
		}
	}
	if au.worst.ProbeCost <= au.budget {
		return false
	}
	period := time.Duration(float64(w.on) * au.worst.ProbeCost / au.budget).Round(100 * time.Millisecond)
	period = min(max(period, 2*w.on, autoProbeMinPeriod), time.Hour)
	w.period = period
	au.decided = true
	au.why = fmt.Sprintf("pid %d makes %.0f hooked calls/s: with the probes always in place about %.1f %% of its time, over the %.1f %% budget",
		au.worst.PID, au.worst.CallsPerSec, 100*au.worst.ProbeCost, 100*au.budget)
	a.log.Info("launch probes now only in windows", "on", w.on, "period", period, "why", au.why)
	return true
}

// autoReport says what auto chose (nil without Options.AutoProbes).
func (a *Agent) autoReport() *model.AutoProbes {
	if a.pw == nil || a.pw.auto == nil {
		return nil
	}
	au := a.pw.auto
	r := &model.AutoProbes{Budget: au.budget, InWindows: au.decided, Worst: au.worst}
	if au.decided {
		r.Window = fmt.Sprintf("%v/%v", a.pw.on, a.pw.period)
		r.Why = au.why
	} else {
		r.Why = fmt.Sprintf("no process's hooked calls would cost it more than %.1f %% with the probes in place", 100*au.budget)
		if au.worst.PID != 0 {
			r.Why += fmt.Sprintf(" (the most: pid %d, %.0f calls/s, about %.2f %%)", au.worst.PID, au.worst.CallsPerSec, 100*au.worst.ProbeCost)
		}
	}
	return r
}
