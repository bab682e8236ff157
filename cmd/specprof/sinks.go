package main

import (
	"github.com/spf13/pflag"

	"github.com/specprof/specprof/model"
)

// sink is one output of a session beyond the terminal table and the JSON
// report: OTLP traces, pprof profiles, the Perfetto timeline, Prometheus.
// Each lives in its own file and registers a sinkKind in init.
type sink interface {
	// cycle receives every closed cycle (under the session lock; it must
	// not block: queue and return).
	cycle(c *model.CycleTrace)
	// sample receives every CPU sample (same rules).
	sample(s *model.CPUSample)
	// finish writes or flushes what the sink holds, once the session has
	// ended; r is the final report and dir the session's directory, where
	// files are created with dir.create. It returns the files it wrote,
	// for the closing lines.
	finish(r *model.Report, dir *outDir) ([]string, error)
}

// sinkKind is a kind of sink: its flags and its constructor, which returns
// nil when the flags leave it off.
type sinkKind struct {
	name  string
	flags func(fl *pflag.FlagSet)
	make  func(s *runSession) (sink, error)
}

var sinkKinds []sinkKind

func registerSink(k sinkKind) { sinkKinds = append(sinkKinds, k) }

// sinkStarter is a sink with work to start once the session's agent exists
// (the metrics server reads the agent's report); newSession calls start
// after every sink is made and the agent created.
type sinkStarter interface {
	start(s *runSession) error
}

// exportAccounter is a sink that can lose what it exports (the OTLP queue
// and endpoint, the Perfetto event cap): once finish has returned, its
// account goes into the report (agent.Report.Exports).
type exportAccounter interface {
	exportStats() *model.ExportStats
}
