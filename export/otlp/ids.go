package otlp

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// Cycles compared across tensor-parallel ranks (agent.CycleTrace.TP) share
// one trace per cycle number, so a trace viewer shows every rank's cycle
// in one view: each rank's cycle span is a root of that trace, under its
// own process (resource). The trace ID is derived from a per-exporter
// random salt and the cycle number; everything else gets random IDs.

// idGenerator is the SDK's ID source, honouring a trace ID put in the
// context by withTraceID.
type idGenerator struct {
	mu  sync.Mutex
	rng *rand.ChaCha8
}

func newIDGenerator() *idGenerator {
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	return &idGenerator{rng: rand.NewChaCha8(seed)}
}

type traceIDKey struct{}

// withTraceID makes the next root span started with ctx use id.
func withTraceID(ctx context.Context, id trace.TraceID) context.Context {
	return context.WithValue(ctx, traceIDKey{}, id)
}

func (g *idGenerator) read(b []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, _ = g.rng.Read(b)
}

// NewIDs implements sdktrace.IDGenerator.
func (g *idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	if id, ok := ctx.Value(traceIDKey{}).(trace.TraceID); ok && id.IsValid() {
		tid = id
	} else {
		for !tid.IsValid() {
			g.read(tid[:])
		}
	}
	return tid, g.NewSpanID(ctx, tid)
}

// NewSpanID implements sdktrace.IDGenerator.
func (g *idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		g.read(sid[:])
	}
	return sid
}

// cycleTraceID is the trace of cycle number cycle of every rank: the salt's
// first half and the cycle number.
func cycleTraceID(salt [16]byte, cycle int) trace.TraceID {
	var id trace.TraceID
	copy(id[:8], salt[:8])
	binary.BigEndian.PutUint64(id[8:], uint64(cycle)^binary.BigEndian.Uint64(salt[8:]))
	return id
}
