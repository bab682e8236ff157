// Package testenv helps tests run specprof's whole path without a GPU.
//
// It builds the stand-ins of NVIDIA's libraries in testdata/standin — libcuda.so.1 and
// libnccl.so.2 with the real exported names and ABI, driving a simulated GPU (per-stream FIFO
// timelines, known kernel durations, graph capture and replay, blocking synchronization) — and
// reads the ground truth the simulator writes (SPECPROF_SIM_TRUTH, one JSON object per line).
//
// A test typically calls BuildStandins, compiles or starts a workload with SimEnv (so the
// dynamic loader finds the stand-ins), traces it, and compares what it measured with ReadTruth.
// testdata/standin/simgpu.h documents the simulator's knobs and extension API (thread tags,
// kernel durations, observer hooks for a mock CUPTI).
package testenv
