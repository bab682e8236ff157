/*
 * layout_check.c — compiled ONLY against NVIDIA's real CUPTI headers (run.sh): asserts that every
 * offset, size, enum value and callback id that libspecprof_cupti.so (cupti/lib/cupti_min.h) and
 * the mock CUPTI (testdata/mockcupti/mock_layouts.h) rely on equals NVIDIA's. Compiling is the
 * check; running prints the header's CUPTI_API_VERSION and, given a libcupti path, the run-time
 * cuptiGetVersion (which must lie in the library's supported ranges).
 *
 * LAYOUTCHECK_PARTIAL: include only the activity/callback headers (Debian's libcupti-dev ships
 * CUPTI 11.8 headers but not cuda.h; run.sh --debian supplies a stub cuda.h).
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#ifdef LAYOUTCHECK_PARTIAL
#include <cuda.h>
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#else
#include <cupti.h>
#endif

#include "cupti_min.h"
#include "mock_layouts.h"

#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a " == " #b)
#define OFF(ours, theirs, f_ours, f_theirs) SAME(offsetof(struct ours, f_ours), offsetof(theirs, f_theirs))
#define OFF1(ours, theirs, f)                                                              \
    OFF(ours, theirs, f, f);                                                                   \
    SAME(sizeof(((struct ours *)0)->f), sizeof(((theirs *)0)->f))
#define CBID(name, n) SAME(CUPTI_DRIVER_TRACE_CBID_##name, n)

/* The record versions each CUPTI version emits (see cupti_min.h). */
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_t;
#elif CUPTI_API_VERSION > 18 || (defined(CUDA_VERSION) && CUDA_VERSION >= 12000)
typedef CUpti_ActivityKernel9 kernel_t;
#else
typedef CUpti_ActivityKernel8 kernel_t; /* CUDA 11.8 */
#endif
#if CUPTI_API_VERSION >= 26
typedef CUpti_ActivityMemcpy6 memcpy_t;
typedef CUpti_ActivitySynchronization2 sync_t;
#else
typedef CUpti_ActivityMemcpy5 memcpy_t;
typedef CUpti_ActivitySynchronization sync_t;
#endif
#if CUPTI_API_VERSION >= 22
typedef CUpti_ActivityOverhead3 overhead_t;
#else
typedef CUpti_ActivityOverhead overhead_t;
#endif

#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityGraphTrace2 graph_trace_t;
#else
typedef CUpti_ActivityGraphTrace graph_trace_t; /* CUDA 11.7+ */
#endif

/* cupti_min.h: the prefixes the library reads. */
OFF1(spc_kernel_prefix, kernel_t, kind);
OFF1(spc_kernel_prefix, kernel_t, registersPerThread);
OFF1(spc_kernel_prefix, kernel_t, start);
OFF1(spc_kernel_prefix, kernel_t, end);
OFF1(spc_kernel_prefix, kernel_t, deviceId);
OFF1(spc_kernel_prefix, kernel_t, contextId);
OFF1(spc_kernel_prefix, kernel_t, streamId);
OFF1(spc_kernel_prefix, kernel_t, gridX);
OFF1(spc_kernel_prefix, kernel_t, gridY);
OFF1(spc_kernel_prefix, kernel_t, gridZ);
OFF1(spc_kernel_prefix, kernel_t, blockX);
OFF1(spc_kernel_prefix, kernel_t, blockY);
OFF1(spc_kernel_prefix, kernel_t, blockZ);
OFF1(spc_kernel_prefix, kernel_t, staticSharedMemory);
OFF1(spc_kernel_prefix, kernel_t, dynamicSharedMemory);
OFF1(spc_kernel_prefix, kernel_t, correlationId);
OFF1(spc_kernel_prefix, kernel_t, name);
OFF1(spc_kernel_prefix, kernel_t, graphNodeId);
OFF1(spc_kernel_prefix, kernel_t, graphId);
SAME(sizeof(((kernel_t *)0)->registersPerThread), 2);
_Static_assert(sizeof(kernel_t) >= sizeof(struct spc_kernel_prefix), "kernel record holds the prefix");

OFF1(spc_memcpy_prefix, memcpy_t, kind);
OFF1(spc_memcpy_prefix, memcpy_t, copyKind);
OFF1(spc_memcpy_prefix, memcpy_t, srcKind);
OFF1(spc_memcpy_prefix, memcpy_t, dstKind);
OFF1(spc_memcpy_prefix, memcpy_t, flags);
OFF1(spc_memcpy_prefix, memcpy_t, bytes);
OFF1(spc_memcpy_prefix, memcpy_t, start);
OFF1(spc_memcpy_prefix, memcpy_t, end);
OFF1(spc_memcpy_prefix, memcpy_t, deviceId);
OFF1(spc_memcpy_prefix, memcpy_t, contextId);
OFF1(spc_memcpy_prefix, memcpy_t, streamId);
OFF1(spc_memcpy_prefix, memcpy_t, correlationId);
OFF1(spc_memcpy_prefix, memcpy_t, graphNodeId);
OFF1(spc_memcpy_prefix, memcpy_t, graphId);
_Static_assert(sizeof(memcpy_t) >= sizeof(struct spc_memcpy_prefix), "memcpy record holds the prefix");

OFF1(spc_memset_prefix, CUpti_ActivityMemset4, value);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, bytes);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, start);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, end);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, deviceId);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, contextId);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, streamId);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, correlationId);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, flags);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, memoryKind);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, graphNodeId);
OFF1(spc_memset_prefix, CUpti_ActivityMemset4, graphId);

OFF1(spc_api, CUpti_ActivityAPI, kind);
OFF1(spc_api, CUpti_ActivityAPI, cbid);
OFF1(spc_api, CUpti_ActivityAPI, start);
OFF1(spc_api, CUpti_ActivityAPI, end);
OFF1(spc_api, CUpti_ActivityAPI, processId);
OFF1(spc_api, CUpti_ActivityAPI, threadId);
OFF1(spc_api, CUpti_ActivityAPI, correlationId);
OFF1(spc_api, CUpti_ActivityAPI, returnValue);
SAME(sizeof(struct spc_api), sizeof(CUpti_ActivityAPI));

OFF1(spc_sync_prefix, sync_t, type);
OFF1(spc_sync_prefix, sync_t, start);
OFF1(spc_sync_prefix, sync_t, end);
OFF1(spc_sync_prefix, sync_t, correlationId);
OFF1(spc_sync_prefix, sync_t, contextId);
OFF1(spc_sync_prefix, sync_t, streamId);
OFF1(spc_sync_prefix, sync_t, cudaEventId);

OFF1(spc_overhead_prefix, overhead_t, overheadKind);
OFF1(spc_overhead_prefix, overhead_t, objectKind);
OFF1(spc_overhead_prefix, overhead_t, objectId);
OFF1(spc_overhead_prefix, overhead_t, start);
OFF1(spc_overhead_prefix, overhead_t, end);
SAME(sizeof(CUpti_ActivityObjectKindId), 12);

OFF1(spc_graph_trace_prefix, graph_trace_t, kind);
OFF1(spc_graph_trace_prefix, graph_trace_t, correlationId);
OFF1(spc_graph_trace_prefix, graph_trace_t, start);
OFF1(spc_graph_trace_prefix, graph_trace_t, end);
OFF1(spc_graph_trace_prefix, graph_trace_t, deviceId);
OFF1(spc_graph_trace_prefix, graph_trace_t, graphId);
OFF1(spc_graph_trace_prefix, graph_trace_t, contextId);
OFF1(spc_graph_trace_prefix, graph_trace_t, streamId);
SAME(SPC_KIND_GRAPH_TRACE, CUPTI_ACTIVITY_KIND_GRAPH_TRACE);

OFF1(spc_callback_data, CUpti_CallbackData, callbackSite);
OFF1(spc_callback_data, CUpti_CallbackData, functionName);
OFF1(spc_callback_data, CUpti_CallbackData, context);
OFF1(spc_callback_data, CUpti_CallbackData, correlationId);
OFF1(spc_resource_data, CUpti_ResourceData, context);
OFF1(spc_resource_data, CUpti_ResourceData, resourceHandle);
OFF1(spc_resource_data, CUpti_ResourceData, resourceDescriptor);
SAME(sizeof(struct spc_resource_data), sizeof(CUpti_ResourceData));
OFF1(spc_graph_data, CUpti_GraphData, graph);
OFF1(spc_graph_data, CUpti_GraphData, originalGraph);
OFF1(spc_graph_data, CUpti_GraphData, node);
OFF1(spc_graph_data, CUpti_GraphData, originalNode);
OFF1(spc_graph_data, CUpti_GraphData, nodeType);
SAME(sizeof(struct spc_graph_data), sizeof(CUpti_GraphData));

SAME(SPC_SUCCESS, CUPTI_SUCCESS);
SAME(SPC_ERROR_MAX_LIMIT_REACHED, CUPTI_ERROR_MAX_LIMIT_REACHED);
SAME(SPC_ERROR_NOT_INITIALIZED, CUPTI_ERROR_NOT_INITIALIZED);
SAME(SPC_ERROR_NOT_SUPPORTED, CUPTI_ERROR_NOT_SUPPORTED);
SAME(SPC_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
SAME(SPC_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY);
SAME(SPC_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMSET);
SAME(SPC_KIND_DRIVER, CUPTI_ACTIVITY_KIND_DRIVER);
SAME(SPC_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
SAME(SPC_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_OVERHEAD);
SAME(SPC_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
SAME(SPC_FLUSH_FORCED, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
SAME(SPC_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_DRIVER_API);
SAME(SPC_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_RUNTIME_API);
SAME(SPC_DOMAIN_RESOURCE, CUPTI_CB_DOMAIN_RESOURCE);
SAME(SPC_API_ENTER, CUPTI_API_ENTER);
SAME(SPC_API_EXIT, CUPTI_API_EXIT);
SAME(SPC_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
SAME(SPC_CBID_RESOURCE_GRAPHNODE_CLONED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);

/* mock_layouts.h: the complete records the mock writes. */
SAME(sizeof(struct mock_memcpy5), sizeof(CUpti_ActivityMemcpy5));
SAME(sizeof(struct mock_memset4), sizeof(CUpti_ActivityMemset4));
SAME(sizeof(struct mock_api), sizeof(CUpti_ActivityAPI));
SAME(sizeof(struct mock_sync), sizeof(CUpti_ActivitySynchronization));
SAME(sizeof(struct mock_overhead), sizeof(CUpti_ActivityOverhead));
OFF(mock_memcpy5, CUpti_ActivityMemcpy5, channelType, channelType);
OFF(mock_memset4, CUpti_ActivityMemset4, channelType, channelType);
SAME(sizeof(struct mock_callback_data), sizeof(CUpti_CallbackData));
SAME(sizeof(struct mock_graph_data), sizeof(CUpti_GraphData));
#if CUPTI_API_VERSION > 18 || (defined(CUDA_VERSION) && CUDA_VERSION >= 12000)
SAME(sizeof(struct mock_kernel9), sizeof(CUpti_ActivityKernel9));
OFF(mock_kernel9, CUpti_ActivityKernel9, maxActiveClusters, maxActiveClusters);
OFF(mock_kernel9, CUpti_ActivityKernel9, localMemoryTotal_v2, localMemoryTotal_v2);
#endif
#if CUPTI_API_VERSION >= 22
SAME(sizeof(struct mock_overhead3), sizeof(CUpti_ActivityOverhead3));
OFF(mock_overhead3, CUpti_ActivityOverhead3, correlationId, correlationId);
#endif
#if CUPTI_API_VERSION >= 26
SAME(sizeof(struct mock_memcpy6), sizeof(CUpti_ActivityMemcpy6));
OFF(mock_memcpy6, CUpti_ActivityMemcpy6, copyCount, copyCount);
SAME(sizeof(struct mock_sync2), sizeof(CUpti_ActivitySynchronization2));
#endif
#if CUPTI_API_VERSION >= 130000
SAME(sizeof(struct mock_kernel10), sizeof(CUpti_ActivityKernel10));
SAME(sizeof(struct mock_graph_trace2), sizeof(CUpti_ActivityGraphTrace2));
SAME(offsetof(struct mock_kernel10, isDeviceLaunched), offsetof(CUpti_ActivityKernel10, isDeviceLaunched));
OFF(mock_memcpy5, CUpti_ActivityMemcpy6, isDeviceLaunched, isDeviceLaunched);
OFF(mock_memset4, CUpti_ActivityMemset4, isDeviceLaunched, isDeviceLaunched);
#endif

/* Driver callback ids: the library's tracked launch/capture calls and the mock's table. */
static void cbids(void) {
    CBID(cuMemcpyHtoDAsync, 60);
    CBID(cuMemcpyDtoHAsync, 62);
    CBID(cuMemcpyDtoDAsync, 64);
    CBID(cuMemcpyHtoAAsync, 66);
    CBID(cuMemcpyAtoHAsync, 67);
    CBID(cuMemcpy2DAsync, 68);
    CBID(cuMemcpy3DAsync, 69);
    CBID(cuLaunch, 115);
    CBID(cuLaunchGrid, 116);
    CBID(cuLaunchGridAsync, 117);
    CBID(cuMemsetD8Async, 216);
    CBID(cuMemsetD16Async, 218);
    CBID(cuMemsetD32Async, 220);
    CBID(cuMemsetD2D8Async, 222);
    CBID(cuMemsetD2D16Async, 224);
    CBID(cuMemsetD2D32Async, 226);
    CBID(cuMemcpyHtoDAsync_v2, 277);
    CBID(cuMemcpyDtoHAsync_v2, 279);
    CBID(cuMemcpyDtoDAsync_v2, 281);
    CBID(cuMemcpyAtoHAsync_v2, 283);
    CBID(cuMemcpy2DAsync_v2, 289);
    CBID(cuMemcpy3DAsync_v2, 291);
    CBID(cuMemcpyHtoAAsync_v2, 293);
    CBID(cuMemcpyAsync, 306);
    CBID(cuLaunchKernel, 307);
    CBID(cuMemcpyPeerAsync, 319);
    CBID(cuMemcpy3DPeerAsync, 321);
    CBID(cuMemcpyAsync_ptsz, 418);
    CBID(cuMemcpyHtoAAsync_v2_ptsz, 419);
    CBID(cuMemcpyAtoHAsync_v2_ptsz, 420);
    CBID(cuMemcpyHtoDAsync_v2_ptsz, 421);
    CBID(cuMemcpyDtoHAsync_v2_ptsz, 422);
    CBID(cuMemcpyDtoDAsync_v2_ptsz, 423);
    CBID(cuMemcpy2DAsync_v2_ptsz, 424);
    CBID(cuMemcpy3DAsync_v2_ptsz, 425);
    CBID(cuMemcpyPeerAsync_ptsz, 426);
    CBID(cuMemcpy3DPeerAsync_ptsz, 427);
    CBID(cuMemsetD8Async_ptsz, 428);
    CBID(cuMemsetD16Async_ptsz, 429);
    CBID(cuMemsetD32Async_ptsz, 430);
    CBID(cuMemsetD2D8Async_ptsz, 431);
    CBID(cuMemsetD2D16Async_ptsz, 432);
    CBID(cuMemsetD2D32Async_ptsz, 433);
    CBID(cuLaunchKernel_ptsz, 442);
    CBID(cuLaunchCooperativeKernel, 477);
    CBID(cuLaunchCooperativeKernel_ptsz, 478);
    CBID(cuLaunchCooperativeKernelMultiDevice, 480);
    CBID(cuGraphAddKernelNode, 502);
    CBID(cuGraphAddMemcpyNode, 504);
    CBID(cuGraphAddMemsetNode, 506);
    CBID(cuGraphInstantiate, 513);
    CBID(cuGraphClone, 523);
    CBID(cuGraphAddChildGraphNode, 525);
    CBID(cuGraphAddEmptyNode, 526);
    CBID(cuLaunchHostFunc, 527);
    CBID(cuLaunchHostFunc_ptsz, 528);
    CBID(cuGraphAddHostNode, 530);
    CBID(cuGraphExecKernelNodeSetParams, 538);
    CBID(cuGraphExecUpdate, 561);
    CBID(cuGraphInstantiate_v2, 578);
    CBID(cuGraphAddEventRecordNode, 589);
    CBID(cuGraphAddEventWaitNode, 590);
    CBID(cuGraphAddExternalSemaphoresSignalNode, 618);
    CBID(cuGraphAddExternalSemaphoresWaitNode, 621);
    CBID(cuGraphAddMemAllocNode, 638);
    CBID(cuGraphAddMemFreeNode, 639);
    CBID(cuGraphInstantiateWithFlags, 643);
    CBID(cuLaunchKernelEx, 652);
    CBID(cuLaunchKernelEx_ptsz, 653);
    CBID(cuGraphInstantiateWithParams, 656);
    CBID(cuGraphInstantiateWithParams_ptsz, 657);
    CBID(cuGraphAddBatchMemOpNode, 669);
    CBID(cuCtxAttach, 12);
    CBID(cuDeviceGetProperties, 8);
    CBID(cuInit, 1);
    CBID(cuDriverGetVersion, 2);
    CBID(cuDeviceGet, 3);
    CBID(cuDeviceGetCount, 4);
    CBID(cuDeviceGetName, 5);
    CBID(cuDeviceGetAttribute, 9);
    CBID(cuCtxGetDevice, 16);
    CBID(cuCtxSynchronize, 17);
    CBID(cuModuleLoad, 18);
    CBID(cuModuleLoadData, 19);
    CBID(cuModuleUnload, 22);
    CBID(cuModuleGetFunction, 23);
    CBID(cuMemcpyDtoH, 45);
    CBID(cuEventCreate, 118);
    CBID(cuEventRecord, 119);
    CBID(cuEventQuery, 120);
    CBID(cuEventSynchronize, 121);
    CBID(cuEventElapsedTime, 123);
    CBID(cuStreamCreate, 124);
    CBID(cuStreamQuery, 125);
    CBID(cuStreamSynchronize, 126);
    CBID(cuCtxCreate_v2, 235);
    CBID(cuMemAlloc_v2, 243);
    CBID(cuMemFree_v2, 245);
    CBID(cuMemsetD8_v2, 249);
    CBID(cuDeviceTotalMem_v2, 259);
    CBID(cuMemcpyHtoD_v2, 276);
    CBID(cuMemcpyDtoH_v2, 278);
    CBID(cuStreamWaitEvent, 295);
    CBID(cuCtxSetCurrent, 303);
    CBID(cuCtxGetCurrent, 304);
    CBID(cuCtxDestroy_v2, 322);
    CBID(cuEventDestroy_v2, 325);
    CBID(cuStreamDestroy_v2, 326);
    CBID(cuStreamCreateWithPriority, 367);
    CBID(cuGetErrorString, 372);
    CBID(cuGetErrorName, 373);
    CBID(cuDevicePrimaryCtxRetain, 386);
    CBID(cuMemcpyDtoH_v2_ptds, 398);
    CBID(cuStreamSynchronize_ptsz, 440);
    CBID(cuEventRecord_ptsz, 441);
    CBID(cuStreamBeginCapture, 495);
    CBID(cuStreamBeginCapture_ptsz, 496);
    CBID(cuStreamEndCapture, 497);
    CBID(cuStreamEndCapture_ptsz, 498);
    CBID(cuStreamIsCapturing, 499);
    CBID(cuGraphLaunch, 514);
    CBID(cuGraphLaunch_ptsz, 515);
    CBID(cuGraphExecDestroy, 516);
    CBID(cuGraphDestroy, 517);
    CBID(cuStreamBeginCapture_v2, 539);
    CBID(cuStreamBeginCapture_v2_ptsz, 540);
    CBID(cuDevicePrimaryCtxRelease_v2, 544);
    CBID(cuEventRecordWithFlags, 587);
    CBID(cuGetProcAddress, 626);
#if CUPTI_API_VERSION >= 130000
    CBID(cuGraphAddKernelNode_v2, 689);
    CBID(cuGraphExecKernelNodeSetParams_v2, 692);
    CBID(cuGraphExecUpdate_v2, 696);
    CBID(cuGraphAddNode, 712);
    CBID(cuGraphNodeSetParams, 713);
    CBID(cuGraphExecNodeSetParams, 714);
    CBID(cuStreamBeginCaptureToGraph, 720);
    CBID(cuStreamBeginCaptureToGraph_ptsz, 721);
    CBID(cuGraphAddNode_v2, 723);
    CBID(cuMemcpyBatchAsync, 776);
    CBID(cuMemcpyBatchAsync_ptsz, 777);
    CBID(cuMemcpy3DBatchAsync, 778);
    CBID(cuMemcpy3DBatchAsync_ptsz, 779);
    CBID(cuMemcpyBatchAsync_v2, 796);
    CBID(cuMemcpyBatchAsync_v2_ptsz, 797);
    CBID(cuMemcpy3DBatchAsync_v2, 798);
    CBID(cuMemcpy3DBatchAsync_v2_ptsz, 799);
    CBID(cuGetProcAddress_v2, 677);
    CBID(cuCtxSynchronize_v2, 800);
#endif
}

int main(int argc, char **argv) {
    (void)cbids;
    printf("layout check passed against CUPTI headers with CUPTI_API_VERSION %d\n", (int)CUPTI_API_VERSION);
    if (argc > 1) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        CUptiResult (*get)(uint32_t *) = h ? (CUptiResult(*)(uint32_t *))dlsym(h, "cuptiGetVersion") : NULL;
        uint32_t v = 0;
        if (!get || get(&v) != CUPTI_SUCCESS) {
            printf("%s: cannot query cuptiGetVersion (%s)\n", argv[1], h ? "no symbol or error" : dlerror());
            return 1;
        }
        int ok = (v >= 18 && v <= 28) || (v >= 130000 && v <= 130099);
        printf("%s: cuptiGetVersion = %u: %s by libspecprof_cupti.so\n", argv[1], v, ok ? "supported" : "NOT supported");
        return ok ? 0 : 1;
    }
    return 0;
}
