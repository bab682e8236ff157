/*
 * simgpu.h — extension API of specprof's simulated GPU (the stand-in libcuda.so.1).
 *
 * The stand-in exports these next to the CUDA driver entry points. Workloads use them to label
 * their calls (simgpu_set_tag) and to set kernel durations; the stand-in libnccl.so.2 uses them
 * to write its ground-truth lines; a mock CUPTI uses the observer hooks to learn every API call
 * and every GPU operation, exactly as the ground-truth file records them.
 *
 * Simulation knobs (environment, read once at the first call into the library):
 *   SPECPROF_SIM_DEVICES              number of devices (default 1, at most 16)
 *   SPECPROF_SIM_KERNEL_NS            default kernel duration (default 10000)
 *   SPECPROF_SIM_LAUNCH_LATENCY_NS    submit-to-start latency of a GPU operation (default 4000)
 *   SPECPROF_SIM_GRAPH_NODE_GAP_NS    gap between consecutive nodes of a graph replay (default 1000)
 *   SPECPROF_SIM_QUEUE_GAP_NS         gap between an operation and the one queued behind it on its
 *                                     stream, the GPU's hand-over (default 0)
 *   SPECPROF_SIM_COPY_BYTES_PER_US    copy/memset bandwidth in bytes per µs (default 20000)
 *   SPECPROF_SIM_LEGACY_BARRIER       1: the legacy default stream synchronizes with blocking streams
 *                                     like the real one (default 0: every stream is independent)
 *   SPECPROF_SIM_TRUTH                path of the ground-truth JSON-lines file (appended to)
 * (libnccl.so.2 reads SPECPROF_SIM_NCCL_BASE_NS, default 8000, and SPECPROF_SIM_NCCL_BYTES_PER_US,
 * default 100000.)
 *
 * Simulation: a GPU operation submitted at `now` on stream s runs from
 * start = max(now + launch latency, s.free_at) to start + duration, and s.free_at = end. Handle 0 is
 * the legacy default stream; CU_STREAM_PER_THREAD and stream 0 in the _ptsz/_ptds variants are the
 * calling thread's per-thread default stream. Kernels last their function's duration; copies and
 * memsets max(1000, bytes * 1000 / SPECPROF_SIM_COPY_BYTES_PER_US) ns; sync calls sleep until the
 * simulated end. An event completes at max(record time + latency, s.free_at).
 *
 * Truth file (SPECPROF_SIM_TRUTH): one JSON object per line, buffered, flushed at exit, when 1 MiB
 * is pending, before fork() and by simgpu_flush_truth(). Times are CLOCK_MONOTONIC ns.
 *   {"kind":"api","corr","api","pid","tid","enter","exit","stream","result","parent","tag"}
 *       every call of an exported cu* function (stream: the argument as passed, 0 if none;
 *       parent: the runtime call it was made in, 0 if none)
 *   {"kind":"rtapi", same without "parent"}   every call of the stand-in libcudart.so
 *   {"kind":"kernel","corr","api","name","stream","stream_id","device","context","submit","start",
 *    "end","graph_id","graph_exec_id","node_id","grid":[x,y,z],"block":[x,y,z],"shared_mem","pid",
 *    "tid","tag","capture_tag"}
 *       corr/api/tid/tag: the launching call (cuGraphLaunch for all nodes of a replay; the runtime
 *       call when the launch was made in one); stream: the
 *       resolved stream (0 = legacy, otherwise the handle; a per-thread default stream reports its
 *       simulator object's address); graph ids 0 outside replays; capture_tag: tag at capture time
 *   {"kind":"memcpy","corr","api","bytes","copy_kind":"HtoD"|"DtoH","stream","stream_id","device",
 *    "context","submit","start","end","pid","tid","tag"}
 *   {"kind":"memset", ... same with "value" instead of "copy_kind"}
 *   {"kind":"graph_node","corr","api","graph_id","node_id","name","duration","stream","stream_id",
 *    "grid","block","shared_mem","pid","tid","tag"}       a kernel captured into a graph
 *   {"kind":"coll","op","redop","count","dtype","bytes","comm","nranks","rank","stream","peer","root",
 *    "kernel","kernel_corr","kernel_duration","enter","grouped","pid","tid","tag"}   (libnccl.so.2)
 *       bytes: count * size, times nranks for AllGather (count = sendcount) and ReduceScatter
 *       (count = recvcount); kernel_corr: the cuLaunchKernelEx call that launched its kernel
 */
#ifndef SPECPROF_STANDIN_SIMGPU_H
#define SPECPROF_STANDIN_SIMGPU_H

#include <stdint.h>

#include "cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIMGPU_ABI_VERSION 1

/* Kinds of GPU operation (simgpu_gpu_rec.kind). */
typedef enum simgpu_op_kind {
    SIMGPU_OP_KERNEL = 1,
    SIMGPU_OP_MEMCPY = 2,
    SIMGPU_OP_MEMSET = 3
} simgpu_op_kind;

/* One driver API call; mirrors the truth file's {"kind":"api"} line. exit and result are 0 in
 * api_enter. */
typedef struct simgpu_api_rec {
    uint64_t corr;     /* correlation id: a global counter, one per API call, from 1 */
    const char *api;   /* exported name, e.g. "cuLaunchKernel_ptsz" */
    uint32_t pid;
    uint32_t tid;      /* gettid() */
    uint64_t enter;    /* CLOCK_MONOTONIC ns */
    uint64_t exit;     /* CLOCK_MONOTONIC ns */
    uint64_t stream;   /* the stream argument as passed (0 when the call takes none) */
    int result;        /* CUresult returned (runtime calls: their cudaError_t) */
    const char *tag;   /* thread tag (simgpu_set_tag), "" when unset */
    uint64_t parent;   /* driver calls: the runtime call they were made in (its corr), 0 if none */
} simgpu_api_rec;

/* One GPU operation (kernel, copy, memset); mirrors the truth file's kernel/memcpy/memset lines. */
typedef struct simgpu_gpu_rec {
    simgpu_op_kind kind;
    uint64_t corr;           /* correlation id of the launching API call */
    const char *api;         /* name of the launching API call */
    const char *name;        /* kernel name (NULL for copies and memsets) */
    uint64_t stream;         /* resolved stream handle value: 0 = legacy default stream */
    uint32_t stream_id;      /* unique stream id (legacy streams included), from 1 */
    int device;
    uint64_t context;        /* context handle value */
    uint64_t submit;         /* "now" used by the scheduler */
    uint64_t start;          /* CLOCK_MONOTONIC ns */
    uint64_t end;
    uint64_t graph_id;       /* 0 outside graph replays */
    uint64_t graph_exec_id;  /* 0 outside graph replays */
    uint32_t node_id;        /* 1..n within its graph; 0 outside graph replays */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_mem;
    uint64_t bytes;          /* copies and memsets */
    const char *copy_kind;   /* "HtoD" / "DtoH" for copies, NULL otherwise */
    uint32_t value;          /* memset byte value */
    uint32_t pid;
    uint32_t tid;            /* thread of the launching call */
    const char *tag;         /* its thread tag */
    const char *capture_tag; /* graph replays: the tag of the thread that captured the node */
} simgpu_gpu_rec;

/* A kernel node appended to a graph during stream capture; mirrors {"kind":"graph_node"}. */
typedef struct simgpu_graph_node_rec {
    uint64_t graph_id;
    uint32_t node_id;
    uint64_t corr;         /* the capturing launch call */
    const char *api;
    const char *name;
    uint64_t duration;     /* ns, frozen at capture time */
    uint32_t pid;
    uint32_t tid;
    const char *tag;
} simgpu_graph_node_rec;

/* Read-only observer hooks for a mock CUPTI. Any member may be NULL. Hooks run on the calling
 * thread, outside the simulator's lock (they may call the extension API but must not block for
 * long); the pointers in the records are valid only during the hook. api_enter runs at the start
 * of every API call, api_exit at its end (after the call's gpu_op hooks). gpu_op runs once per
 * GPU operation as soon as it is scheduled (its start/end lie in the future for asynchronous work).
 * Zero-initialize the struct (later versions may append members). */
typedef struct simgpu_observer {
    void (*api_enter)(const struct simgpu_api_rec *);
    void (*api_exit)(const struct simgpu_api_rec *);
    void (*gpu_op)(const struct simgpu_gpu_rec *);
    void (*graph_node)(const struct simgpu_graph_node_rec *);
    /* A runtime call (the stand-in libcudart's) begins and ends: see simgpu_runtime_enter. */
    void (*runtime_enter)(const struct simgpu_api_rec *);
    void (*runtime_exit)(const struct simgpu_api_rec *);
} simgpu_observer;

/* Simulation parameters in effect (after the environment was read). */
typedef struct simgpu_config {
    int devices;
    uint64_t kernel_ns;
    uint64_t launch_latency_ns;
    uint64_t graph_node_gap_ns;
    uint64_t copy_bytes_per_us;
    int legacy_barrier;
    uint64_t queue_gap_ns;
} simgpu_config;

/* Registers an observer (the struct is copied). Returns 0, or -1 when full (8) or obs is NULL. */
int simgpu_register_observer(const simgpu_observer *obs);

/* The stand-in libcudart.so (libcudart.c) brackets each of its calls with these: enter returns the
 * runtime call's correlation id (from the driver calls' counter; 0 if the thread is already in a
 * runtime call), exit ends it. Driver calls made in between carry it as their parent, the GPU work
 * they make carries it as its corr and its name as its api (as CUPTI gives the kernels of
 * cudaLaunchKernel the runtime call's correlation id), and exit writes a {"kind":"rtapi"} truth line
 * shaped like an "api" line. */
uint64_t simgpu_runtime_enter(const char *api, CUstream stream);
void simgpu_runtime_exit(uint64_t corr, int result);

/* Sets the calling thread's tag (truncated to 63 bytes; NULL clears it). */
void simgpu_set_tag(const char *tag);
/* The calling thread's tag ("" when unset); valid until the thread changes it. */
const char *simgpu_get_tag(void);

/* Sets the duration of every future launch of f (graph nodes keep the duration they were
 * captured with). Returns CUDA_ERROR_INVALID_HANDLE for an unknown function. */
CUresult simgpu_set_function_duration(CUfunction f, uint64_t ns);
/* Current duration of f, or 0 for an unknown function. */
uint64_t simgpu_get_function_duration(CUfunction f);

/* Correlation id of the last API call made by the calling thread (0 before any). */
uint64_t simgpu_last_correlation_id(void);

/* When the given stream drains (its FIFO timeline's free_at, CLOCK_MONOTONIC ns); 0 for an unknown
 * stream. Stream handles are interpreted like cuStreamSynchronize's (0 = legacy). */
uint64_t simgpu_stream_free_at(CUstream s);

/* Copies the configuration in effect into *cfg. */
void simgpu_get_config(simgpu_config *cfg);

/* Appends one line (a JSON object, without the newline) to the truth file, if one is open.
 * Newlines inside json are replaced by spaces. */
void simgpu_truth_line(const char *json);

/* Writes buffered truth lines to the file now. */
void simgpu_flush_truth(void);

#ifdef __cplusplus
}
#endif

#endif /* SPECPROF_STANDIN_SIMGPU_H */
