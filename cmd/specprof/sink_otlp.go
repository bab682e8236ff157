package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/specprof/specprof/agent"
	"github.com/specprof/specprof/export/otlp"
)

// OpenTelemetry traces over OTLP (export/otlp): one trace per cycle per
// thread, streamed while the session runs.

var otlpFlags struct {
	on          bool
	endpoint    string
	protocol    string
	insecure    bool
	headers     []string
	serviceName string
	kernels     bool
	queue       int
}

// otlpFlushTimeout bounds the final flush: a dead collector must not hold up
// the exit (what is left is counted as unsent).
const otlpFlushTimeout = 5 * time.Second

func init() {
	registerSink(sinkKind{
		name: "OTLP",
		flags: func(fl *pflag.FlagSet) {
			fl.BoolVar(&otlpFlags.on, "otlp", false, "stream one OpenTelemetry trace per cycle over OTLP (endpoint from --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
			fl.StringVar(&otlpFlags.endpoint, "otlp-endpoint", "", "OTLP collector (e.g. Jaeger) as host:port or http(s)://host:port[/path], implying --otlp")
			fl.StringVar(&otlpFlags.protocol, "otlp-protocol", "", "OTLP protocol: grpc or http (default: OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)")
			fl.BoolVar(&otlpFlags.insecure, "otlp-insecure", false, "OTLP without TLS (implied by an http:// endpoint)")
			fl.StringArrayVar(&otlpFlags.headers, "otlp-header", nil, "OTLP request header key=value (repeatable, added to OTEL_EXPORTER_OTLP_HEADERS)")
			fl.StringVar(&otlpFlags.serviceName, "service-name", "", "service.name of the exported traces (default: OTEL_SERVICE_NAME, else specprof)")
			fl.BoolVar(&otlpFlags.kernels, "otlp-kernels", false, "one span per GPU kernel and copy under each phase's gpu span")
			fl.IntVar(&otlpFlags.queue, "otlp-queue", otlp.DefaultQueueCycles, "cycles waiting for OTLP export before new ones are dropped (and counted)")
		},
		make: newOTLPSink,
	})
}

func newOTLPSink(s *session) (sink, error) {
	f := &otlpFlags
	if !f.on && f.endpoint == "" {
		return nil, nil
	}
	if f.queue < 1 {
		return nil, fmt.Errorf("--otlp-queue %d: must be 1 or more", f.queue)
	}
	cfg := otlp.Config{
		Endpoint:    f.endpoint,
		Protocol:    f.protocol,
		Insecure:    f.insecure,
		ServiceName: f.serviceName,
		Kernels:     f.kernels,
		QueueCycles: f.queue,
		Clock:       s.clock,
		Logger:      s.log,
	}
	for _, h := range f.headers {
		k, v, err := otlp.ParseHeader(h)
		if err != nil {
			return nil, fmt.Errorf("--otlp-header: %w", err)
		}
		if cfg.Headers == nil {
			cfg.Headers = map[string]string{}
		}
		cfg.Headers[k] = v
	}
	e, err := otlp.New(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	// The phase's gpu span needs its first kernel start and last kernel end,
	// which the cycle carries only with the individual GPU records.
	s.detail = true
	return &otlpSink{e: e, out: s.out}, nil
}

type otlpSink struct {
	e   *otlp.Exporter
	out io.Writer
}

func (o *otlpSink) cycle(c *agent.CycleTrace) { o.e.Cycle(c) }

func (o *otlpSink) sample(*agent.CPUSample) {}

// dropped implements dropReporter: spans dropped because the queue was full
// and spans in failed exports (Stats is safe to call concurrently).
func (o *otlpSink) dropped() (string, uint64) {
	st := o.e.Stats()
	return "otlp", st.SpansDropped + st.SpansFailed
}

// finish flushes within otlpFlushTimeout and prints the account of every
// span: exported, dropped, failed or unsent, with the first error (which
// covers a flush cut short by the deadline).
func (o *otlpSink) finish(*agent.Report, *outDir) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), otlpFlushTimeout)
	defer cancel()
	err := o.e.Shutdown(ctx)
	fmt.Fprintln(o.out, o.e.Stats())
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	return nil, err
}

// exportStats implements exportAccounter: every span not delivered, by why.
func (o *otlpSink) exportStats() *agent.ExportStats {
	st := o.e.Stats()
	return &agent.ExportStats{Exporter: "otlp", Unit: "spans", Dropped: st.SpansDropped, Failed: st.SpansFailed,
		Unsent: st.Pending(), Detail: st.FirstError, OwnLine: true}
}

var (
	_ dropReporter    = (*otlpSink)(nil)
	_ exportAccounter = (*otlpSink)(nil)
)
