package otlp

import (
	"context"

	"github.com/specprof/specprof/model"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Span names besides the phases' (which are the phase names, e.g. spec.draft)
// and the collectives' and syncs' (the NCCL operation, the driver call).
const (
	SpanCycle = "cycle"
	SpanGPU   = "gpu"
)

// pointNs is the length of a span that marks an instant (a collective whose
// GPU side is unknown, a sync that did not block or whose return was not
// seen): Jaeger rewrites zero-length spans and flags them with a warning.
const pointNs = 1

// ScopeName is the instrumentation scope of every span.
const ScopeName = "github.com/specprof/specprof/export/otlp"

// tracer returns the tracer of the cycle's process, creating its provider
// (with the process's resource) on first use. Every provider feeds the one
// batch processor.
func (e *Exporter) tracer(c *model.CycleTrace) trace.Tracer {
	// A process's GPUs become known once it has a CUDA context: its
	// resource is built again then, once.
	if t, ok := e.tracers[c.PID]; ok && (len(c.Devices) == 0 || e.withGPUs[c.PID]) {
		return t
	}
	if len(c.Devices) > 0 {
		e.withGPUs[c.PID] = true
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(e.res.forProcess(c)),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(e.ids),
		sdktrace.WithSpanProcessor(sharedProcessor{e.bsp}))
	t := tp.Tracer(ScopeName)
	e.tracers[c.PID] = t
	return t
}

// sharedProcessor lets several providers feed one batch processor, which
// Exporter.Shutdown shuts down itself, once.
type sharedProcessor struct{ sdktrace.SpanProcessor }

func (sharedProcessor) Shutdown(context.Context) error   { return nil }
func (sharedProcessor) ForceFlush(context.Context) error { return nil }

func (e *Exporter) at(mono uint64) trace.SpanStartEventOption {
	return trace.WithTimestamp(e.cfg.Clock.Wall(mono))
}

func (e *Exporter) endAt(s trace.Span, mono uint64) {
	s.End(trace.WithTimestamp(e.cfg.Clock.Wall(mono)))
}

// spanCount is the number of spans emit makes of c.
func (e *Exporter) spanCount(c *model.CycleTrace) int {
	n := 1
	for _, p := range c.Phases {
		n += 1 + len(p.Collectives) + len(p.Syncs)
		if _, _, ok := gpuWindow(p); ok {
			n++
			if e.cfg.Kernels {
				n += len(p.GPU)
			}
		}
	}
	return n
}

// emit turns one cycle into its trace and returns the number of spans.
func (e *Exporter) emit(c *model.CycleTrace) int {
	tr := e.tracer(c)
	var busy, kernels, launches, wait int64
	for _, p := range c.Phases {
		if s := p.Stats; s != nil {
			busy += s.GPUBusyNs
			kernels += s.GPUKernels
			launches += s.Launches
			wait += s.SyncWaitNs
		}
	}
	attrs := []attribute.KeyValue{
		attribute.Int("specprof.cycle", c.Cycle),
		semconv.ThreadID(c.TID),
		attribute.Int64("specprof.cpu_span_ns", int64(c.End-c.Start)),
		attribute.Int64("specprof.launches", launches),
		attribute.Int64("specprof.sync.wait_ns", wait),
		attribute.Bool("specprof.gpu.joined", c.GPU),
		attribute.Int64("specprof.gpu.busy_ns", busy),
		attribute.Int64("specprof.gpu.kernels", kernels),
	}
	if c.Rank >= 0 {
		attrs = append(attrs, AttrTPRank.Int(c.Rank))
	}
	ctx := context.Background()
	if tp := c.TP; tp != nil {
		attrs = append(attrs,
			attribute.Int("specprof.tp.ranks", tp.Ranks),
			attribute.Int("specprof.tp.straggler_rank", tp.Straggler),
			attribute.Bool("specprof.tp.straggler", tp.Straggler == c.Rank),
			attribute.Int64("specprof.tp.wait_ns", tp.WaitNs),
			attribute.Int64("specprof.tp.spread_ns", tp.SpreadNs))
		ctx = withTraceID(ctx, cycleTraceID(e.salt, c.Cycle))
	}
	if len(c.Phases) > 0 {
		attrs = appendCode(attrs, c.Phases[0].Cycle)
	}
	ctx, root := tr.Start(ctx, SpanCycle, trace.WithNewRoot(), e.at(c.Start),
		trace.WithAttributes(attrs...))
	n := 1
	for _, p := range c.Phases {
		n += e.emitPhase(ctx, tr, p)
	}
	e.endAt(root, c.End)
	return n
}

func (e *Exporter) emitPhase(ctx context.Context, tr trace.Tracer, p *model.PhaseTrace) int {
	s := p.Stats
	if s == nil {
		s = &model.PhaseStats{}
	}
	attrs := []attribute.KeyValue{
		attribute.String("specprof.phase", p.Phase),
		attribute.Int64("specprof.cpu_span_ns", int64(p.End-p.Start)),
		attribute.Int64("specprof.launches", s.Launches),
		attribute.Int64("specprof.graph_launches", s.GraphLaunch),
		attribute.Int64("specprof.syncs", s.Syncs),
		attribute.Int64("specprof.sync.wait_ns", s.SyncWaitNs),
		attribute.Int64("specprof.collectives", s.Colls),
		attribute.Int64("specprof.collective.bytes", s.CollBytes),
		attribute.Int64("specprof.gpu.kernels", s.GPUKernels),
		attribute.Int64("specprof.gpu.busy_ns", s.GPUBusyNs),
		attribute.Int64("specprof.gpu.active_ns", s.GPUActiveNs),
		attribute.Int64("specprof.gpu.elapsed_ns", s.GPUElapsedNs),
		attribute.Int64("specprof.gpu.host_gap_ns", s.GPUHostGapNs),
		attribute.Int64("specprof.gpu.span_ns", s.GPUSpanNs),
		attribute.Int64("specprof.gpu.kernel_ns", s.GPUKernelNs),
	}
	if s.GPUMemcpys > 0 {
		attrs = append(attrs,
			attribute.Int64("specprof.gpu.memcpys", s.GPUMemcpys),
			attribute.Int64("specprof.gpu.memcpy_bytes", s.GPUMemcpyBytes),
			attribute.Int64("specprof.gpu.memcpy_ns", s.GPUMemcpyNs))
	}
	attrs = appendCode(attrs, p.Func)
	pctx, ps := tr.Start(ctx, p.Phase, e.at(p.Start), trace.WithAttributes(attrs...))
	n := 1
	if start, end, ok := gpuWindow(p); ok {
		n += e.emitGPU(pctx, tr, p, s, start, end)
	}
	for i := range p.Collectives {
		e.emitCollective(pctx, tr, &p.Collectives[i])
		n++
	}
	for i := range p.Syncs {
		e.emitSync(pctx, tr, &p.Syncs[i])
		n++
	}
	e.endAt(ps, p.End)
	return n
}

// gpuWindow is the phase's GPU span: the first start to the last end of its
// GPU records (kernels, and the copies and sets it issued, so that every
// record's span lies inside).
func gpuWindow(p *model.PhaseTrace) (start, end uint64, ok bool) {
	for i := range p.GPU {
		g := &p.GPU[i]
		if !ok || g.Start < start {
			start = g.Start
		}
		if !ok || g.End > end {
			end = g.End
		}
		ok = true
	}
	return start, end, ok
}

func (e *Exporter) emitGPU(ctx context.Context, tr trace.Tracer, p *model.PhaseTrace, s *model.PhaseStats, start, end uint64) int {
	gctx, gs := tr.Start(ctx, SpanGPU, e.at(start), trace.WithAttributes(
		attribute.String("specprof.phase", p.Phase),
		attribute.Int64("specprof.gpu.busy_ns", s.GPUBusyNs),
		attribute.Int64("specprof.gpu.active_ns", s.GPUActiveNs),
		attribute.Int64("specprof.gpu.elapsed_ns", s.GPUElapsedNs),
		attribute.Int64("specprof.gpu.host_gap_ns", s.GPUHostGapNs),
		attribute.Int64("specprof.gpu.kernels", s.GPUKernels),
		attribute.Int64("specprof.gpu.kernel_ns", s.GPUKernelNs),
		attribute.Int64("specprof.gpu.span_ns", s.GPUSpanNs),
		attribute.Int("specprof.gpu.records", len(p.GPU)),
	))
	n := 1
	if e.cfg.Kernels {
		for i := range p.GPU {
			g := &p.GPU[i]
			name := g.Name
			if name == "" {
				name = g.Kind
			}
			attrs := []attribute.KeyValue{
				attribute.String("specprof.gpu.kind", g.Kind),
				attribute.Int("specprof.gpu.device", int(g.Device)),
				attribute.Int("specprof.gpu.stream", int(g.Stream)),
				attribute.Int("specprof.gpu.correlation_id", int(g.Corr)),
			}
			if g.Bytes > 0 {
				attrs = append(attrs, attribute.Int64("specprof.gpu.bytes", int64(g.Bytes)))
			}
			if g.GraphID != 0 {
				attrs = append(attrs, attribute.Int("specprof.gpu.graph_id", int(g.GraphID)))
			}
			if g.Launch != 0 && g.Start >= g.Launch {
				attrs = append(attrs, attribute.Int64("specprof.gpu.launch_to_start_ns", int64(g.Start-g.Launch)))
			}
			attrs = appendCode(attrs, g.Site)
			_, ks := tr.Start(gctx, name, e.at(g.Start), trace.WithAttributes(attrs...))
			e.endAt(ks, g.End)
			n++
		}
	}
	e.endAt(gs, end)
	return n
}

func (e *Exporter) emitCollective(ctx context.Context, tr trace.Tracer, c *model.Collective) {
	onGPU := c.GPUEnd > c.GPUStart && c.GPUStart != 0
	start, end := c.Time, c.Time+pointNs
	if onGPU {
		start, end = c.GPUStart, c.GPUEnd
	}
	attrs := []attribute.KeyValue{
		attribute.String("specprof.collective.op", c.Op),
		attribute.Int64("specprof.collective.bytes", c.Bytes),
		attribute.Bool("specprof.collective.on_gpu", onGPU),
	}
	if c.API != "" {
		attrs = append(attrs, attribute.String("specprof.collective.api", c.API))
	}
	if c.Count > 0 {
		attrs = append(attrs, attribute.Int64("specprof.collective.count", int64(c.Count)))
	}
	if c.Dtype != "" {
		attrs = append(attrs, attribute.String("specprof.collective.dtype", c.Dtype))
	}
	if c.Reduce != "" {
		attrs = append(attrs, attribute.String("specprof.collective.reduce", c.Reduce))
	}
	if c.Kernel != "" {
		attrs = append(attrs, attribute.String("specprof.collective.kernel", c.Kernel))
	}
	if c.Algorithm != "" {
		attrs = append(attrs, attribute.String("specprof.collective.algorithm", c.Algorithm))
	}
	if c.Protocol != "" {
		attrs = append(attrs, attribute.String("specprof.collective.protocol", c.Protocol))
	}
	if c.Ranks > 0 {
		attrs = append(attrs, attribute.Int("specprof.collective.ranks", c.Ranks))
	}
	if c.Peer >= 0 {
		attrs = append(attrs, attribute.Int("specprof.collective.peer", c.Peer))
	}
	if c.AlgBWGBps > 0 {
		attrs = append(attrs, attribute.Float64("specprof.collective.algbw_gbps", c.AlgBWGBps))
	}
	if c.BusBWGBps > 0 {
		attrs = append(attrs, attribute.Float64("specprof.collective.busbw_gbps", c.BusBWGBps))
	}
	if onGPU {
		attrs = append(attrs, attribute.Int64("specprof.collective.call_to_start_ns", int64(c.GPUStart)-int64(c.Time)))
	}
	if c.Captured {
		attrs = append(attrs, attribute.Bool("specprof.collective.captured", true))
	}
	if ar := c.Arrival; ar != nil {
		attrs = append(attrs,
			attribute.Int("specprof.collective.last_rank", ar.LastRank),
			attribute.Int64("specprof.collective.wait_ns", ar.WaitNs),
			attribute.Int64("specprof.collective.spread_ns", ar.SpreadNs),
			attribute.String("specprof.collective.arrival_clock", ar.Clock))
	}
	attrs = appendCode(attrs, c.Site)
	name := c.Op
	if name == "" {
		name = "collective"
	}
	_, s := tr.Start(ctx, name, e.at(start), trace.WithAttributes(attrs...))
	e.endAt(s, end)
}

func (e *Exporter) emitSync(ctx context.Context, tr trace.Tracer, y *model.SyncTrace) {
	end := y.Start + pointNs
	if y.WaitNs > 0 {
		end = y.Start + uint64(y.WaitNs)
	}
	attrs := []attribute.KeyValue{
		attribute.String("specprof.sync.api", y.API),
		attribute.Int64("specprof.sync.wait_ns", max(y.WaitNs, 0)),
		attribute.Bool("specprof.sync.returned", y.WaitNs >= 0),
	}
	if y.Bytes > 0 {
		attrs = append(attrs, attribute.Int64("specprof.sync.bytes", y.Bytes))
	}
	attrs = appendCode(attrs, y.Site)
	name := y.API
	if name == "" {
		name = "sync"
	}
	_, s := tr.Start(ctx, name, e.at(y.Start), trace.WithAttributes(attrs...))
	e.endAt(s, end)
}

// appendCode adds the code.* attributes of a Python frame, when known.
func appendCode(attrs []attribute.KeyValue, f model.Frame) []attribute.KeyValue {
	if f.IsZero() {
		return attrs
	}
	if f.Func != "" {
		attrs = append(attrs, semconv.CodeFunctionName(f.Func))
	}
	if f.File != "" {
		attrs = append(attrs, semconv.CodeFilePath(f.File))
	}
	if f.Line > 0 {
		attrs = append(attrs, semconv.CodeLineNumber(f.Line))
	}
	return attrs
}
