/*
 * simdriver.c — exercises the stand-in libcuda.so.1 / libnccl.so.2 for standin_test.go.
 * Usage: simdriver SCENARIO. Writes one JSON object of measurements to stdout; the simulator
 * writes its ground truth to $SPECPROF_SIM_TRUTH.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda.h"
#include "nccl.h"
#include "simgpu.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define CK(call)                                                                     \
    do {                                                                             \
        CUresult rc_ = (call);                                                       \
        if (rc_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)rc_); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define NK(call)                                                                     \
    do {                                                                             \
        ncclResult_t rc_ = (call);                                                   \
        if (rc_ != ncclSuccess) {                                                    \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)rc_); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static CUcontext ctx;
static CUmodule mod;

static void setup(void) {
    CUdevice dev;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, "fake cubin"));
}

static CUfunction func(const char *name, uint64_t ns) {
    CUfunction f;
    CK(cuModuleGetFunction(&f, mod, name));
    CK(simgpu_set_function_duration(f, ns));
    return f;
}

static void launch(CUfunction f, CUstream s) { CK(cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, s, NULL, NULL)); }

static void fifo(void) {
    CUstream s1;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CUfunction f = func("k_fifo", 20000000); /* 20 ms */
    simgpu_set_tag("fifo");
    launch(f, s1);
    launch(f, s1);
    launch(f, s1);
    CUfunction g = func("k_legacy", 300000);
    launch(g, NULL);                                                /* legacy default stream */
    CK(cuLaunchKernel_ptsz(g, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL)); /* per-thread default stream */
    CK(cuLaunchKernel(g, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, NULL, NULL));
    CK(cuCtxSynchronize());
    printf("{\"stream\":%llu}\n", (unsigned long long)(uintptr_t)s1);
}

static void overlap(void) {
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, 0));
    CK(cuStreamCreateWithPriority(&s2, 0, -1));
    CUfunction f = func("k_a", 50000000), g = func("k_b", 50000000);
    simgpu_set_tag("overlap");
    launch(f, s1);
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = 4;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 256;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = s2;
    CK(cuLaunchKernelEx(&cfg, g, NULL, NULL));
    CK(cuStreamSynchronize(s1));
    CK(cuStreamSynchronize(s2));
    printf("{\"s1\":%llu,\"s2\":%llu}\n", (unsigned long long)(uintptr_t)s1, (unsigned long long)(uintptr_t)s2);
}

static void graph(void) {
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUfunction a = func("fmha_fwd", 100000), b = func("gemm", 50000), c = func("rmsnorm", 30000);
    simgpu_set_tag("capture");
    CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUstreamCaptureStatus st;
    CK(cuStreamIsCapturing(s, &st));
    int capturing = st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    launch(a, s);
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = s;
    CK(cuLaunchKernelEx(&cfg, b, NULL, NULL));
    launch(c, s);
    CUresult syncDuringCapture = cuStreamSynchronize(s);
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    /* durations frozen at capture */
    CK(simgpu_set_function_duration(a, 999999999));
    CUgraphExec x;
    CK(cuGraphInstantiateWithFlags(&x, g, 0));
    simgpu_set_tag("replay");
    CK(cuGraphLaunch(x, s));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    printf("{\"capturing\":%d,\"sync_during_capture\":%d}\n", capturing, (int)syncDuringCapture);
}

static void syncs(void) {
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUfunction f = func("k_sync", 20000000), h = func("k_half", 10000000);
    simgpu_set_tag("stream_sync");
    uint64_t t0 = now_ns();
    launch(f, s1);
    CK(cuStreamSynchronize(s1));
    uint64_t t1 = now_ns();

    simgpu_set_tag("event_sync");
    CUevent e0, e1;
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    CK(cuEventRecord(e0, s2));
    launch(h, s2);
    CK(cuEventRecord(e1, s2));
    CUresult q0 = cuEventQuery(e1);
    uint64_t t2 = now_ns();
    CK(cuEventSynchronize(e1));
    uint64_t t3 = now_ns();
    CUresult q1 = cuEventQuery(e1);
    float ms = -1;
    CK(cuEventElapsedTime(&ms, e0, e1));

    simgpu_set_tag("wait_event");
    launch(h, s1);
    CK(cuEventRecord(e0, s1));
    CK(cuStreamWaitEvent(s2, e0, 0));
    launch(h, s2); /* must start after the s1 kernel */

    simgpu_set_tag("ctx_sync");
    launch(f, s1);
    uint64_t t4 = now_ns();
    CK(cuCtxSynchronize());
    uint64_t t5 = now_ns();
    launch(h, s2);
    CK(cuCtxSynchronize_v2(NULL));
    CUresult sq = cuStreamQuery(s2);
    printf("{\"stream_sync_wall\":%llu,\"event_query_before\":%d,\"event_sync_wall\":%llu,\"event_query_after\":%d,"
           "\"elapsed_ms\":%.6f,\"ctx_sync_wall\":%llu,\"t0\":%llu,\"t1\":%llu,\"t2\":%llu,\"t3\":%llu,\"t4\":%llu,"
           "\"t5\":%llu,\"stream_query_after\":%d,\"s1\":%llu,\"s2\":%llu}\n",
           (unsigned long long)(t1 - t0), (int)q0, (unsigned long long)(t3 - t2), (int)q1, ms,
           (unsigned long long)(t5 - t4), (unsigned long long)t0, (unsigned long long)t1, (unsigned long long)t2,
           (unsigned long long)t3, (unsigned long long)t4, (unsigned long long)t5, (int)sq,
           (unsigned long long)(uintptr_t)s1, (unsigned long long)(uintptr_t)s2);
}

static void dtoh(void) {
    const size_t n = 1 << 20;
    unsigned char *src = malloc(n), *dst = malloc(n), *dst2 = malloc(n);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 7 + 3);
    CUdeviceptr d;
    CK(cuMemAlloc_v2(&d, n));
    simgpu_set_tag("htod");
    CK(cuMemcpyHtoD_v2(d, src, n));
    CUfunction f = func("k_before_copy", 10000000);
    simgpu_set_tag("dtoh");
    launch(f, NULL);
    uint64_t t0 = now_ns();
    CK(cuMemcpyDtoH_v2(dst, d, n));
    uint64_t t1 = now_ns();
    int same = memcmp(src, dst, n) == 0;

    simgpu_set_tag("async");
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemsetD8_v2(d, 0xab, n / 2));
    launch(f, s);
    uint64_t t2 = now_ns();
    CK(cuMemcpyDtoHAsync_v2(dst2, d, n, s));
    uint64_t t3 = now_ns();
    CK(cuStreamSynchronize(s));
    int memset_ok = dst2[0] == 0xab && dst2[n / 2 - 1] == 0xab && dst2[n / 2] == src[n / 2];
    CUresult bad_range = cuMemcpyDtoH_v2(dst, d + n - 10, 100);
    CK(cuMemFree_v2(d));
    CUresult double_free = cuMemFree_v2(d);
    printf("{\"sync_wall\":%llu,\"same\":%d,\"async_wall\":%llu,\"memset_ok\":%d,\"bad_range\":%d,\"double_free\":%d,"
           "\"bytes\":%zu}\n",
           (unsigned long long)(t1 - t0), same, (unsigned long long)(t3 - t2), memset_ok, (int)bad_range,
           (int)double_free, n);
}

static void nccl(void) {
    int ver = 0;
    NK(ncclGetVersion(&ver));
    ncclUniqueId id;
    NK(ncclGetUniqueId(&id));
    ncclComm_t comm;
    NK(ncclCommInitRank(&comm, 2, id, 0));
    int count = 0, rank = -1, dev = -1;
    NK(ncclCommCount(comm, &count));
    NK(ncclCommUserRank(comm, &rank));
    NK(ncclCommCuDevice(comm, &dev));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr buf;
    CK(cuMemAlloc_v2(&buf, 8 << 20));
    void *b = (void *)(uintptr_t)buf;
    simgpu_set_tag("allreduce");
    NK(ncclAllReduce(b, b, 1 << 20, ncclBfloat16, ncclSum, comm, s));
    simgpu_set_tag("allgather");
    NK(ncclAllGather(b, b, 1000, ncclFloat32, comm, s));
    simgpu_set_tag("reducescatter");
    NK(ncclReduceScatter(b, b, 4096, ncclFloat32, ncclMax, comm, s));
    simgpu_set_tag("broadcast");
    NK(ncclBroadcast(b, b, 100, ncclInt8, 1, comm, s));
    simgpu_set_tag("reduce");
    NK(ncclReduce(b, b, 5000, ncclFloat16, ncclProd, 0, comm, s));
    simgpu_set_tag("group");
    NK(ncclGroupStart());
    NK(ncclGroupStart());
    NK(ncclSend(b, 1000, ncclFloat32, 1, comm, s));
    NK(ncclRecv(b, 1000, ncclFloat32, 1, comm, s));
    NK(ncclGroupEnd());
    NK(ncclAllReduce(b, b, 10, ncclInt32, ncclMin, comm, NULL));
    uint64_t corr_before_end = simgpu_last_correlation_id();
    NK(ncclGroupEnd());
    ncclResult_t bad_comm = ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, (ncclComm_t)(uintptr_t)0x1234, s);
    ncclResult_t bad_type = ncclAllReduce(b, b, 1, (ncclDataType_t)42, ncclSum, comm, s);
    ncclResult_t bad_end = ncclGroupEnd();
    CK(cuStreamSynchronize(s));
    CK(cuCtxSynchronize());
    NK(ncclCommDestroy(comm));
    printf("{\"version\":%d,\"count\":%d,\"rank\":%d,\"device\":%d,\"corr_before_group_end\":%llu,\"bad_comm\":%d,"
           "\"bad_type\":%d,\"bad_end\":%d,\"stream\":%llu}\n",
           ver, count, rank, dev, (unsigned long long)corr_before_end, (int)bad_comm, (int)bad_type, (int)bad_end,
           (unsigned long long)(uintptr_t)s);
}

struct targ {
    const char *tag;
    int n;
    int ok;
};

static void *thread_main(void *p) {
    struct targ *a = p;
    simgpu_set_tag(a->tag);
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return NULL;
    CUfunction f;
    if (cuModuleGetFunction(&f, mod, a->tag) != CUDA_SUCCESS) return NULL;
    simgpu_set_function_duration(f, 20000);
    CUstream s;
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return NULL;
    for (int i = 0; i < a->n; i++) {
        if (cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) return NULL;
        if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS) return NULL;
    }
    if (cuStreamSynchronize_ptsz(NULL) != CUDA_SUCCESS) return NULL;
    if (cuStreamSynchronize(s) != CUDA_SUCCESS) return NULL;
    a->ok = 1;
    return NULL;
}

static void threads(void) {
    struct targ a = {"thread-A", 200, 0}, b = {"thread-B", 200, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, thread_main, &a);
    pthread_create(&tb, NULL, thread_main, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    printf("{\"ok_a\":%d,\"ok_b\":%d}\n", a.ok, b.ok);
}

/* Bad input: every call returns an error code; nothing crashes. */
static void badinput(void) {
    CUresult r[40];
    int n = 0;
    CUdevice dev;
    r[n++] = cuDeviceGet(&dev, 0); /* before cuInit: 3 */
    setup();
    r[n++] = cuDeviceGet(NULL, 0);
    r[n++] = cuDeviceGet(&dev, 7);
    r[n++] = cuStreamSynchronize((CUstream)(uintptr_t)0xdeadbeef);
    r[n++] = cuStreamDestroy_v2(NULL);
    r[n++] = cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    r[n++] = cuLaunchKernel((CUfunction)(uintptr_t)0x1000, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    r[n++] = cuLaunchKernelEx(NULL, NULL, NULL, NULL);
    r[n++] = cuEventSynchronize((CUevent)(uintptr_t)0x42);
    r[n++] = cuEventRecord(NULL, NULL);
    r[n++] = cuMemcpyDtoH_v2(NULL, 0, 10);
    char buf[16];
    r[n++] = cuMemcpyDtoH_v2(buf, (CUdeviceptr)(uintptr_t)buf, 16); /* not device memory */
    r[n++] = cuGraphLaunch((CUgraphExec)(uintptr_t)0x77, NULL);
    r[n++] = cuStreamEndCapture(NULL, NULL);
    r[n++] = cuModuleGetFunction(NULL, mod, "x");
    r[n++] = cuCtxSetCurrent((CUcontext)(uintptr_t)0x99);
    r[n++] = cuGetErrorString((CUresult)12345, NULL);
    const char *str = NULL;
    r[n++] = cuGetErrorString(CUDA_ERROR_NOT_READY, &str);
    r[n++] = cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL); /* legacy: 900 */
    r[n++] = cuMemAlloc_v2(NULL, 10);
    CUfunction f = func("k", 1000);
    r[n++] = cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    r[n++] = cuCtxSetCurrent(NULL);
    r[n++] = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL); /* no context: 201 */
    printf("{\"codes\":[");
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", (int)r[i]);
    printf("],\"not_ready_str\":\"%s\"}\n", str ? str : "");
}

static void procaddr(void) {
    setup();
    void *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL, *p5 = NULL, *p6 = NULL;
    CUdriverProcAddressQueryResult st = 99, st2 = 99;
    CK(cuGetProcAddress_v2("cuLaunchKernel", &p1, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CK(cuGetProcAddress_v2("cuLaunchKernel", &p2, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    CK(cuGetProcAddress("cuMemcpyDtoH", &p3, 13000, 0));
    CK(cuGetProcAddress("cuMemcpyDtoH", &p4, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
    CK(cuGetProcAddress("cuGraphInstantiate", &p5, 12000, 0));
    CUresult missing = cuGetProcAddress_v2("cuNoSuchFunction", &p6, 13000, 0, &st2);
    /* call through the returned pointer */
    CUresult (*drv)(int *) = NULL;
    CK(cuGetProcAddress("cuDriverGetVersion", (void **)&drv, 13000, 0));
    int v = 0;
    CK(drv(&v));
    printf("{\"launch\":%d,\"launch_pt\":%d,\"dtoh\":%d,\"dtoh_pt\":%d,\"inst\":%d,\"status\":%d,\"missing\":%d,"
           "\"missing_status\":%d,\"missing_null\":%d,\"version\":%d}\n",
           p1 == (void *)&cuLaunchKernel, p2 == (void *)&cuLaunchKernel_ptsz, p3 == (void *)&cuMemcpyDtoH_v2,
           p4 == (void *)&cuMemcpyDtoH_v2_ptds, p5 == (void *)&cuGraphInstantiateWithFlags, (int)st, (int)missing,
           (int)st2, p6 == NULL, v);
}

/* The injection library (CUDA_INJECTION64_PATH) registers an observer; it reports what it saw. */
static void inject(void) {
    setup();
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUfunction f = func("k_observed", 100000);
    simgpu_set_tag("observed");
    launch(f, s);
    launch(f, s);
    CK(cuStreamSynchronize(s));
    printf("{}\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: simdriver SCENARIO\n");
        return 2;
    }
    const char *sc = argv[1];
    if (strcmp(sc, "badinput") == 0) {
        badinput();
        return 0;
    }
    if (strcmp(sc, "procaddr") == 0) {
        procaddr();
        return 0;
    }
    if (strcmp(sc, "inject") == 0) {
        inject();
        return 0;
    }
    setup();
    if (strcmp(sc, "fifo") == 0)
        fifo();
    else if (strcmp(sc, "overlap") == 0)
        overlap();
    else if (strcmp(sc, "graph") == 0)
        graph();
    else if (strcmp(sc, "sync") == 0)
        syncs();
    else if (strcmp(sc, "dtoh") == 0)
        dtoh();
    else if (strcmp(sc, "nccl") == 0)
        nccl();
    else if (strcmp(sc, "threads") == 0)
        threads();
    else {
        fprintf(stderr, "unknown scenario %s\n", sc);
        return 2;
    }
    return 0;
}
