package main

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"

	"github.com/specprof/specprof/agent"
)

// eventWriter writes attributed calls as JSON lines (--events).
type eventWriter struct {
	mu  sync.Mutex // calls come from the agent loop and from CUPTI connections
	w   *bufio.Writer
	enc *json.Encoder
}

type eventLine struct {
	PID   int    `json:"pid"`
	TID   int    `json:"tid"`
	Ktime uint64 `json:"ktime"`
	Kind  string `json:"kind"`
	API   string `json:"api"`
	Phase string `json:"phase"`
	Cycle int    `json:"cycle"`
	// CycleTID is the thread whose cycle Cycle is, when not the caller's.
	CycleTID int    `json:"cycle_tid,omitempty"`
	Stream   uint64 `json:"stream,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	WaitNs   int64  `json:"wait_ns,omitempty"`
	Site     string `json:"site,omitempty"`
}

func newEventWriter(w io.Writer) *eventWriter {
	bw := bufio.NewWriterSize(w, 1<<20)
	return &eventWriter{w: bw, enc: json.NewEncoder(bw)}
}

func (e *eventWriter) write(ev *agent.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(eventLine{PID: ev.PID, TID: ev.TID, Ktime: ev.Ktime, Kind: ev.Kind, API: ev.API, Phase: ev.Phase,
		Cycle: ev.Cycle, CycleTID: ev.CycleTID, Stream: ev.Stream, Bytes: ev.Bytes, WaitNs: ev.WaitNs, Site: ev.Site})
}

// kernelLine is a GPU kernel record from CUPTI (kind "kernel").
type kernelLine struct {
	PID    int    `json:"pid"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Stream uint32 `json:"stream"`
	Device uint32 `json:"device"`
	Corr   uint32 `json:"corr"`
	Graph  uint32 `json:"graph_id,omitempty"`
	Node   uint64 `json:"node_id,omitempty"`
}

func (e *eventWriter) kernel(k *agent.KernelRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(kernelLine{PID: k.PID, Kind: "kernel", Name: k.Name, Start: k.Start, End: k.End, Stream: k.Stream,
		Device: k.Device, Corr: k.CorrelationID, Graph: k.GraphID, Node: k.GraphNodeID})
}

// apiLine is a driver-API record from CUPTI (kind "gpu_api").
type apiLine struct {
	PID   int    `json:"pid"`
	TID   int    `json:"tid"`
	Kind  string `json:"kind"`
	Cbid  uint32 `json:"cbid"`
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
	Corr  uint32 `json:"corr"`
}

func (e *eventWriter) api(a *agent.APIRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(apiLine{PID: a.PID, TID: a.TID, Kind: "gpu_api", Cbid: a.Cbid, Start: a.Start, End: a.End, Corr: a.CorrelationID})
}

func (e *eventWriter) flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.w.Flush()
}
