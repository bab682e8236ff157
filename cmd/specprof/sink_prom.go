package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/export/prom"
)

// Prometheus metrics (export/prom) served at /metrics on --metrics-addr
// while the session runs.

var promFlags struct {
	addr string
}

func init() {
	registerSink(sinkKind{
		name: "metrics",
		flags: func(fl *pflag.FlagSet) {
			fl.StringVar(&promFlags.addr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics while profiling (e.g. :9464, default off)")
		},
		make: func(s *session) (sink, error) {
			if promFlags.addr == "" {
				return nil, nil
			}
			return &promSink{}, nil
		},
	})
}

// dropReporter is a sink that can lose data on its way out (the OTLP
// queue, the Perfetto event cap, the pprof stack cap): the metrics sink
// serves its count as specprof_export_dropped_total{exporter=NAME}.
// dropped must be safe to call while the sink runs.
type dropReporter interface {
	dropped() (exporter string, n uint64)
}

// promSink records cycles and samples into the metrics; its server starts
// once the agent exists (the loss counters come from its report).
type promSink struct {
	m   *prom.Metrics
	srv *prom.Server
}

// start implements sinkStarter.
func (p *promSink) start(s *session) error {
	p.m = prom.New(prom.Options{Report: s.ag.Report})
	for _, sk := range s.sinks {
		if d, ok := sk.(dropReporter); ok {
			name, _ := d.dropped()
			p.m.AddDropSource(name, func() uint64 { _, n := d.dropped(); return n })
		}
	}
	srv, err := p.m.Listen(promFlags.addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	p.srv = srv
	s.log.Info("serving metrics", "url", srv.URL())
	return nil
}

func (p *promSink) cycle(c *agent.CycleTrace) {
	if p.m != nil {
		p.m.ObserveCycle(c)
	}
}

func (p *promSink) sample(c *agent.CPUSample) {
	if p.m != nil {
		p.m.ObserveSample(c)
	}
}

// finish stops the server, letting a scrape in progress finish.
func (p *promSink) finish(*agent.Report, *outDir) ([]string, error) {
	if p.srv == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return nil, p.srv.Shutdown(ctx)
}
