/*
 * libcudart.c — a stand-in for NVIDIA's CUDA runtime (libcudart.so.13) over the stand-in driver
 * (libcuda.so.1, simgpu.h): the few runtime calls a test workload makes, each implemented the way
 * the real runtime does, by calling the driver's exported entry points (for now cudaLaunchKernel). PyTorch launches its
 * kernels this way (cudaLaunchKernel → cuLaunchKernel), so CUPTI sees the runtime call and the
 * driver call made in it; the stand-in tells the simulator (simgpu_runtime_enter/exit) so that a
 * mock CUPTI can report both, and the kernels under the runtime call's correlation id.
 *
 * Stand-in semantics: cudaLaunchKernel's func is a CUfunction (the real one takes the kernel's host
 * stub, which the runtime maps to a CUfunction; the workload has no stubs). Errors are the driver's
 * CUresult values, which agree with cudaError_t for the codes the stand-in returns (0 success).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>

#include "cuda.h"
#include "simgpu.h"

#define EXPORT __attribute__((visibility("default"), noinline))

typedef int cudaError_t;
typedef CUstream cudaStream_t;
typedef struct dim3 {
    unsigned int x, y, z;
} dim3;

EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t sharedMem,
                                    cudaStream_t stream) {
    uint64_t corr = simgpu_runtime_enter("cudaLaunchKernel", stream);
    CUresult rc = cuLaunchKernel((CUfunction)(uintptr_t)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                 (unsigned int)sharedMem, stream, args, NULL);
    simgpu_runtime_exit(corr, (int)rc);
    return (cudaError_t)rc;
}
