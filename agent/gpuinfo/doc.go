// Package gpuinfo names the host's GPUs and which traced process uses which,
// through NVML (NVIDIA/go-nvml, which loads libnvidia-ml.so.1 at run time):
// the GPU part of a trace's resource. Hosts without the driver (CI, the
// simulated GPU) get ErrUnavailable and no GPU names.
package gpuinfo
