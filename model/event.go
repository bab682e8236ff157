package model

// Event is one attributed call, as handed to Options.OnEvent.
type Event struct {
	PID, TID int
	Ktime    uint64
	Kind     string // launch, sync, sync_exit, copy (device-side copy or set), coll, capture, mark
	API      string
	Phase    string
	Cycle    int // 1-based cycle number of the thread, 0 outside cycles
	// CycleTID, when not 0, is the thread whose cycle Cycle is: a late wait
	// (phase.Cycle.LatePhases) on one thread for another thread's cycle.
	CycleTID int
	Stream   uint64
	Handle   uint64
	Bytes    int64 // collectives and copies
	WaitNs   int64 // sync: time blocked (set on the return)
	Site     string
}

// Status is a cheap summary of a running session, for a live status line.
type Status struct {
	Processes int    // processes with CUDA libraries traced
	Cycles    int    // cycles folded into the figures, all threads
	OpenCycle bool   // some thread is inside a cycle now
	Calls     int64  // hooked calls attributed
	Lost      uint64 // records lost to a full ring buffer or scratch space
}
