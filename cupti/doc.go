// Package cupti receives the GPU activity that specprof's injected CUPTI library
// (libspecprof_cupti.so, built from cupti/lib) streams from every profiled process.
//
// The library is loaded by the CUDA driver through CUDA_INJECTION64_PATH. It subscribes to CUPTI
// activity records (kernels, copies, memsets, driver API calls, synchronizations, CUPTI
// overhead) and graph-node resource callbacks, converts them into specprof's own wire format
// (wire.h; mirrored in Go by the generated wire_linux_amd64.go) and writes them to a unix socket.
// Times are CLOCK_MONOTONIC nanoseconds, the clock of bpf_ktime_get_ns.
//
// A Receiver listens on that socket, accepts one connection per process (or TP rank), decodes
// each stream defensively (Decoder) and hands the records, in per-type batches, to a Handler.
// Kernel names travel once per connection as NAME records; Conn.Name resolves a Kernel.NameID.
//
// See README.md for the library's environment variables, the never-harm rules and the
// supported CUPTI versions.
package cupti

//go:generate go run gen_wire.go
