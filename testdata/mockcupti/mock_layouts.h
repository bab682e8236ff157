/*
 * mock_layouts.h — complete CUPTI activity record layouts, per CUPTI version, as the mock CUPTI
 * writes them. Written independently of cupti/lib/cupti_min.h (which declares only the prefixes
 * the library reads) so that the two check each other; cupti/layoutcheck/layout_check.c asserts
 * both against NVIDIA's real headers on a CUDA host.
 *
 *   mock layout   versions (cuptiGetVersion)   kernel      memcpy         memset   sync     overhead
 *   LAYOUT_12_0   18-21  (CUDA 11.8-12.3)      Kernel9     Memcpy5        Memset4  Sync     Overhead
 *   LAYOUT_12_4   22-25  (CUDA 12.4-12.6)      Kernel9     Memcpy5        Memset4  Sync     Overhead3
 *   LAYOUT_12_8   26-28  (CUDA 12.8-12.9)      Kernel9     Memcpy6        Memset4  Sync2    Overhead3
 *   LAYOUT_13_0   130000+ (CUDA 13.0)          Kernel10    Memcpy6 (13)   Memset4 (13) Sync2 Overhead3
 * (CUDA 11.8 really emits Kernel8, 200 bytes; the mock does not claim 11.8.)
 */
#ifndef SPECPROF_MOCK_LAYOUTS_H
#define SPECPROF_MOCK_LAYOUTS_H

#include <stdint.h>

#define MOCK_PACKED __attribute__((packed, aligned(8)))

/* CUpti_ActivityKernel9 (CUDA 12.0-12.9). */
struct mock_kernel9 {
    uint32_t kind;
    uint8_t cacheConfig;
    uint8_t sharedMemoryConfig;
    uint16_t registersPerThread;
    uint32_t partitionedGlobalCacheRequested;
    uint32_t partitionedGlobalCacheExecuted;
    uint64_t start;
    uint64_t end;
    uint64_t completed;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    int32_t gridX;
    int32_t gridY;
    int32_t gridZ;
    int32_t blockX;
    int32_t blockY;
    int32_t blockZ;
    int32_t staticSharedMemory;
    int32_t dynamicSharedMemory;
    uint32_t localMemoryPerThread;
    uint32_t localMemoryTotal;
    uint32_t correlationId;
    int64_t gridId;
    const char *name;
    void *reserved0;
    uint64_t queued;
    uint64_t submitted;
    uint8_t launchType;
    uint8_t isSharedMemoryCarveoutRequested;
    uint8_t sharedMemoryCarveoutRequested;
    uint8_t padding;
    uint32_t sharedMemoryExecuted;
    uint64_t graphNodeId;
    uint32_t shmemLimitConfig;
    uint32_t graphId;
    void *pAccessPolicyWindow;
    uint32_t channelID;
    uint32_t channelType;
    uint32_t clusterX;
    uint32_t clusterY;
    uint32_t clusterZ;
    uint32_t clusterSchedulingPolicy;
    uint64_t localMemoryTotal_v2;
    uint32_t maxPotentialClusterSize;
    uint32_t maxActiveClusters;
} MOCK_PACKED;

/* CUpti_ActivityKernel10 (CUDA 13.0): Kernel9 plus isDeviceLaunched. */
struct mock_kernel10 {
    struct mock_kernel9 k9;
    uint8_t isDeviceLaunched;
    uint8_t padding3[7];
} MOCK_PACKED;

/* CUpti_ActivityMemcpy5 (CUDA 11.6-12.6); Memcpy6 (12.8+) appends copyCount; CUDA 13.0 turns the
 * first byte of pad2 into isDeviceLaunched. */
struct mock_memcpy5 {
    uint32_t kind;
    uint8_t copyKind;
    uint8_t srcKind;
    uint8_t dstKind;
    uint8_t flags;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint32_t runtimeCorrelationId;
    uint32_t pad;
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    uint32_t channelType;
    uint8_t isDeviceLaunched; /* pad2 before CUDA 13.0 */
    uint8_t pad2[3];
} MOCK_PACKED;

struct mock_memcpy6 {
    struct mock_memcpy5 m5;
    uint64_t copyCount;
} MOCK_PACKED;

/* CUpti_ActivityMemset4 (CUDA 11.6+; 13.0: isDeviceLaunched in pad2). */
struct mock_memset4 {
    uint32_t kind;
    uint32_t value;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint16_t flags;
    uint16_t memoryKind;
    uint32_t pad;
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    uint32_t channelType;
    uint8_t isDeviceLaunched;
    uint8_t pad2[3];
} MOCK_PACKED;

/* CUpti_ActivityAPI. */
struct mock_api {
    uint32_t kind;
    uint32_t cbid;
    uint64_t start;
    uint64_t end;
    uint32_t processId;
    uint32_t threadId;
    uint32_t correlationId;
    uint32_t returnValue;
} MOCK_PACKED;

/* CUpti_ActivitySynchronization; Synchronization2 (12.8+) appends cudaEventSyncId, returnValue. */
struct mock_sync {
    uint32_t kind;
    uint32_t type;
    uint64_t start;
    uint64_t end;
    uint32_t correlationId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t cudaEventId;
} MOCK_PACKED;

struct mock_sync2 {
    struct mock_sync s;
    uint64_t cudaEventSyncId;
    uint32_t returnValue;
    uint32_t pad;
} MOCK_PACKED;

/* CUpti_ActivityOverhead; Overhead3 (12.4+) appends correlationId, reserved0, overheadData. */
struct mock_overhead {
    uint32_t kind;
    uint32_t overheadKind;
    uint32_t objectKind;
    uint32_t objectId[3]; /* CUpti_ActivityObjectKindId */
    uint64_t start;
    uint64_t end;
} MOCK_PACKED;

struct mock_overhead3 {
    struct mock_overhead o;
    uint32_t correlationId;
    uint32_t reserved0;
    void *overheadData;
} MOCK_PACKED;

/* CUpti_CallbackData, CUpti_ResourceData, CUpti_GraphData. */
struct mock_callback_data {
    uint32_t callbackSite;
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
};

/* CUpti_ActivityGraphTrace2 (CUPTI 12.3+; the fields up to streamId as in GraphTrace). */
struct mock_graph_trace2 {
    uint32_t kind;
    uint32_t correlationId;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t graphId;
    uint32_t contextId;
    uint32_t streamId;
    void *reserved;
    uint32_t endDeviceId;
    uint32_t endContextId;
} MOCK_PACKED;

struct mock_resource_data {
    void *context;
    void *resourceHandle;
    void *resourceDescriptor;
};

struct mock_graph_data {
    void *graph;
    void *originalGraph;
    void *node;
    void *originalNode;
    uint32_t nodeType;
    void *dependency;
    void *graphExec;
};

_Static_assert(sizeof(struct mock_kernel9) == 208, "CUpti_ActivityKernel9 is 208 bytes");
_Static_assert(sizeof(struct mock_kernel10) == 216, "CUpti_ActivityKernel10 is 216 bytes");
_Static_assert(sizeof(struct mock_memcpy5) == 88, "CUpti_ActivityMemcpy5 is 88 bytes");
_Static_assert(sizeof(struct mock_memcpy6) == 96, "CUpti_ActivityMemcpy6 is 96 bytes");
_Static_assert(sizeof(struct mock_memset4) == 88, "CUpti_ActivityMemset4 is 88 bytes");
_Static_assert(sizeof(struct mock_api) == 40, "CUpti_ActivityAPI is 40 bytes");
_Static_assert(sizeof(struct mock_sync) == 40, "CUpti_ActivitySynchronization is 40 bytes");
_Static_assert(sizeof(struct mock_sync2) == 56, "CUpti_ActivitySynchronization2 is 56 bytes");
_Static_assert(sizeof(struct mock_overhead) == 40, "CUpti_ActivityOverhead is 40 bytes");
_Static_assert(sizeof(struct mock_overhead3) == 56, "CUpti_ActivityOverhead3 is 56 bytes");
_Static_assert(sizeof(struct mock_graph_trace2) == 56, "CUpti_ActivityGraphTrace2 is 56 bytes");
_Static_assert(sizeof(struct mock_callback_data) == 72, "CUpti_CallbackData is 72 bytes");
_Static_assert(sizeof(struct mock_graph_data) == 56, "CUpti_GraphData is 56 bytes");

#endif /* SPECPROF_MOCK_LAYOUTS_H */
