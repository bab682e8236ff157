package model

// SamplerStats counts the CPU sampler's samples over the session.
type SamplerStats struct {
	Samples int64 `json:"samples"`
	CPUNs   int64 `json:"cpu_ns"` // CPU time they stand for
	Python  int64 `json:"in_python"`
	Kernel  int64 `json:"in_kernel"` // taken in a system call or fault (the native leaf is the call site)
	// Samples without a Python stack: threads without Python state (native
	// threads), processes whose interpreter is not known (yet), and walks
	// that failed or were cut short.
	NoThreadState int64 `json:"no_thread_state"`
	NoPython      int64 `json:"no_python"`
	ReadErrors    int64 `json:"frame_read_errors"`
	Truncated     int64 `json:"stacks_truncated"`
}
