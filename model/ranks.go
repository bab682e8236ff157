package model

// RankStats is one rank's part in the collectives compared across ranks.
type RankStats struct {
	Rank        int   `json:"rank"`
	PID         int   `json:"pid"`
	Cycles      int   `json:"cycles_compared"`
	Collectives int64 `json:"collectives_compared"`
	// LastArrivals counts the collectives this rank reached last.
	LastArrivals int64 `json:"last_arrivals"`
	// WaitImposedNs sums, over those, how much later it arrived than the
	// first rank: under NCCL, how long the first rank's kernel waited.
	WaitImposedNs int64 `json:"wait_imposed_ns"`
	// StragglerCycles counts the cycles in which this rank was the
	// straggler (CycleTP.Straggler).
	StragglerCycles int `json:"straggler_cycles"`
	// Uncompared counts this rank's cycles with collectives that no other
	// rank matched (handed on without a comparison).
	Uncompared int `json:"cycles_uncompared,omitempty"`
}

// CycleTP compares one cycle across the tensor-parallel ranks: the same
// cycle number on every rank, collectives matched by order.
type CycleTP struct {
	Ranks       int `json:"ranks"`       // ranks compared
	Collectives int `json:"collectives"` // collectives compared
	// Straggler is the rank that arrived last at most of the cycle's
	// collectives (a tie goes to the one that was later in total).
	Straggler int `json:"straggler"`
	// SpreadNs sums, over the collectives, last minus first arrival: how
	// long the earliest rank waited in this cycle.
	SpreadNs int64 `json:"spread_ns"`
	// WaitNs sums, over the collectives, how long this rank waited for the
	// last one to arrive (0 for a rank that was last at every collective).
	WaitNs int64 `json:"wait_ns"`
}

// Arrival compares one collective's arrival across the ranks.
//
// A rank arrives at a collective when its kernel starts on its GPU: an
// early rank's kernel then waits inside for the last one. The CPU call
// (when the kernel is not known on every rank, e.g. outside GPU tracing
// windows) says only when each rank issued the call: NCCL calls do not
// block, so CPUs of ranks can be apart by up to the work queued ahead of
// the GPUs without anyone waiting. Clock says which was compared: every
// rank's figure comes from the same one.
type Arrival struct {
	LastRank int    `json:"last_rank"` // the rank that arrived last
	WaitNs   int64  `json:"wait_ns"`   // how long after this rank the last one arrived
	SpreadNs int64  `json:"spread_ns"` // last minus first arrival
	Clock    string `json:"clock"`     // "gpu": kernel starts; "cpu": call times
}
