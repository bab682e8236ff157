// Package otlp exports the agent's closed cycles (agent.CycleTrace) as
// OpenTelemetry traces, through the OpenTelemetry Go SDK and its OTLP
// exporters (gRPC or HTTP/protobuf), to Jaeger or any OTLP collector.
//
// # Traces
//
// Each cycle of each traced thread is one trace:
//
//	cycle                                  CPU: the cycle's first call → last call or sync return
//	├── spec.draft                         one span per phase, CPU span of the phase in the cycle
//	│   ├── gpu                            the phase's GPU records: first start → last end
//	│   │   └── <kernel name>              one per GPU record (Config.Kernels only)
//	│   ├── AllReduce                      one per collective: on the GPU when its kernel is known,
//	│   │                                  else a 1 ns mark at the call
//	│   └── cuStreamSynchronize            one per blocking call: entry → return (1 ns when it did
//	│                                      not block or its return was not seen)
//	├── spec.verify
//	…
//
// Span times are CLOCK_MONOTONIC timestamps converted once to wall time by the
// session's agent.Clock, so every span of a session shares one offset.
//
// Attributes carry the figures of the terminal table and the report, under
// the specprof.* namespace: on the cycle span specprof.cycle, thread.id,
// specprof.tp_rank, specprof.gpu.busy_ns (summed over phases) and
// specprof.gpu.kernels; on each phase span specprof.phase, specprof.cpu_span_ns,
// specprof.launches, specprof.graph_launches, specprof.syncs,
// specprof.sync.wait_ns, specprof.collectives, specprof.collective.bytes,
// specprof.gpu.kernels, specprof.gpu.busy_ns, specprof.gpu.span_ns,
// specprof.gpu.kernel_ns and code.function.name / code.file.path /
// code.line.number of the Python function that matched the phase rule.
// Collective spans carry specprof.collective.{op,api,bytes,count,dtype,reduce,
// algorithm,protocol,ranks,kernel,busbw_gbps,algbw_gbps,on_gpu}; sync spans
// specprof.sync.{api,wait_ns,returned,bytes} and the code.* attributes of the
// Python line that blocked.
//
// The resource of a trace describes the traced process, not specprof:
// service.name (Config.ServiceName), host.name, process.pid,
// process.command_line (from /proc) and specprof.tp_rank when the process
// title names a tensor-parallel rank. OTEL_RESOURCE_ATTRIBUTES is honoured.
//
// # Never blocking the profiler
//
// Exporter.Cycle only queues the cycle on a bounded channel (Config.QueueCycles)
// and returns; when the queue is full the cycle is dropped and counted. One
// goroutine turns queued cycles into spans for a BatchSpanProcessor that blocks
// that goroutine, never the caller, while the endpoint is slow or down. Export
// failures are counted; the first one is logged once. Stats reports every
// counter; Shutdown flushes within the caller's deadline.
package otlp
