/*
 * cupti_min.h — the few CUPTI declarations libspecprof_cupti.so uses, written from NVIDIA's
 * published headers (cupti_activity.h, cupti_callbacks.h, cupti_result.h) so the library builds
 * without any CUDA or CUPTI header installed. Every name is ours (spc_ prefix) so that
 * cupti/layoutcheck/layout_check.c can include this file next to the real cupti.h and assert that
 * each offset and size below equals NVIDIA's.
 *
 * Activity records: CUPTI versions its record structs (CUpti_ActivityKernel8, 9, 10, ...) by
 * appending fields, so the fields we read sit at the same offsets in every version we support.
 * We declare only the prefix we read (spc_*_prefix) and, for documentation and the layout check,
 * the full size of each version:
 *
 *   record (kind)                  11.8 / 12.0-12.9 (API 18-28)        13.0 (API 130000-130099)
 *   CONCURRENT_KERNEL              Kernel8 200 B (11.8), Kernel9 208 B  Kernel10 216 B
 *   MEMCPY                         Memcpy5 88 B (<= 12.6), Memcpy6 96 B Memcpy6 96 B
 *   MEMSET                         Memset4 88 B                         Memset4 88 B
 *   DRIVER (CUpti_ActivityAPI)     40 B                                 40 B
 *   SYNCHRONIZATION                Synchronization 40 B (Synchronization2 56 B from 12.8)
 *                                                                       Synchronization2 56 B
 *   OVERHEAD                       Overhead 40 B (<= 12.3), Overhead3 56 B (12.4+)
 *                                                                       Overhead3 56 B
 * Records are 8-byte aligned in CUPTI's buffers ("PACKED_ALIGNMENT": packed, aligned(8)).
 */
#ifndef SPECPROF_CUPTI_MIN_H
#define SPECPROF_CUPTI_MIN_H

#include <stddef.h>
#include <stdint.h>

typedef int spc_result;          /* CUptiResult */
typedef void *spc_subscriber;    /* CUpti_SubscriberHandle */
typedef uint32_t spc_cbid;       /* CUpti_CallbackId */
typedef void *spc_cucontext;     /* CUcontext */

/* CUptiResult values we test for. */
enum {
    SPC_SUCCESS = 0,
    SPC_ERROR_MAX_LIMIT_REACHED = 12,
    SPC_ERROR_NOT_INITIALIZED = 15,
    SPC_ERROR_NOT_SUPPORTED = 27,
    SPC_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39
};

/* CUpti_ActivityKind values. */
enum {
    SPC_KIND_MEMCPY = 1,
    SPC_KIND_MEMSET = 2,
    SPC_KIND_DRIVER = 4,
    SPC_KIND_RUNTIME = 5,
    SPC_KIND_CONCURRENT_KERNEL = 10,
    SPC_KIND_OVERHEAD = 17,
    SPC_KIND_SYNCHRONIZATION = 38,
    SPC_KIND_GRAPH_TRACE = 51
};

/* CUpti_ActivityFlag: CUPTI_ACTIVITY_FLAG_FLUSH_FORCED. */
#define SPC_FLUSH_FORCED 1u

/* CUpti_ActivityThreadIdType: CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM (gettid on Linux). */
#define SPC_THREAD_ID_TYPE_SYSTEM 1u

/* CUpti_CallbackDomain, CUpti_ApiCallbackSite, CUpti_CallbackIdResource. */
enum { SPC_DOMAIN_DRIVER_API = 1, SPC_DOMAIN_RUNTIME_API = 2, SPC_DOMAIN_RESOURCE = 3 };
enum { SPC_API_ENTER = 0, SPC_API_EXIT = 1 };
enum { SPC_CBID_RESOURCE_GRAPHNODE_CREATED = 13, SPC_CBID_RESOURCE_GRAPHNODE_CLONED = 20 };

/* CUpti_Activity: every record starts with its kind. */
struct spc_activity {
    uint32_t kind;
};

/* CUpti_ActivityKernel8/9/10, up to graphId (offset 156). */
struct spc_kernel_prefix {
    uint32_t kind;                     /*   0 */
    uint8_t cacheConfig;               /*   4 */
    uint8_t sharedMemoryConfig;        /*   5 */
    uint16_t registersPerThread;       /*   6 */
    uint32_t partitionedGlobalCacheRequested; /* 8 */
    uint32_t partitionedGlobalCacheExecuted;  /* 12 */
    uint64_t start;                    /*  16 */
    uint64_t end;                      /*  24 */
    uint64_t completed;                /*  32 */
    uint32_t deviceId;                 /*  40 */
    uint32_t contextId;                /*  44 */
    uint32_t streamId;                 /*  48 */
    int32_t gridX, gridY, gridZ;       /*  52 56 60 */
    int32_t blockX, blockY, blockZ;    /*  64 68 72 */
    int32_t staticSharedMemory;        /*  76 */
    int32_t dynamicSharedMemory;       /*  80 */
    uint32_t localMemoryPerThread;     /*  84 */
    uint32_t localMemoryTotal;         /*  88 */
    uint32_t correlationId;            /*  92 */
    int64_t gridId;                    /*  96 */
    const char *name;                  /* 104 */
    void *reserved0;                   /* 112 */
    uint64_t queued;                   /* 120 */
    uint64_t submitted;                /* 128 */
    uint8_t launchType;                /* 136 */
    uint8_t isSharedMemoryCarveoutRequested; /* 137 */
    uint8_t sharedMemoryCarveoutRequested;   /* 138 */
    uint8_t padding;                   /* 139 */
    uint32_t sharedMemoryExecuted;     /* 140 */
    uint64_t graphNodeId;              /* 144 */
    uint32_t shmemLimitConfig;         /* 152 */
    uint32_t graphId;                  /* 156 */
} __attribute__((packed, aligned(8)));

/* CUpti_ActivityMemcpy5/6, up to graphId (offset 72). */
struct spc_memcpy_prefix {
    uint32_t kind;                 /*  0 */
    uint8_t copyKind;              /*  4 */
    uint8_t srcKind;               /*  5 */
    uint8_t dstKind;               /*  6 */
    uint8_t flags;                 /*  7 */
    uint64_t bytes;                /*  8 */
    uint64_t start;                /* 16 */
    uint64_t end;                  /* 24 */
    uint32_t deviceId;             /* 32 */
    uint32_t contextId;            /* 36 */
    uint32_t streamId;             /* 40 */
    uint32_t correlationId;        /* 44 */
    uint32_t runtimeCorrelationId; /* 48 */
    uint32_t pad;                  /* 52 */
    void *reserved0;               /* 56 */
    uint64_t graphNodeId;          /* 64 */
    uint32_t graphId;              /* 72 */
} __attribute__((packed, aligned(8)));

/* CUpti_ActivityMemset4, up to graphId (offset 72). */
struct spc_memset_prefix {
    uint32_t kind;          /*  0 */
    uint32_t value;         /*  4 */
    uint64_t bytes;         /*  8 */
    uint64_t start;         /* 16 */
    uint64_t end;           /* 24 */
    uint32_t deviceId;      /* 32 */
    uint32_t contextId;     /* 36 */
    uint32_t streamId;      /* 40 */
    uint32_t correlationId; /* 44 */
    uint16_t flags;         /* 48 */
    uint16_t memoryKind;    /* 50 */
    uint32_t pad;           /* 52 */
    void *reserved0;        /* 56 */
    uint64_t graphNodeId;   /* 64 */
    uint32_t graphId;       /* 72 */
} __attribute__((packed, aligned(8)));

/* CUpti_ActivityAPI (driver and runtime kinds), complete. */
struct spc_api {
    uint32_t kind;          /*  0 */
    uint32_t cbid;          /*  4 */
    uint64_t start;         /*  8 */
    uint64_t end;           /* 16 */
    uint32_t processId;     /* 24 */
    uint32_t threadId;      /* 28 */
    uint32_t correlationId; /* 32 */
    uint32_t returnValue;   /* 36 */
} __attribute__((packed, aligned(8)));

/* CUpti_ActivitySynchronization(2), up to cudaEventId (offset 36). */
struct spc_sync_prefix {
    uint32_t kind;          /*  0 */
    uint32_t type;          /*  4 */
    uint64_t start;         /*  8 */
    uint64_t end;           /* 16 */
    uint32_t correlationId; /* 24 */
    uint32_t contextId;     /* 28 */
    uint32_t streamId;      /* 32 */
    uint32_t cudaEventId;   /* 36 */
} __attribute__((packed, aligned(8)));

/* CUpti_ActivityOverhead(3), up to end (offset 32). objectId is CUpti_ActivityObjectKindId, a
 * 12-byte union: {processId, threadId} or {deviceId, contextId, streamId}. */
struct spc_overhead_prefix {
    uint32_t kind;         /*  0 */
    uint32_t overheadKind; /*  4 */
    uint32_t objectKind;   /*  8 */
    uint32_t objectId[3];  /* 12 */
    uint64_t start;        /* 24 */
    uint64_t end;          /* 32 */
} __attribute__((packed, aligned(8)));

/* CUpti_ActivityGraphTrace (CUDA 11.7) / CUpti_ActivityGraphTrace2 (12.3+): the same fields up to
 * streamId; version 2 appends fields after them. */
struct spc_graph_trace_prefix {
    uint32_t kind;          /*  0 */
    uint32_t correlationId; /*  4 */
    uint64_t start;         /*  8 */
    uint64_t end;           /* 16 */
    uint32_t deviceId;      /* 24 */
    uint32_t graphId;       /* 28 */
    uint32_t contextId;     /* 32 */
    uint32_t streamId;      /* 36 */
} __attribute__((packed, aligned(8)));

/* CUpti_CallbackData (driver/runtime API callbacks). */
struct spc_callback_data {
    uint32_t callbackSite;           /*  0: SPC_API_ENTER / SPC_API_EXIT */
    const char *functionName;        /*  8 */
    const void *functionParams;      /* 16 */
    void *functionReturnValue;       /* 24 */
    const char *symbolName;          /* 32 */
    spc_cucontext context;           /* 40 */
    uint32_t contextUid;             /* 48 */
    uint64_t *correlationData;       /* 56 */
    uint32_t correlationId;          /* 64 */
};

/* CUpti_ResourceData. */
struct spc_resource_data {
    spc_cucontext context;     /*  0 */
    void *resourceHandle;      /*  8: union { CUstream stream; } */
    void *resourceDescriptor;  /* 16: CUpti_GraphData * for the graph callbacks */
};

/* CUpti_GraphData. */
struct spc_graph_data {
    void *graph;          /*  0 CUgraph */
    void *originalGraph;  /*  8 */
    void *node;           /* 16 CUgraphNode */
    void *originalNode;   /* 24 */
    uint32_t nodeType;    /* 32 CUgraphNodeType */
    void *dependency;     /* 40 */
    void *graphExec;      /* 48 CUgraphExec */
};

_Static_assert(offsetof(struct spc_kernel_prefix, registersPerThread) == 6, "Kernel.registersPerThread");
_Static_assert(offsetof(struct spc_kernel_prefix, start) == 16, "Kernel.start");
_Static_assert(offsetof(struct spc_kernel_prefix, end) == 24, "Kernel.end");
_Static_assert(offsetof(struct spc_kernel_prefix, deviceId) == 40, "Kernel.deviceId");
_Static_assert(offsetof(struct spc_kernel_prefix, contextId) == 44, "Kernel.contextId");
_Static_assert(offsetof(struct spc_kernel_prefix, streamId) == 48, "Kernel.streamId");
_Static_assert(offsetof(struct spc_kernel_prefix, gridX) == 52, "Kernel.gridX");
_Static_assert(offsetof(struct spc_kernel_prefix, blockX) == 64, "Kernel.blockX");
_Static_assert(offsetof(struct spc_kernel_prefix, staticSharedMemory) == 76, "Kernel.staticSharedMemory");
_Static_assert(offsetof(struct spc_kernel_prefix, dynamicSharedMemory) == 80, "Kernel.dynamicSharedMemory");
_Static_assert(offsetof(struct spc_kernel_prefix, correlationId) == 92, "Kernel.correlationId");
_Static_assert(offsetof(struct spc_kernel_prefix, name) == 104, "Kernel.name");
_Static_assert(offsetof(struct spc_kernel_prefix, graphNodeId) == 144, "Kernel.graphNodeId");
_Static_assert(offsetof(struct spc_kernel_prefix, graphId) == 156, "Kernel.graphId");
_Static_assert(sizeof(struct spc_kernel_prefix) == 160, "Kernel prefix");
_Static_assert(offsetof(struct spc_memcpy_prefix, bytes) == 8, "Memcpy.bytes");
_Static_assert(offsetof(struct spc_memcpy_prefix, start) == 16, "Memcpy.start");
_Static_assert(offsetof(struct spc_memcpy_prefix, deviceId) == 32, "Memcpy.deviceId");
_Static_assert(offsetof(struct spc_memcpy_prefix, correlationId) == 44, "Memcpy.correlationId");
_Static_assert(offsetof(struct spc_memcpy_prefix, graphNodeId) == 64, "Memcpy.graphNodeId");
_Static_assert(offsetof(struct spc_memcpy_prefix, graphId) == 72, "Memcpy.graphId");
_Static_assert(sizeof(struct spc_memcpy_prefix) == 80, "Memcpy prefix");
_Static_assert(offsetof(struct spc_memset_prefix, start) == 16, "Memset.start");
_Static_assert(offsetof(struct spc_memset_prefix, correlationId) == 44, "Memset.correlationId");
_Static_assert(offsetof(struct spc_memset_prefix, memoryKind) == 50, "Memset.memoryKind");
_Static_assert(offsetof(struct spc_memset_prefix, graphNodeId) == 64, "Memset.graphNodeId");
_Static_assert(offsetof(struct spc_memset_prefix, graphId) == 72, "Memset.graphId");
_Static_assert(sizeof(struct spc_memset_prefix) == 80, "Memset prefix");
_Static_assert(offsetof(struct spc_api, start) == 8, "API.start");
_Static_assert(offsetof(struct spc_api, correlationId) == 32, "API.correlationId");
_Static_assert(sizeof(struct spc_api) == 40, "CUpti_ActivityAPI");
_Static_assert(offsetof(struct spc_sync_prefix, start) == 8, "Synchronization.start");
_Static_assert(offsetof(struct spc_sync_prefix, cudaEventId) == 36, "Synchronization.cudaEventId");
_Static_assert(sizeof(struct spc_sync_prefix) == 40, "Synchronization prefix");
_Static_assert(offsetof(struct spc_overhead_prefix, objectId) == 12, "Overhead.objectId");
_Static_assert(offsetof(struct spc_overhead_prefix, start) == 24, "Overhead.start");
_Static_assert(sizeof(struct spc_overhead_prefix) == 40, "Overhead prefix");
_Static_assert(offsetof(struct spc_graph_trace_prefix, streamId) == 36, "GraphTrace.streamId");
_Static_assert(sizeof(struct spc_graph_trace_prefix) == 40, "GraphTrace prefix");
_Static_assert(offsetof(struct spc_callback_data, correlationId) == 64, "CallbackData.correlationId");
_Static_assert(offsetof(struct spc_resource_data, resourceDescriptor) == 16, "ResourceData.resourceDescriptor");
_Static_assert(offsetof(struct spc_graph_data, nodeType) == 32, "GraphData.nodeType");
_Static_assert(sizeof(struct spc_graph_data) == 56, "CUpti_GraphData");

/* Callback types (CUpti_CallbackFunc, CUpti_BuffersCallbackRequestFunc,
 * CUpti_BuffersCallbackCompleteFunc, CUpti_TimestampCallbackFunc). */
typedef void (*spc_callback_fn)(void *userdata, uint32_t domain, spc_cbid cbid, const void *cbdata);
typedef void (*spc_buffer_request_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*spc_buffer_complete_fn)(spc_cucontext ctx, uint32_t streamId, uint8_t *buffer, size_t size,
                                       size_t validSize);
typedef uint64_t (*spc_timestamp_fn)(void);

/* The CUPTI entry points we resolve with dlsym (prototypes as in cupti_*.h). */
struct spc_api_table {
    spc_result (*GetVersion)(uint32_t *version);
    spc_result (*GetResultString)(spc_result result, const char **str);
    spc_result (*Subscribe)(spc_subscriber *subscriber, spc_callback_fn callback, void *userdata);
    spc_result (*Unsubscribe)(spc_subscriber subscriber);
    spc_result (*EnableCallback)(uint32_t enable, spc_subscriber subscriber, uint32_t domain, spc_cbid cbid);
    spc_result (*ActivityRegisterCallbacks)(spc_buffer_request_fn request, spc_buffer_complete_fn complete);
    spc_result (*ActivityRegisterTimestampCallback)(spc_timestamp_fn fn); /* optional (CUDA 11.6+) */
    spc_result (*ActivityEnable)(uint32_t kind);
    spc_result (*ActivityDisable)(uint32_t kind);
    spc_result (*ActivityFlushAll)(uint32_t flag);
    spc_result (*ActivityGetNextRecord)(uint8_t *buffer, size_t validBufferSizeBytes, struct spc_activity **record);
    spc_result (*ActivityGetNumDroppedRecords)(spc_cucontext context, uint32_t streamId, size_t *dropped);
    spc_result (*GetTimestamp)(uint64_t *timestamp);
    spc_result (*GetGraphId)(void *graph, uint32_t *id);         /* optional */
    spc_result (*GetGraphNodeId)(void *node, uint64_t *id);      /* optional */
    spc_result (*SetThreadIdType)(uint32_t type);                /* optional */
    spc_result (*ActivityEnableDriverApi)(spc_cbid cbid, uint8_t enable);  /* optional (12.5+) */
    spc_result (*ActivityEnableRuntimeApi)(spc_cbid cbid, uint8_t enable); /* optional (12.5+) */
    spc_result (*EnableDomain)(uint32_t enable, spc_subscriber subscriber, uint32_t domain); /* optional */
    spc_result (*Finalize)(void); /* optional (11.0+): detach, SPECPROF_CUPTI_DETACH */
};

#endif /* SPECPROF_CUPTI_MIN_H */
