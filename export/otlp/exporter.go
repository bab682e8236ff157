package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/specprof/specprof/model"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Batch span processor tuning. The processor blocks the converting goroutine
// (never Exporter.Cycle) when its queue is full, so the only place spans are
// dropped is Exporter's own cycle queue, where they are counted.
const (
	bspQueueSpans = 16384           // spans waiting for export (a few hundred cycles)
	bspBatchSpans = 2048            // spans per export request (well under gRPC's 4 MiB)
	bspBatchDelay = 1 * time.Second // traces appear in Jaeger within about a second
)

// Exporter converts cycles to spans and exports them. Create it with New;
// call Cycle for every closed cycle, Shutdown once at the end.
type Exporter struct {
	cfg    Config
	target string // protocol and endpoint, for messages
	probe  string // host:port to dial when no export completed
	log    *slog.Logger

	mu     sync.RWMutex // closed vs sends on queue
	closed bool
	queue  chan *model.CycleTrace
	done   chan struct{} // the converting goroutine has returned

	bsp      sdktrace.SpanProcessor
	res      *resources
	tracers  map[int]trace.Tracer // by pid; converting goroutine only
	withGPUs map[int]bool         // pids whose tracer's resource names their GPUs
	ids      *idGenerator
	salt     [16]byte // of the cross-rank cycle trace IDs (ids.go)

	cycles, cyclesDropped    atomic.Uint64
	spans, spansDropped      atomic.Uint64
	exported, failed, errors atomic.Uint64
	firstErr                 atomic.Pointer[string]
}

// Stats are the exporter's counters. Every span of every cycle given to
// Cycle ends up in exactly one of SpansExported, SpansFailed, SpansDropped
// or Pending.
type Stats struct {
	Target        string // protocol and endpoint
	Cycles        uint64 // cycles given to Cycle
	CyclesDropped uint64 // not queued: the queue was full, or after Shutdown
	Spans         uint64 // spans created (from the queued cycles)
	SpansDropped  uint64 // spans the dropped cycles would have made
	SpansExported uint64 // accepted by the endpoint
	SpansFailed   uint64 // in export calls that failed (after retries)
	ExportErrors  uint64 // failed export calls
	FirstError    string // the first failure, "" when none
}

// Pending is the number of created spans neither exported nor failed: still
// queued, or abandoned when Shutdown's deadline passed.
func (s Stats) Pending() uint64 {
	if done := s.SpansExported + s.SpansFailed; s.Spans > done {
		return s.Spans - done
	}
	return 0
}

// Lost is the number of spans that did not reach the endpoint.
func (s Stats) Lost() uint64 { return s.SpansDropped + s.SpansFailed + s.Pending() }

// String is the one-line account printed at the end of a session.
func (s Stats) String() string {
	total := s.Spans + s.SpansDropped
	line := fmt.Sprintf("otlp: %d of %d spans (%d cycles) exported to %s", s.SpansExported, total, s.Cycles, s.Target)
	if s.Lost() == 0 {
		return line
	}
	var parts []string
	if s.SpansDropped > 0 {
		parts = append(parts, fmt.Sprintf("%d dropped with the queue full (%d cycles)", s.SpansDropped, s.CyclesDropped))
	}
	if s.SpansFailed > 0 {
		parts = append(parts, fmt.Sprintf("%d in %d failed exports", s.SpansFailed, s.ExportErrors))
	}
	if p := s.Pending(); p > 0 {
		parts = append(parts, fmt.Sprintf("%d unsent at exit", p))
	}
	line += "; not delivered: " + strings.Join(parts, ", ")
	if s.FirstError != "" {
		line += "; first error: " + s.FirstError
	}
	return line
}

// New creates an exporter to the configured OTLP endpoint. It does not
// connect: an unreachable endpoint shows up as failed exports, counted,
// never as an error here.
//
// It installs a process-wide OpenTelemetry error handler
// (otel.SetErrorHandler) that logs the first SDK error once: the SDK would
// otherwise log every failed batch.
func New(ctx context.Context, cfg Config) (*Exporter, error) {
	proto, err := ParseProtocol(cfg.Protocol)
	if err != nil {
		return nil, err
	}
	cfg.Protocol = proto
	var exp sdktrace.SpanExporter
	var target string
	switch proto {
	case ProtocolGRPC:
		opts, t, err := cfg.grpcOptions()
		if err != nil {
			return nil, err
		}
		target = t
		exp, err = otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("create OTLP gRPC exporter: %w", err)
		}
	case ProtocolHTTP:
		opts, t, err := cfg.httpOptions()
		if err != nil {
			return nil, err
		}
		target = t
		exp, err = otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("create OTLP HTTP exporter: %w", err)
		}
	}
	e, err := newExporter(cfg, exp, target)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	e.probe = cfg.dialAddr()
	return e, nil
}

// newExporter wires an exporter around any span exporter (tests use the
// SDK's in-memory one).
func newExporter(cfg Config, exp sdktrace.SpanExporter, target string) (*Exporter, error) {
	if cfg.QueueCycles <= 0 {
		cfg.QueueCycles = DefaultQueueCycles
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	res, err := newResources(cfg.ServiceName)
	if err != nil {
		return nil, err
	}
	e := &Exporter{
		cfg:      cfg,
		target:   target,
		log:      log,
		queue:    make(chan *model.CycleTrace, cfg.QueueCycles),
		done:     make(chan struct{}),
		res:      res,
		tracers:  map[int]trace.Tracer{},
		withGPUs: map[int]bool{},
		ids:      newIDGenerator(),
	}
	e.ids.read(e.salt[:])
	e.bsp = sdktrace.NewBatchSpanProcessor(&countingExporter{next: exp, e: e},
		sdktrace.WithBlocking(),
		sdktrace.WithMaxQueueSize(bspQueueSpans),
		sdktrace.WithMaxExportBatchSize(bspBatchSpans),
		sdktrace.WithBatchTimeout(bspBatchDelay))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(e.noteError))
	go e.convert()
	return e, nil
}

// Cycle queues one closed cycle for export and returns at once; when the
// queue is full the cycle is dropped and counted. The exporter keeps c: the
// caller must not change it afterwards.
func (e *Exporter) Cycle(c *model.CycleTrace) {
	e.cycles.Add(1)
	e.mu.RLock()
	ok := !e.closed
	if ok {
		select {
		case e.queue <- c:
		default:
			ok = false
		}
	}
	e.mu.RUnlock()
	if !ok {
		e.cyclesDropped.Add(1)
		e.spansDropped.Add(uint64(e.spanCount(c)))
	}
}

// convert is the one goroutine that turns queued cycles into spans.
func (e *Exporter) convert() {
	defer close(e.done)
	for c := range e.queue {
		e.spans.Add(uint64(e.emit(c)))
	}
}

// Shutdown stops accepting cycles, converts the queued ones and exports
// every span, within ctx's deadline; what is left then is counted as
// pending (Stats), with the reason when no export had failed yet (the
// exporter was still retrying). It returns an error only when the deadline
// passed first; export failures are in Stats.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.queue)
	}
	e.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		e.diagnose()
		return fmt.Errorf("flush OTLP spans to %s: %w", e.target, ctx.Err())
	}
	if err := e.bsp.Shutdown(ctx); err != nil {
		e.diagnose()
		return fmt.Errorf("flush OTLP spans to %s: %w", e.target, err)
	}
	return nil
}

// diagnose records why spans are still unsent at the deadline when no export
// has failed yet (the exporter is still retrying): whether the endpoint
// accepts connections at all.
func (e *Exporter) diagnose() {
	if e.firstErr.Load() != nil {
		return
	}
	msg := "no export completed before the deadline (endpoint slow, or not speaking OTLP?)"
	if e.probe != "" {
		c, err := net.DialTimeout("tcp", e.probe, time.Second)
		if err != nil {
			msg = "endpoint unreachable: " + err.Error()
		} else {
			c.Close()
		}
	}
	e.firstErr.CompareAndSwap(nil, &msg)
}

// Stats returns the counters so far (safe at any time, from any goroutine).
func (e *Exporter) Stats() Stats {
	s := Stats{
		Target:        e.target,
		Cycles:        e.cycles.Load(),
		CyclesDropped: e.cyclesDropped.Load(),
		Spans:         e.spans.Load(),
		SpansDropped:  e.spansDropped.Load(),
		SpansExported: e.exported.Load(),
		SpansFailed:   e.failed.Load(),
		ExportErrors:  e.errors.Load(),
	}
	if p := e.firstErr.Load(); p != nil {
		s.FirstError = *p
	}
	return s
}

// noteError keeps the first failure and logs it once; later ones are only
// counted (by the caller).
func (e *Exporter) noteError(err error) {
	msg := err.Error()
	if e.firstErr.CompareAndSwap(nil, &msg) {
		e.log.Warn("OTLP export failed; specprof keeps profiling, later failures are counted, not logged",
			"endpoint", e.target, "err", err)
	}
}

// countingExporter counts what the endpoint accepted and refused.
type countingExporter struct {
	next sdktrace.SpanExporter
	e    *Exporter
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.next.ExportSpans(ctx, spans)
	if err != nil {
		c.e.failed.Add(uint64(len(spans)))
		c.e.errors.Add(1)
		c.e.noteError(err)
		return err
	}
	c.e.exported.Add(uint64(len(spans)))
	return nil
}

func (c *countingExporter) Shutdown(ctx context.Context) error {
	err := c.next.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	if err != nil {
		return fmt.Errorf("shut down exporter: %w", err)
	}
	return nil
}
