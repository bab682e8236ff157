package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// TruthRecord is one line of the simulator's ground-truth file (SPECPROF_SIM_TRUTH). Kind
// selects which fields are meaningful:
//
//   - "api": one driver API call of libcuda.so.1 — Corr, API, Pid, Tid, Enter, Exit, Stream (the
//     stream argument as passed, 0 when none), Result (CUresult), Tag, Parent (the runtime call
//     it was made in, 0 when none).
//   - "rtapi": one call of the stand-in runtime libcudart.so.13 — the fields of "api" but Parent.
//   - "kernel": one kernel execution — Corr and API of the launching call (cuGraphLaunch for graph
//     replays; the runtime call when the launch was made in one), Name, Stream (resolved: 0 = legacy default stream, else the stream's handle; for a
//     per-thread default stream the address of its simulator object), StreamID, Device, Context,
//     Submit (the launch's "now"), Start, End, GraphID/GraphExecID/NodeID (0 outside graphs),
//     Grid, Block, SharedMem, Pid, Tid, Tag, CaptureTag (replays: tag at capture).
//   - "memcpy" / "memset": Corr, API, Bytes, CopyKind ("HtoD", "DtoH"; memcpy), Value (memset),
//     Stream, StreamID, Device, Context, Submit, Start, End, Pid, Tid, Tag.
//   - "graph_node": a kernel node captured into a graph — Corr and API of the capturing launch,
//     GraphID, NodeID, Name, Duration (frozen at capture), Stream, StreamID, Grid, Block,
//     SharedMem, Pid, Tid, Tag.
//   - "coll": one NCCL operation (written by libnccl.so.2 once its kernel is launched) — Op
//     (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Send, Recv), Redop, Count, Dtype,
//     Bytes, Comm, Nranks, Rank, Stream, Peer, Root (-1 when none), Kernel, KernelCorr (the
//     cuLaunchKernelEx call that launched it), KernelDuration, Enter, Grouped, Pid, Tid, Tag.
//
// All times are CLOCK_MONOTONIC nanoseconds.
type TruthRecord struct {
	Kind   string `json:"kind"`
	Corr   uint64 `json:"corr"`
	API    string `json:"api"`
	Pid    uint32 `json:"pid"`
	Tid    uint32 `json:"tid"`
	Tag    string `json:"tag"`
	Enter  uint64 `json:"enter"`
	Exit   uint64 `json:"exit"`
	Stream uint64 `json:"stream"`
	Result int    `json:"result"`
	Parent uint64 `json:"parent"`

	Name        string    `json:"name"`
	StreamID    uint32    `json:"stream_id"`
	Device      int       `json:"device"`
	Context     uint64    `json:"context"`
	Submit      uint64    `json:"submit"`
	Start       uint64    `json:"start"`
	End         uint64    `json:"end"`
	GraphID     uint64    `json:"graph_id"`
	GraphExecID uint64    `json:"graph_exec_id"`
	NodeID      uint32    `json:"node_id"`
	Grid        [3]uint32 `json:"grid"`
	Block       [3]uint32 `json:"block"`
	SharedMem   uint32    `json:"shared_mem"`
	CaptureTag  string    `json:"capture_tag"`
	Duration    uint64    `json:"duration"`

	Bytes    uint64 `json:"bytes"`
	CopyKind string `json:"copy_kind"`
	Value    uint32 `json:"value"`

	Op             string `json:"op"`
	Redop          string `json:"redop"`
	Count          uint64 `json:"count"`
	Dtype          string `json:"dtype"`
	Comm           uint64 `json:"comm"`
	Nranks         int    `json:"nranks"`
	Rank           int    `json:"rank"`
	Peer           int    `json:"peer"`
	Root           int    `json:"root"`
	Kernel         string `json:"kernel"`
	KernelCorr     uint64 `json:"kernel_corr"`
	KernelDuration uint64 `json:"kernel_duration"`
	Grouped        bool   `json:"grouped"`
}

// IsGPUOp reports whether the record is a GPU operation (kernel, memcpy or memset).
func (r *TruthRecord) IsGPUOp() bool {
	return r.Kind == "kernel" || r.Kind == "memcpy" || r.Kind == "memset"
}

// ReadTruth parses a ground-truth file; every line must be one JSON object.
func ReadTruth(path string) ([]TruthRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []TruthRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for line := 1; sc.Scan(); line++ {
		var r TruthRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}
