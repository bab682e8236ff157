package main

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/specprof/specprof/agent"
)

// eventWriter writes attributed calls as JSON lines (--events).
type eventWriter struct {
	w   *bufio.Writer
	enc *json.Encoder
}

type eventLine struct {
	PID    int    `json:"pid"`
	TID    int    `json:"tid"`
	Ktime  uint64 `json:"ktime"`
	Kind   string `json:"kind"`
	API    string `json:"api"`
	Phase  string `json:"phase"`
	Cycle  int    `json:"cycle"`
	Stream uint64 `json:"stream,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	WaitNs int64  `json:"wait_ns,omitempty"`
	Site   string `json:"site,omitempty"`
}

func newEventWriter(w io.Writer) *eventWriter {
	bw := bufio.NewWriterSize(w, 1<<20)
	return &eventWriter{w: bw, enc: json.NewEncoder(bw)}
}

func (e *eventWriter) write(ev *agent.Event) {
	_ = e.enc.Encode(eventLine{PID: ev.PID, TID: ev.TID, Ktime: ev.Ktime, Kind: ev.Kind, API: ev.API, Phase: ev.Phase,
		Cycle: ev.Cycle, Stream: ev.Stream, Bytes: ev.Bytes, WaitNs: ev.WaitNs, Site: ev.Site})
}

func (e *eventWriter) flush() { _ = e.w.Flush() }
