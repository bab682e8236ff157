package model

// MaxTopFrames is how many frames Attribution lists, by launches and by GPU
// time.
const MaxTopFrames = 20

// Attribution accounts for the launches of one process and their GPU
// kernel time: how much the phase rules attributed (a named phase, inside
// a cycle) and how much they did not.
type Attribution struct {
	// Launches counts kernel and graph launches.
	Launches int64 `json:"launches"`
	// OtherLaunches matched no rule (phase "other"), inside cycles or not.
	OtherLaunches int64 `json:"launches_phase_other"`
	// OutsideLaunches were made outside every cycle, in any phase.
	OutsideLaunches int64 `json:"launches_outside_cycles"`
	// UnattributedLaunches were in phase "other" or outside every cycle
	// (or both).
	UnattributedLaunches int64 `json:"launches_unattributed"`
	// LaunchesWithoutGPU were made before the process's CUPTI library
	// connection was known (or with GPU records off): their kernel time is
	// in none of the GPU figures.
	LaunchesWithoutGPU int64 `json:"launches_without_gpu_records,omitempty"`
	// GPU says whether GPU time is known (the process's CUPTI library
	// connected); the GPU fields are zero otherwise.
	GPU bool `json:"gpu"`
	// GPUNs is the kernel time of the CUPTI records joined to the
	// launches: kernel durations summed (whole graph executions with
	// --cupti-graphs graph). Copies are not counted.
	GPUNs int64 `json:"gpu_kernel_ns"`
	// OtherGPUNs, OutsideGPUNs and UnattributedGPUNs split it as the
	// launch counts are split.
	OtherGPUNs        int64 `json:"gpu_kernel_ns_phase_other"`
	OutsideGPUNs      int64 `json:"gpu_kernel_ns_outside_cycles"`
	UnattributedGPUNs int64 `json:"gpu_kernel_ns_unattributed"`
	// UnknownFrameGPUNs is unattributed kernel time whose launch's frame
	// was no longer remembered when its records came (more than 131072
	// unattributed launches of the process in between): in
	// UnattributedGPUNs, in no frame of TopByGPU.
	UnknownFrameGPUNs int64 `json:"gpu_kernel_ns_frame_unknown,omitempty"`
	// TopByLaunches and TopByGPU list the innermost Python frames (the
	// function, its file and the line of the call) that made the most
	// unattributed launches, and the most unattributed kernel time, at
	// most MaxTopFrames each.
	TopByLaunches []*FrameStats `json:"top_frames_by_launches,omitempty"`
	TopByGPU      []*FrameStats `json:"top_frames_by_gpu_time,omitempty"`
}

// FrameStats counts the unattributed launches made from one innermost
// Python frame, and their GPU kernel time.
type FrameStats struct {
	// Frame is the innermost Python frame of the launches: co_qualname
	// (co_name on 3.10), co_filename and the line of the call. Empty when
	// unknown; "(more frames)" past the agent's bound on distinct frames.
	Frame    Frame `json:"frame"`
	Launches int64 `json:"launches"`
	// Other and OutsideCycles split Launches (a launch may be both).
	Other         int64 `json:"launches_phase_other"`
	OutsideCycles int64 `json:"launches_outside_cycles"`
	GPUNs         int64 `json:"gpu_kernel_ns"`
}
