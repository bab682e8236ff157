package session

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/specprof/specprof/bpf"
)

// Mode names how much tracing costs, and what it records.
type Mode string

// The tracing modes (Config.Mode).
const (
	// ModeAuto chooses, per process, from what the agent sees: GPU records
	// from a few windows of decode cycles (then CUPTI detached), and the
	// launch probes always in place, or only in windows when the process's
	// launch rate would make them cost more than Config.MaxOverhead.
	ModeAuto Mode = "auto"
	// ModeCPU records no GPU work: the launch probes, the Python phases
	// and the CPU sampler only.
	ModeCPU Mode = "cpu"
	// ModeSampled records the GPU work of the cycles inside windows of
	// Config.Window, opened while decode cycles run, for the whole session.
	ModeSampled Mode = "sampled"
	// ModeSnapshot records the GPU work of Config.Windows windows of decode
	// cycles, then detaches CUPTI: later cycles get CPU figures only.
	ModeSnapshot Mode = "snapshot"
	// ModeFull records every kernel of every cycle.
	ModeFull Mode = "full"
	// ModeCustom is the mode of a session set up with the developer knobs
	// (Config.Dev) instead of a mode.
	ModeCustom Mode = "custom"
)

// Modes lists the modes a user may choose, in the order --help shows them.
var Modes = []Mode{ModeAuto, ModeCPU, ModeSampled, ModeSnapshot, ModeFull}

// Config is every setting of a profiling session. Defaults gives the
// defaults; LoadFile, FromEnv and the command line's flags override them in
// that order; Validate checks the result, and Plan turns it into the
// mechanisms that carry it out.
type Config struct {
	// Preset names an embedded phase preset ("": DefaultPreset); Rules,
	// when set, is a rules file used instead (it may extend a preset
	// itself).
	Preset string `yaml:"preset"`
	Rules  string `yaml:"rules"`
	// Interval prints the phase table every this many cycles of a thread
	// (0: only the final report).
	Interval int `yaml:"interval"`
	// OutDir is the output directory ("": ./specprof-out/<timestamp>);
	// Force lets it be non-empty and replaces files of the same names.
	OutDir string `yaml:"output"`
	Force  bool   `yaml:"force"`
	// Events, when set, is a file for every attributed call as JSON lines.
	Events string `yaml:"events"`
	// Quiet prints no periodic tables or status lines; Verbose logs debug
	// messages; Wide shows every table column.
	Quiet   bool `yaml:"quiet"`
	Verbose bool `yaml:"verbose"`
	Wide    bool `yaml:"wide"`

	// Mode chooses the tracing cost (ModeAuto by default).
	Mode Mode `yaml:"mode"`
	// MaxOverhead is ModeAuto's budget: the share of the target's
	// throughput the probes may cost (0.02 is 2 %).
	MaxOverhead float64 `yaml:"max_overhead"`
	// Window is the GPU tracing window of ModeSampled and ModeSnapshot,
	// ON/PERIOD ("" for the mode's default).
	Window string `yaml:"window"`
	// Windows is how many GPU windows ModeSnapshot and ModeAuto trace
	// (0 for the default).
	Windows int `yaml:"windows"`
	// GPURecords says how CUDA graph replays are recorded: "node" (every
	// kernel) or "graph" (one record per replay; not with windows).
	GPURecords string `yaml:"gpu_records"`
	// CUPTILib is the injection library ("": next to the executable).
	CUPTILib string `yaml:"cupti_lib"`

	// CPUHz samples the target's threads this often (0: off).
	CPUHz int `yaml:"cpu_hz"`
	// CollectiveRanks is the ranks per NCCL communicator for bus bandwidth
	// (0: the number of traced processes making collectives).
	CollectiveRanks int `yaml:"collective_ranks"`
	// SpecMetrics is the source of accept length and tok/s: "log", a
	// Prometheus URL, or "off".
	SpecMetrics string `yaml:"spec_metrics"`
	// CallTree records the stacks of unattributed launches (calltree.json).
	CallTree bool `yaml:"calltree"`

	// Dev holds the mechanisms the modes are made of, for tests,
	// benchmarks and diagnostics: not for users.
	Dev DevConfig `yaml:"dev"`
}

// DevConfig are the developer knobs, all in one place. Setting any of the
// CUPTI or probe knobs makes the session's mode ModeCustom; they cannot be
// combined with Config.Mode.
type DevConfig struct {
	// CUPTI: "auto" (GPU records when the library is found), "on", "off".
	CUPTI string `yaml:"cupti"`
	// Duty traces GPU work in windows of ON/PERIOD; DutyStart says when
	// they open ("now" or "cycles"); Windows caps them (0: no cap); Detach
	// detaches CUPTI after the last.
	Duty      string `yaml:"cupti_duty"`
	DutyStart string `yaml:"cupti_duty_start"`
	Windows   int    `yaml:"cupti_windows"`
	Detach    bool   `yaml:"cupti_detach"`
	// ProbeDuty puts the launch probes in place only in windows of
	// ON/PERIOD.
	ProbeDuty string `yaml:"probe_duty"`

	// GateTimeout is how long the gate watchdog lets a process stay
	// stopped at a library open while specprof lives
	// (SPECPROF_GATE_TIMEOUT); GateHold holds every gated process this much
	// longer (SPECPROF_TEST_GATE_HOLD, fault-injection tests).
	GateTimeout time.Duration `yaml:"gate_timeout"`
	GateHold    time.Duration `yaml:"gate_hold"`
	// NoQuietFlush stops the agent asking quiet processes' libraries to
	// flush (SPECPROF_QUIET_FLUSH=off).
	NoQuietFlush bool `yaml:"no_quiet_flush"`
	// NoUprobeMulti attaches perf-event uprobes instead of uprobe_multi
	// links (SPECPROF_UPROBE_MULTI=0).
	NoUprobeMulti bool `yaml:"no_uprobe_multi"`
	// BPFStats logs the kernel's run-time statistics of the probes'
	// programs at the end (SPECPROF_BPF_STATS=1).
	BPFStats bool `yaml:"bpf_stats"`
}

// DefaultPreset is the preset of a Config that names none.
const DefaultPreset = "sglang-eagle"

// MaxCPUHz bounds Config.CPUHz: far above the kernel's perf sample-rate
// limit (which it lowers by itself under load) samples are throttled away
// unseen.
const MaxCPUHz = 4999

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		Interval:    100,
		Mode:        ModeAuto,
		MaxOverhead: 0.02,
		GPURecords:  "node",
		CPUHz:       bpf.DefaultSampleHz,
		SpecMetrics: "log",
		CallTree:    true,
		Dev:         DevConfig{CUPTI: "auto", DutyStart: "now", GateTimeout: 2 * time.Second},
	}
}

// LoadFile reads a YAML configuration file over c: the keys it names
// replace c's values, the others stay.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	if len(b) > 64<<10 {
		return fmt.Errorf("config file %s: larger than 64 KiB: a session's settings are a few lines", path)
	}
	if err := yaml.Load(b, c, yaml.WithKnownFields()); err != nil {
		return fmt.Errorf("config file %s: %w (the keys are those of session.Config: mode, window, windows, …)", path, err)
	}
	return nil
}

// FromEnv applies the SPECPROF_* developer variables, read through lookup
// (os.LookupEnv in the command; the libraries read none).
func (c *Config) FromEnv(lookup func(string) (string, bool)) error {
	for _, v := range []struct {
		name string
		dst  *time.Duration
		min  time.Duration
	}{{"SPECPROF_GATE_TIMEOUT", &c.Dev.GateTimeout, time.Nanosecond}, {"SPECPROF_TEST_GATE_HOLD", &c.Dev.GateHold, 0}} {
		s, ok := lookup(v.name)
		if !ok || s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < v.min {
			return fmt.Errorf("%s=%q: want a positive duration such as 2s", v.name, s)
		}
		*v.dst = d
	}
	for _, v := range []struct {
		name, on string
		dst      *bool
	}{{"SPECPROF_QUIET_FLUSH", "off", &c.Dev.NoQuietFlush}, {"SPECPROF_UPROBE_MULTI", "0", &c.Dev.NoUprobeMulti}, {"SPECPROF_BPF_STATS", "1", &c.Dev.BPFStats}} {
		if s, ok := lookup(v.name); ok && s != "" {
			*v.dst = s == v.on
		}
	}
	return nil
}

// custom reports whether a developer knob of the tracing mechanisms is set.
func (d *DevConfig) custom() bool {
	return d.CUPTI != "auto" || d.Duty != "" || d.DutyStart != "now" || d.Windows != 0 || d.Detach || d.ProbeDuty != ""
}

// Validate checks the configuration as a whole and names the bad setting
// and what to do. It does not touch the file system.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Rules != "" && c.Preset != "" {
		bad("--rules %s with --preset %s: a rules file replaces the preset (it may name one with `extends:`); give one of them", c.Rules, c.Preset)
	}
	if c.Interval < 0 {
		bad("--interval %d: must be 0 (only the final report) or more", c.Interval)
	}
	if c.CPUHz < 0 || c.CPUHz > MaxCPUHz {
		bad("--cpu-hz %d: must be 0 (off) to %d; %d is the default", c.CPUHz, MaxCPUHz, bpf.DefaultSampleHz)
	}
	if c.CollectiveRanks < 0 {
		bad("--collective-ranks %d: must be 0 (count the traced processes) or more", c.CollectiveRanks)
	}
	if c.GPURecords != "node" && c.GPURecords != "graph" {
		bad("--gpu-records %q: want 'node' (every kernel of a graph replay) or 'graph' (one record per replay)", c.GPURecords)
	}
	if c.MaxOverhead <= 0 || c.MaxOverhead >= 1 {
		bad("--max-overhead %g: want a share of the throughput above 0 and below 1 (0.02 is 2 %%)", c.MaxOverhead)
	}
	if c.Windows < 0 {
		bad("--windows %d: want a number of GPU windows, 1 or more", c.Windows)
	}
	if c.Window != "" {
		if _, _, err := ParseWindow(c.Window); err != nil {
			bad("--window %w", err)
		}
	}
	known := false
	for _, m := range Modes {
		known = known || c.Mode == m
	}
	switch {
	case !known:
		bad("--mode %q: want one of %s", c.Mode, modeList())
	case c.Dev.custom() && c.Mode != ModeAuto:
		bad("--mode %s with the developer tracing knobs (--cupti, --cupti-duty, --probe-duty, …): give one or the other", c.Mode)
	case c.Dev.custom():
		// No mode: the knobs' own rules apply (DevConfig.validate).
	case c.Mode == ModeCPU && (c.Window != "" || c.Windows != 0 || c.GPURecords != "node"):
		bad("--mode cpu records no GPU work: --window, --windows and --gpu-records do nothing with it")
	case c.Mode == ModeFull && (c.Window != "" || c.Windows != 0):
		bad("--mode full records every kernel: --window and --windows do nothing with it (use --mode sampled or snapshot)")
	case c.Mode == ModeSampled && c.Windows != 0:
		bad("--mode sampled traces windows for the whole session: --windows caps them in --mode snapshot")
	case (c.Mode == ModeSampled || c.Mode == ModeSnapshot || c.Mode == ModeAuto) && c.GPURecords == "graph":
		// Switching CUPTI's graph-level tracing on and off crashed the next
		// CUDA graph launch on the H200.
		bad("--gpu-records graph with --mode %s: graph-level records cannot be switched on and off (it crashes CUDA graph launches); use --mode full", c.Mode)
	}
	if c.Dev.custom() {
		errs = append(errs, c.Dev.validate(c.GPURecords))
	}
	return errors.Join(errs...)
}

func modeList() string {
	s := make([]string, len(Modes))
	for i, m := range Modes {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// validate checks the developer knobs' combinations.
func (d *DevConfig) validate(gpuRecords string) error {
	switch d.CUPTI {
	case "auto", "on", "off":
	default:
		return fmt.Errorf("--cupti %q: want auto, on or off", d.CUPTI)
	}
	if d.Duty != "" {
		if _, _, err := ParseWindow(d.Duty); err != nil {
			return fmt.Errorf("--cupti-duty %w", err)
		}
	}
	switch {
	case d.DutyStart != "now" && d.DutyStart != "cycles":
		return fmt.Errorf("--cupti-duty-start %q: want 'now' (windows from the start) or 'cycles' (each window once decode cycles run)", d.DutyStart)
	case d.DutyStart == "cycles" && d.Duty == "":
		return fmt.Errorf("--cupti-duty-start cycles: it says when duty windows open; give --cupti-duty ON/PERIOD too")
	case d.Windows < 0 || d.Windows > 0 && d.Duty == "":
		return fmt.Errorf("--cupti-windows %d: give a number of windows >= 1 together with --cupti-duty ON/PERIOD", d.Windows)
	case d.Detach && d.Windows == 0:
		return fmt.Errorf("--cupti-detach: the detach is final, so it comes after the last window: give --cupti-duty ON/PERIOD and --cupti-windows N")
	case gpuRecords == "graph" && d.Duty != "":
		return fmt.Errorf("--cupti-graphs graph with --cupti-duty: not supported, graph-level records cannot be switched on and off (it crashes CUDA graph launches); use one or the other")
	}
	if d.ProbeDuty != "" {
		if _, _, err := ParseProbeWindow(d.ProbeDuty); err != nil {
			return err
		}
		if (d.CUPTI == "on" || d.Duty != "") && (d.Duty == "" || d.Windows <= 0) {
			// A launch made between windows would have CUPTI records and no probe event to join them to.
			return fmt.Errorf("--probe-duty with GPU records needs them to end: GPU records are joined to every launch's probe event, so the probes stay in place while CUPTI traces; give --cupti-duty ON/PERIOD --cupti-windows N (and --cupti-detach), or use --cupti off")
		}
	}
	return nil
}

// ParseWindow reads a GPU window, ON/PERIOD durations in whole
// milliseconds with 1ms <= ON <= PERIOD <= 1h.
func ParseWindow(v string) (on, period time.Duration, err error) {
	on, period, ok := splitWindow(v)
	if !ok || on < time.Millisecond || period < on || period > time.Hour {
		return 0, 0, fmt.Errorf("%q: want ON/PERIOD durations with 1ms <= ON <= PERIOD <= 1h, e.g. 200ms/2s", v)
	}
	return on, period, nil
}

// ParseProbeWindow reads a probe window, ON/PERIOD with
// 50ms <= ON < PERIOD <= 1h.
func ParseProbeWindow(v string) (on, period time.Duration, err error) {
	on, period, ok := splitWindow(v)
	if !ok || on < 50*time.Millisecond || period <= on || period > time.Hour {
		return 0, 0, fmt.Errorf("--probe-duty %q: want ON/PERIOD durations with 50ms <= ON < PERIOD <= 1h, e.g. 500ms/10s", v)
	}
	return on, period, nil
}

func splitWindow(v string) (on, period time.Duration, ok bool) {
	a, b, found := strings.Cut(v, "/")
	if !found {
		return 0, 0, false
	}
	on, err1 := time.ParseDuration(a)
	period, err2 := time.ParseDuration(b)
	if err1 != nil || err2 != nil || on%time.Millisecond != 0 || period%time.Millisecond != 0 {
		return 0, 0, false
	}
	return on, period, true
}

// Plan is what a validated Config makes the session do: the tracing
// mechanisms of its mode.
type Plan struct {
	Mode Mode
	// CUPTI: "auto", "on" or "off" (see DevConfig.CUPTI).
	CUPTI string
	// The GPU windows (DutyOn == 0: none), when they open, how many, and
	// whether CUPTI detaches after them.
	DutyOn, DutyPeriod time.Duration
	DutyStart          string
	Windows            int
	Detach             bool
	// GraphRecords: one record per CUDA graph replay.
	GraphRecords bool
	// Fixed probe windows (ProbeOn == 0: none).
	ProbeOn, ProbePeriod time.Duration
	// AutoProbes: the agent puts the probes in windows for processes whose
	// launch rate would make them cost more than MaxOverhead.
	AutoProbes  bool
	MaxOverhead float64
}

// The GPU windows of the modes: a tenth of the time in sampled mode; in
// snapshot and auto mode three windows of decode cycles, long enough to
// hold many short cycles and a few of HF's 25 ms ones.
const (
	sampledWindow  = "100ms/1s"
	snapshotWindow = "500ms/2s"
	snapshotCount  = 3
)

// Plan returns the mechanisms of the configuration's mode. c must have
// passed Validate.
func (c *Config) Plan() Plan {
	p := Plan{Mode: c.Mode, CUPTI: "auto", DutyStart: "now", GraphRecords: c.GPURecords == "graph", MaxOverhead: c.MaxOverhead}
	window := func(def string) {
		w := c.Window
		if w == "" {
			w = def
		}
		p.DutyOn, p.DutyPeriod, _ = ParseWindow(w)
		p.DutyStart = "cycles"
	}
	switch {
	case c.Dev.custom():
		d := c.Dev
		p.Mode, p.CUPTI, p.DutyStart, p.Windows, p.Detach = ModeCustom, d.CUPTI, d.DutyStart, d.Windows, d.Detach
		if d.Duty != "" {
			p.DutyOn, p.DutyPeriod, _ = ParseWindow(d.Duty)
		}
		if d.ProbeDuty != "" {
			p.ProbeOn, p.ProbePeriod, _ = ParseProbeWindow(d.ProbeDuty)
		}
	case c.Mode == ModeCPU:
		p.CUPTI = "off"
	case c.Mode == ModeFull:
		p.CUPTI = "on"
	case c.Mode == ModeSampled:
		window(sampledWindow)
	case c.Mode == ModeSnapshot, c.Mode == ModeAuto:
		window(snapshotWindow)
		p.Windows, p.Detach = c.Windows, true
		if p.Windows == 0 {
			p.Windows = snapshotCount
		}
		p.AutoProbes = c.Mode == ModeAuto
	}
	return p
}

// Describe says in one line what the plan records and what it costs.
func (p Plan) Describe() string {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }
	switch p.Mode {
	case ModeCPU:
		return "cpu: launch probes, Python phases and CPU samples; no GPU records"
	case ModeFull:
		return "full: every kernel of every cycle"
	case ModeSampled:
		return fmt.Sprintf("sampled: GPU records of the cycles inside %s windows every %s, opened while decode cycles run", ms(p.DutyOn), ms(p.DutyPeriod))
	case ModeSnapshot:
		return fmt.Sprintf("snapshot: GPU records of %d windows of %s of decode cycles, then CUPTI detached; the launch probes stay", p.Windows, ms(p.DutyOn))
	case ModeAuto:
		return fmt.Sprintf("auto: GPU records of %d windows of %s of decode cycles, then CUPTI detached; the launch probes in windows for a process whose launch rate would make them cost more than %.1f %%", p.Windows, ms(p.DutyOn), 100*p.MaxOverhead)
	}
	return "custom: set up with the developer knobs"
}
