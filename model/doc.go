// Package model is specprof's data model: what a session found, as the
// engine (package agent) builds it and every exporter and front end reads
// it. Reports (Report → ProcessReport → ThreadReport → PhaseStats, with
// the loss counters of Loss), per-cycle timelines (CycleTrace → PhaseTrace
// → GPUActivity, Collective, SyncTrace), CPU samples, GPU and receiver
// counters, and Clock, which turns the CLOCK_MONOTONIC timestamps every
// record carries into wall time.
//
// The package imports nothing of the engine, the probes or the GPU
// libraries, so an exporter built on it stays free of eBPF, CUPTI and
// NVML.
package model
