package model

// DutyStats describes duty-cycled GPU tracing of one process.
type DutyStats struct {
	Windows  int64   `json:"windows"`   // tracing windows, the one still open included
	WindowNs uint64  `json:"window_ns"` // their total length (the open one's up to the last word that it was open)
	Share    float64 `json:"share"`     // of the time from the first window's open to the last close or word
	// StillOpen: the last window had not closed when its records ended (the
	// process exited in it, or stopped making the synchronising calls at
	// which the library closes windows).
	StillOpen bool `json:"still_open,omitempty"`
}

// ProbeWindowStats describes probe windows in the report.
type ProbeWindowStats struct {
	OnNs     int64 `json:"on_ns"`
	PeriodNs int64 `json:"period_ns"`
	Windows  int   `json:"windows"`
	// ProbedNs is the time the probes were in place; Share its part of
	// the session.
	ProbedNs int64   `json:"probed_ns"`
	Share    float64 `json:"share"`
	// Mean time to attach, mean and longest time to remove a window's
	// probes: a window really lasts ON plus the removal.
	AttachMeanNs int64 `json:"attach_mean_ns"`
	DetachMeanNs int64 `json:"detach_mean_ns"`
	DetachMaxNs  int64 `json:"detach_max_ns"`
	// UprobeMulti: the probes were uprobe_multi links (removed in tens of
	// milliseconds) rather than perf-event uprobes (about 0.1 s each).
	UprobeMulti bool `json:"uprobe_multi"`
	// SyncExitsCut counts returns of blocking calls that began before
	// their window opened or while its probes were being removed (no
	// entry to match; not a loss).
	SyncExitsCut int64 `json:"sync_exits_cut"`
	// GPUHeldNs is the time GPU records could come (a CUPTI library was
	// awaited or traced), during which the probes stayed in place whatever
	// the schedule (Options.ProbeGPUWindows).
	GPUHeldNs int64 `json:"gpu_held_ns,omitempty"`
}
