/*
 * mockcupti.c — a mock libcupti.so for CI (no GPU): the CUPTI entry points libspecprof_cupti.so
 * uses, driven by specprof's simulated GPU (the stand-in libcuda.so.1, testdata/standin).
 *
 * At the first CUPTI call it registers a simgpu_observer with the stand-in
 * (dlsym(RTLD_DEFAULT, "simgpu_register_observer")) and turns what the simulator does into what
 * real CUPTI would deliver:
 *   - activity records in the REAL layout of the CUPTI version it claims (mock_layouts.h), written
 *     into buffers obtained from the client's buffer-request callback and handed back through the
 *     buffer-completed callback — from a mock worker thread when a buffer fills (like CUPTI's
 *     worker), or on the calling thread in cuptiActivityFlushAll;
 *   - with the simulator's own timestamps (CLOCK_MONOTONIC), so tests compare them ns-exactly;
 *   - driver API enter/exit callbacks, with the simulator's correlation ids; runtime-domain
 *     callbacks and RUNTIME records for the stand-in libcudart.so.13's calls, whose driver calls
 *     get callbacks but no DRIVER record, and whose kernels carry the runtime call's id (as CUPTI);
 *   - resource callbacks GRAPHNODE_CREATED (during stream capture, inside the launch call) and
 *     GRAPHNODE_CLONED (the first time an instantiated graph's node runs, inside cuGraphLaunch);
 *   - cuptiUnsubscribe: forgets the subscription and its callbacks; later calls into the
 *     subscription count as calls while detached;
 *   - cuptiFinalize (dynamic detach): hands back every buffer, then forgets the subscription, the
 *     enabled kinds and callbacks and the registered callbacks, as CUPTI's teardown does. CUPTI
 *     allows it only in an API exit callback: the mock counts calls made elsewhere, and calls
 *     into it while detached (real CUPTI would initialise itself again, without a subscriber).
 *     It also counts finalizes after a graph node was created while subscribed: on the H200
 *     (CUPTI 13.0.85) such graphs' launches failed once CUPTI was finalized.
 *
 * Ids: context ids count contexts from 1 in order of first use; stream ids are the simulator's
 * stream_id; graph ids the simulator's graph_id. Graph node ids: a captured node is
 * (graph_id << 32) | node_id; its clone in graph exec E is (1 << 63) | (E << 32) | node_id, and
 * replayed kernels carry the clone's id (as real CUPTI reports the executed node).
 *
 * Environment:
 *   SPECPROF_MOCK_CUPTI_VERSION     cuptiGetVersion's answer (default 130001 = CUDA 13.0); picks
 *                                   the record layouts (see mock_layouts.h)
 *   SPECPROF_MOCK_CUPTI_BUSY=1      cuptiSubscribe fails with MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
 *   SPECPROF_MOCK_CUPTI_NO_TS_CALLBACK=1
 *                                   cuptiActivityRegisterTimestampCallback fails (NOT_SUPPORTED);
 *                                   records then use CUPTI's default clock, CLOCK_REALTIME
 *   SPECPROF_MOCK_CUPTI_STATS=path  at exit, write a JSON object with what the mock did
 *   SPECPROF_MOCK_CUPTI_BUFFER_LIMIT=n  grant the client at most n buffers in total; later
 *                                   requests are treated as refused (records dropped, counted)
 *   SPECPROF_MOCK_CUPTI_HOLD_BUFFERS=1  hand full buffers back only in cuptiActivityFlushAll (or
 *                                   cuptiFinalize), never from the worker: CUPTI's worker falling
 *                                   behind, so that a client's pool of buffers runs out and it
 *                                   refuses requests (records dropped, counted)
 *   SPECPROF_MOCK_CUPTI_KERNEL_SIZE=n   write kernel records of n bytes (a layout the client does
 *                                   not know: it must refuse rather than mis-decode)
 *   SPECPROF_MOCK_CUPTI_STUCK_CORR=1  once the DRIVER kind is enabled a second time (a duty window
 *                                   opening again), every later correlation id, in records and
 *                                   callbacks alike, is the next driver call's: what CUPTI 13.0
 *                                   did after its API kinds were switched by windows
 *                                   (docs/overhead.md, known hazards)
 *   SPECPROF_MOCK_CUPTI_SWITCH_DELAY_US=n  cuptiActivityEnable/Disable return n µs after switching
 *                                   their kind: the switching thread preempted between two kinds,
 *                                   while other threads' calls go on
 */
#define _GNU_SOURCE
#include "mock_layouts.h"
#include "simgpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUptiResult;
enum {
    CUPTI_SUCCESS = 0,
    CUPTI_ERROR_INVALID_PARAMETER = 1,
    CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
    CUPTI_ERROR_NOT_INITIALIZED = 15,
    CUPTI_ERROR_INVALID_KIND = 21,
    CUPTI_ERROR_NOT_SUPPORTED = 27,
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39,
    CUPTI_ERROR_UNKNOWN = 999
};
enum {
    KIND_MEMCPY = 1,
    KIND_MEMSET = 2,
    KIND_DRIVER = 4,
    KIND_RUNTIME = 5, /* the stand-in libcudart.so.13's calls (simgpu_runtime_enter/exit) */
    KIND_CONCURRENT_KERNEL = 10,
    KIND_OVERHEAD = 17,
    KIND_SYNCHRONIZATION = 38,
    KIND_GRAPH_TRACE = 51, /* one record per graph launch; no node records for it (as CUPTI 11.7u1+) */
    KIND_MAX = 64
};
enum { DOM_DRIVER = 1, DOM_RUNTIME = 2, DOM_RESOURCE = 3, DOM_MAX = 8 };
enum { CB_GRAPHNODE_CREATED = 13, CB_GRAPHNODE_CLONED = 20 };
#define MAX_CBID 1024

typedef void (*cb_fn)(void *, uint32_t, uint32_t, const void *);
typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef uint64_t (*ts_fn)(void);

/* ------------------------------------------------------------------------------------------ */
/* Configuration                                                                              */

enum layout { LAYOUT_12_0, LAYOUT_12_4, LAYOUT_12_8, LAYOUT_13_0 };
static struct {
    uint32_t version;
    enum layout layout;
    int busy, no_ts;
    long buffer_limit;
    int hold_buffers; /* SPECPROF_MOCK_CUPTI_HOLD_BUFFERS=1 */
    size_t kernel_size; /* 0: the version's */
    char stats_path[1024];
    int64_t clock_offset; /* added to simulator times while no timestamp callback is registered */
    /* SPECPROF_MOCK_CUPTI_DROP_API=ON_MS/PERIOD_MS: lose the driver API records of the calls that
     * start in the first ON_MS of every PERIOD_MS, as CUPTI did on the H200 in some windows. */
    uint64_t drop_on_ns, drop_period_ns;
    int stuck_corr; /* SPECPROF_MOCK_CUPTI_STUCK_CORR=1 */
    unsigned switch_delay_us; /* SPECPROF_MOCK_CUPTI_SWITCH_DELAY_US */
} cfg;

/* SPECPROF_MOCK_CUPTI_STUCK_CORR: enables of the DRIVER kind so far, whether the next driver call's
 * id is to stick, and the stuck id (0: none). */
static atomic_uint driver_enables;
static atomic_int stuck_armed;
static _Atomic uint64_t stuck_id;

/* The correlation id CUPTI reports for the simulator's corr. */
static uint32_t corr_out(uint64_t corr) {
    uint64_t s = atomic_load_explicit(&stuck_id, memory_order_relaxed);
    return (uint32_t)(s ? s : corr);
}

static size_t rec_size(uint32_t kind) {
    switch (kind) {
    case KIND_CONCURRENT_KERNEL:
        if (cfg.kernel_size) return cfg.kernel_size;
        return cfg.layout == LAYOUT_13_0 ? sizeof(struct mock_kernel10) : sizeof(struct mock_kernel9);
    case KIND_MEMCPY:
        return cfg.layout >= LAYOUT_12_8 ? sizeof(struct mock_memcpy6) : sizeof(struct mock_memcpy5);
    case KIND_MEMSET:
        return sizeof(struct mock_memset4);
    case KIND_DRIVER:
    case KIND_RUNTIME:
        return sizeof(struct mock_api);
    case KIND_SYNCHRONIZATION:
        return cfg.layout >= LAYOUT_12_8 ? sizeof(struct mock_sync2) : sizeof(struct mock_sync);
    case KIND_OVERHEAD:
        return cfg.layout >= LAYOUT_12_4 ? sizeof(struct mock_overhead3) : sizeof(struct mock_overhead);
    case KIND_GRAPH_TRACE:
        return sizeof(struct mock_graph_trace2);
    default:
        return 0;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                      */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t worker_cv = PTHREAD_COND_INITIALIZER;

static struct {
    int subscribed;
    cb_fn cb;
    void *ud;
    uint8_t enabled[DOM_MAX][MAX_CBID]; /* callbacks */
} sub;

static atomic_int kind_on[KIND_MAX];
static atomic_int ever_enabled;
static ts_fn g_ts;
static req_fn g_req;
static done_fn g_done;

/* Buffers: the one being filled, and full ones waiting for delivery. */
struct fullbuf {
    uint8_t *b;
    size_t size, used;
};
static uint8_t *cur;
static size_t cur_size, cur_used;
static struct fullbuf *full;
static size_t nfull, capfull;
static long buffers_granted;

static atomic_ullong dropped_since_read, dropped_total;
static atomic_ullong n_records[KIND_MAX];
static atomic_ullong n_driver_cb, n_runtime_cb, n_resource_cb, n_delivered_buffers, n_flushes;
static atomic_ullong n_subscribes, n_finalizes, n_finalize_outside_exit, n_calls_detached, n_finalize_with_graphs;
static atomic_ullong n_unsubscribes;
static atomic_int unsubscribed; /* cuptiUnsubscribe ran: calls into the subscription count as calls while detached */
static atomic_int graphs_under_cupti; /* a graph node was created while subscribed */
static atomic_int detached;              /* finalized and not subscribed again */
static __thread int t_in_exit_callback;  /* inside a driver API exit callback */

/* A call that would initialise CUPTI again while detached: counted (the client must not). */
#define NOT_DETACHED()                                                     \
    do {                                                                   \
        if (atomic_load(&detached) || atomic_load(&unsubscribed)) atomic_fetch_add(&n_calls_detached, 1); \
    } while (0)
static char warnings[4][200];
static int nwarn;

static void warn(const char *fmt, ...) {
    char b[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mockcupti: %s\n", b);
    pthread_mutex_lock(&mu);
    if (nwarn < 4) snprintf(warnings[nwarn++], sizeof warnings[0], "%s", b);
    pthread_mutex_unlock(&mu);
}

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Simulator time (CLOCK_MONOTONIC) -> record time. */
static uint64_t rt(uint64_t t) { return g_ts ? t : t + (uint64_t)cfg.clock_offset; }

/* ------------------------------------------------------------------------------------------ */
/* Buffers                                                                                    */

static void push_full_locked(void) {
    if (!cur) return;
    if (nfull == capfull) {
        size_t nc = capfull ? capfull * 2 : 16;
        struct fullbuf *nf = realloc(full, nc * sizeof *nf);
        if (!nf) abort(); /* the mock, not the library under test */
        full = nf;
        capfull = nc;
    }
    full[nfull++] = (struct fullbuf){cur, cur_size, cur_used};
    cur = NULL;
    cur_size = cur_used = 0;
}

/* Appends one record; without a client buffer the record is dropped and counted. */
static void emit(const void *rec, uint32_t kind) {
    size_t size = rec_size(kind);
    size_t step = (size + 7) & ~(size_t)7;
    int wake = 0;
    pthread_mutex_lock(&mu);
    if (cur && cur_used + step > cur_size) {
        push_full_locked();
        wake = 1;
    }
    if (!cur) {
        uint8_t *b = NULL;
        size_t sz = 0, maxrec = 0;
        if (g_req && (cfg.buffer_limit < 0 || buffers_granted < cfg.buffer_limit)) g_req(&b, &sz, &maxrec);
        if (b && sz >= step) {
            cur = b;
            cur_size = sz;
            cur_used = 0;
            buffers_granted++;
        } else {
            /* A buffer too small or none at all: CUPTI drops the record. (A granted buffer that is
             * too small is leaked here; the library never hands one out.) */
            pthread_mutex_unlock(&mu);
            atomic_fetch_add(&dropped_since_read, 1);
            atomic_fetch_add(&dropped_total, 1);
            if (wake) pthread_cond_signal(&worker_cv);
            return;
        }
    }
    memcpy(cur + cur_used, rec, size);
    memset(cur + cur_used + size, 0, step - size);
    cur_used += step;
    atomic_fetch_add(&n_records[kind], 1);
    pthread_mutex_unlock(&mu);
    if (wake) pthread_cond_signal(&worker_cv);
}

/* Delivers buffers outside the lock (the client may call back into CUPTI). */
static void deliver(struct fullbuf *bs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        atomic_fetch_add(&n_delivered_buffers, 1);
        if (g_done) g_done(NULL, 0, bs[i].b, bs[i].size, bs[i].used);
    }
}

/* Takes the list of filled buffers (under mu), leaving it empty. */
static struct fullbuf *take_full_locked(size_t *n) {
    struct fullbuf *bs = full;
    *n = nfull;
    full = NULL;
    nfull = capfull = 0;
    return bs;
}

/* Hands every filled buffer, and the one being filled, back to the client (flush, finalize). */
static void deliver_all(void) {
    size_t n;
    pthread_mutex_lock(&mu);
    if (cur && cur_used > 0) push_full_locked();
    struct fullbuf *bs = take_full_locked(&n);
    pthread_mutex_unlock(&mu);
    deliver(bs, n);
    free(bs);
}

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        size_t n;
        pthread_mutex_lock(&mu);
        while (nfull == 0 || cfg.hold_buffers) pthread_cond_wait(&worker_cv, &mu);
        struct fullbuf *bs = take_full_locked(&n);
        pthread_mutex_unlock(&mu);
        deliver(bs, n);
        free(bs);
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Id tables                                                                                  */

static uint64_t ctx_handles[64];
static int nctx;
static uint32_t ctx_id_locked(uint64_t h) {
    for (int i = 0; i < nctx; i++)
        if (ctx_handles[i] == h) return (uint32_t)i + 1;
    if (nctx < 64) ctx_handles[nctx++] = h;
    return (uint32_t)nctx;
}

/* Stream handle as passed to sync calls -> simulator stream id (learned from GPU operations). */
static struct {
    uint64_t handle;
    uint32_t id;
} streams[256];
static int nstreams;
static void learn_stream_locked(uint64_t h, uint32_t id) {
    for (int i = 0; i < nstreams; i++)
        if (streams[i].handle == h) return;
    if (nstreams < 256) streams[nstreams++] = (typeof(streams[0])){h, id};
}
static uint32_t stream_id_locked(uint64_t h) {
    for (int i = 0; i < nstreams; i++)
        if (streams[i].handle == h) return streams[i].id;
    return 0xffffffffu;
}

/* Kernel names: stable copies, as CUPTI's name pointers stay valid. */
static struct {
    char *s;
} names[4096];
static const char *intern_locked(const char *s) {
    if (!s) return NULL;
    size_t h = 5381;
    for (const char *p = s; *p; p++) h = h * 33 + (unsigned char)*p;
    for (size_t i = 0; i < 4096; i++) {
        size_t j = (h + i) & 4095;
        if (!names[j].s) {
            names[j].s = strdup(s);
            return names[j].s;
        }
        if (!strcmp(names[j].s, s)) return names[j].s;
    }
    return s;
}

/* Clones seen: (exec id, node id) pairs. */
static uint64_t *clones;
static size_t nclones, capclones;
static int clone_seen_locked(uint64_t key) {
    for (size_t i = 0; i < nclones; i++)
        if (clones[i] == key) return 1;
    if (nclones == capclones) {
        size_t nc = capclones ? capclones * 2 : 64;
        uint64_t *n = realloc(clones, nc * sizeof *n);
        if (!n) abort();
        clones = n;
        capclones = nc;
    }
    clones[nclones++] = key;
    return 0;
}

/* Graph and node handles are ids in disguise (the client only hands them back to us). */
#define GRAPH_HANDLE(id) ((void *)(uintptr_t)((uint64_t)(id) + 0x100000ull))
#define NODE_HANDLE(id) ((void *)(uintptr_t)((uint64_t)(id) + 1ull))
static uint64_t orig_node_id(uint64_t graph, uint32_t node) { return (graph << 32) | node; }
static uint64_t clone_node_id(uint64_t exec, uint32_t node) { return (1ull << 63) | (exec << 32) | node; }

/* ------------------------------------------------------------------------------------------ */
/* Driver API names -> CUPTI driver cbids (cupti_driver_cbid.h)                               */

static const struct {
    const char *name;
    uint16_t cbid;
} cbids[] = {
    {"cuInit", 1}, {"cuDriverGetVersion", 2}, {"cuDeviceGet", 3}, {"cuDeviceGetCount", 4},
    {"cuDeviceGetName", 5}, {"cuDeviceGetAttribute", 9}, {"cuCtxGetDevice", 16}, {"cuCtxSynchronize", 17},
    {"cuModuleLoad", 18}, {"cuModuleLoadData", 19}, {"cuModuleUnload", 22}, {"cuModuleGetFunction", 23},
    {"cuMemcpyDtoH", 45}, {"cuMemcpyDtoHAsync", 62}, {"cuEventCreate", 118}, {"cuEventRecord", 119},
    {"cuEventQuery", 120}, {"cuEventSynchronize", 121}, {"cuEventElapsedTime", 123}, {"cuStreamCreate", 124},
    {"cuStreamQuery", 125}, {"cuStreamSynchronize", 126}, {"cuCtxCreate_v2", 235}, {"cuMemAlloc_v2", 243},
    {"cuMemFree_v2", 245}, {"cuMemsetD8_v2", 249}, {"cuDeviceTotalMem_v2", 259}, {"cuMemcpyHtoD_v2", 276},
    {"cuMemcpyHtoDAsync_v2", 277}, {"cuMemcpyDtoH_v2", 278}, {"cuMemcpyDtoHAsync_v2", 279},
    {"cuStreamWaitEvent", 295}, {"cuCtxSetCurrent", 303}, {"cuCtxGetCurrent", 304}, {"cuLaunchKernel", 307},
    {"cuCtxDestroy_v2", 322}, {"cuEventDestroy_v2", 325}, {"cuStreamDestroy_v2", 326},
    {"cuStreamCreateWithPriority", 367}, {"cuGetErrorString", 372}, {"cuGetErrorName", 373},
    {"cuDevicePrimaryCtxRetain", 386}, {"cuMemcpyDtoH_v2_ptds", 398}, {"cuMemcpyDtoHAsync_v2_ptsz", 422},
    {"cuStreamSynchronize_ptsz", 440}, {"cuEventRecord_ptsz", 441}, {"cuLaunchKernel_ptsz", 442},
    {"cuStreamBeginCapture", 495}, {"cuStreamBeginCapture_ptsz", 496}, {"cuStreamEndCapture", 497},
    {"cuStreamEndCapture_ptsz", 498}, {"cuStreamIsCapturing", 499}, {"cuGraphInstantiate", 513},
    {"cuGraphLaunch", 514}, {"cuGraphLaunch_ptsz", 515}, {"cuGraphExecDestroy", 516}, {"cuGraphDestroy", 517},
    {"cuStreamBeginCapture_v2", 539}, {"cuStreamBeginCapture_v2_ptsz", 540},
    {"cuDevicePrimaryCtxRelease_v2", 544}, {"cuGraphInstantiate_v2", 578}, {"cuEventRecordWithFlags", 587},
    {"cuGetProcAddress", 626}, {"cuGraphInstantiateWithFlags", 643}, {"cuLaunchKernelEx", 652},
    {"cuLaunchKernelEx_ptsz", 653}, {"cuGetProcAddress_v2", 677}, {"cuCtxSynchronize_v2", 800},
    /* copies and sets (h200.md §23) */
    {"cuMemsetD8Async", 216}, {"cuMemsetD32Async", 220}, {"cuMemcpyDtoD_v2", 280}, {"cuMemcpyDtoDAsync_v2", 281},
    {"cuMemcpy", 305}, {"cuMemcpyAsync", 306}, {"cuMemcpyAsync_ptsz", 418}, {"cuMemcpyHtoDAsync_v2_ptsz", 421},
    {"cuMemcpyDtoDAsync_v2_ptsz", 423}, {"cuMemsetD8Async_ptsz", 428}, {"cuMemsetD32Async_ptsz", 430},
};

/* CUPTI_RUNTIME_TRACE_CBID_* of the stand-in runtime's calls. */
static uint32_t runtime_cbid_of(const char *api) {
    return !strcmp(api, "cudaLaunchKernel") ? 211 : 0; /* cudaLaunchKernel_v7000 */
}

static uint32_t cbid_of(const char *api) {
    static __thread const char *last_name;
    static __thread uint32_t last_cbid;
    if (api == last_name) return last_cbid;
    uint32_t id = 0;
    for (size_t i = 0; i < sizeof cbids / sizeof cbids[0]; i++)
        if (!strcmp(cbids[i].name, api)) {
            id = cbids[i].cbid;
            break;
        }
    last_name = api;
    last_cbid = id;
    return id;
}

/* CUpti_ActivitySynchronizationType of a synchronizing call, 0 for others. */
static uint32_t sync_type(const char *api) {
    if (!strncmp(api, "cuEventSynchronize", 18)) return 1;
    if (!strncmp(api, "cuStreamWaitEvent", 17)) return 2;
    if (!strncmp(api, "cuStreamSynchronize", 19)) return 3;
    if (!strncmp(api, "cuCtxSynchronize", 16)) return 4;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Observer hooks (application threads)                                                       */

static void fire(uint32_t domain, uint32_t cbid, const void *data) {
    cb_fn f = NULL;
    void *ud = NULL;
    pthread_mutex_lock(&mu);
    if (sub.subscribed && domain < DOM_MAX && cbid < MAX_CBID && sub.enabled[domain][cbid]) {
        f = sub.cb;
        ud = sub.ud;
    }
    pthread_mutex_unlock(&mu);
    if (!f) return;
    atomic_fetch_add(domain == DOM_RESOURCE ? &n_resource_cb : domain == DOM_RUNTIME ? &n_runtime_cb : &n_driver_cb, 1);
    f(ud, domain, cbid, data);
}

static void api_callback(const simgpu_api_rec *r, uint32_t site) {
    uint32_t cbid = cbid_of(r->api);
    if (!cbid) return;
    struct mock_callback_data d = {.callbackSite = site,
                                   .functionName = r->api,
                                   .correlationId = corr_out(r->corr)};
    t_in_exit_callback = site == 1;
    fire(DOM_DRIVER, cbid, &d);
    t_in_exit_callback = 0;
}

/* Like CUPTI: the activity thread id is pthread_self() cut to 32 bits unless
 * cuptiSetThreadIdType(SYSTEM) asked for gettid. */
static _Atomic uint32_t thread_id_type;

/* cuptiActivityEnableDriverApi: driver calls whose API records are off. */
#define MOCK_MAX_CBID 1024
static _Atomic uint8_t driver_api_off[MOCK_MAX_CBID];
static _Atomic uint8_t runtime_api_off[MOCK_MAX_CBID]; /* cuptiActivityEnableRuntimeApi */
static _Atomic uint32_t driver_api_calls; /* for SPECPROF_MOCK_CUPTI_DEBUG-style checks */

static uint32_t api_thread_id(const simgpu_api_rec *r) {
    if (atomic_load(&thread_id_type) == 1) return (uint32_t)r->tid;
    return (uint32_t)(uintptr_t)pthread_self();
}

/* The hazards the H200 showed (specprof_cupti.c, g_gs): a GPU activity kind switched while another
 * thread is inside a CUDA graph launch, or at all while GPU work is in flight, crashed the process.
 * Counted, never harmful here. The simulated GPU schedules each operation when it is launched, so
 * work is in flight while the latest end scheduled so far lies ahead. */
static atomic_int n_in_graph_launch;
static __thread int t_in_graph_launch;
static atomic_ullong n_gpu_switch_in_launch, n_gpu_switch_in_flight;
static _Atomic uint64_t last_gpu_end;

static int is_graph_launch(const char *api) { return !strncmp(api, "cuGraphLaunch", 13); }

static void note_switch(uint32_t kind) {
    if (kind != KIND_CONCURRENT_KERNEL && kind != KIND_MEMCPY && kind != KIND_MEMSET && kind != KIND_GRAPH_TRACE)
        return;
    if (atomic_load(&n_in_graph_launch) - t_in_graph_launch > 0) atomic_fetch_add(&n_gpu_switch_in_launch, 1);
    if (atomic_load(&last_gpu_end) > mono_ns()) atomic_fetch_add(&n_gpu_switch_in_flight, 1);
}

static void on_api_enter(const simgpu_api_rec *r) {
    if (atomic_load_explicit(&stuck_armed, memory_order_relaxed) && atomic_exchange(&stuck_armed, 0)) {
        uint64_t none = 0;
        (void)atomic_compare_exchange_strong(&stuck_id, &none, r->corr);
    }
    if (is_graph_launch(r->api)) {
        t_in_graph_launch = 1;
        atomic_fetch_add(&n_in_graph_launch, 1);
    }
    api_callback(r, 0);
}

static void graph_launch_returned(uint64_t corr);

/* The DRIVER or RUNTIME record of a call. */
static struct mock_api api_record(uint32_t kind, uint32_t cbid, const simgpu_api_rec *r) {
    return (struct mock_api){.kind = kind,
                             .cbid = cbid,
                             .start = rt(r->enter),
                             .end = rt(r->exit),
                             .processId = r->pid,
                             .threadId = api_thread_id(r),
                             .correlationId = corr_out(r->corr),
                             .returnValue = (uint32_t)r->result};
}

/* The stand-in runtime's calls: callbacks in the runtime domain, and RUNTIME records. */
static void on_runtime_enter(const simgpu_api_rec *r) {
    uint32_t cbid = runtime_cbid_of(r->api);
    if (!cbid) return;
    struct mock_callback_data d = {.callbackSite = 0, .functionName = r->api, .correlationId = corr_out(r->corr)};
    fire(DOM_RUNTIME, cbid, &d);
}

static void on_runtime_exit(const simgpu_api_rec *r) {
    uint32_t cbid = runtime_cbid_of(r->api);
    if (!cbid) return;
    struct mock_callback_data d = {.callbackSite = 1, .functionName = r->api, .correlationId = corr_out(r->corr)};
    t_in_exit_callback = 1;
    fire(DOM_RUNTIME, cbid, &d);
    t_in_exit_callback = 0;
    if (atomic_load(&kind_on[KIND_RUNTIME]) && !atomic_load(&runtime_api_off[cbid])) {
        struct mock_api a = api_record(KIND_RUNTIME, cbid, r);
        emit(&a, KIND_RUNTIME);
    }
}

static void on_api_exit(const simgpu_api_rec *r) {
    graph_launch_returned(r->corr); /* before the call's own record, as its GPU work was scheduled */
    api_callback(r, 1);
    uint32_t cbid = cbid_of(r->api);
    /* A driver call made in a runtime call gets callbacks but no record of its own: on the H200
     * (CUPTI 13.0) an eager torch loop's 142,597 API records were exactly one per kernel, copy,
     * memset and sync, and its kernels carry the runtime call's correlation id. */
    if (atomic_load(&kind_on[KIND_DRIVER]) && cbid && !r->parent &&
        !(cbid < MOCK_MAX_CBID && atomic_load(&driver_api_off[cbid]))) {
        struct mock_api a = api_record(KIND_DRIVER, cbid, r);
        if (!cfg.drop_period_ns || r->enter % cfg.drop_period_ns >= cfg.drop_on_ns) emit(&a, KIND_DRIVER);
    }
    uint32_t st = sync_type(r->api);
    if (st && atomic_load(&kind_on[KIND_SYNCHRONIZATION])) {
        struct mock_sync2 s;
        memset(&s, 0, sizeof s);
        s.s.kind = KIND_SYNCHRONIZATION;
        s.s.type = st;
        s.s.start = rt(r->enter);
        s.s.end = rt(r->exit);
        s.s.correlationId = corr_out(r->corr);
        pthread_mutex_lock(&mu);
        s.s.contextId = nctx ? 1 : 0;
        s.s.streamId = st == 3 ? stream_id_locked(r->stream) : 0xffffffffu;
        pthread_mutex_unlock(&mu);
        s.s.cudaEventId = 0xffffffffu;
        s.returnValue = (uint32_t)r->result;
        emit(&s, KIND_SYNCHRONIZATION);
    }
    if (t_in_graph_launch && is_graph_launch(r->api)) {
        t_in_graph_launch = 0;
        atomic_fetch_sub(&n_in_graph_launch, 1);
    }
}

/* Graph-level tracing: the nodes of one graph launch (scheduled inside the launching call) make
 * one record, emitted when that call returns. */
#define MAX_GRAPH_LAUNCHES 64
static struct graph_launch {
    uint64_t corr; /* 0: free */
    struct mock_graph_trace2 g;
} graph_launches[MAX_GRAPH_LAUNCHES];

static void graph_node_ran_locked(const simgpu_gpu_rec *r, uint32_t ctx) {
    struct graph_launch *free_slot = NULL;
    for (int i = 0; i < MAX_GRAPH_LAUNCHES; i++) {
        struct graph_launch *l = &graph_launches[i];
        if (l->corr == r->corr) {
            if (rt(r->start) < l->g.start) l->g.start = rt(r->start);
            if (rt(r->end) > l->g.end) l->g.end = rt(r->end);
            return;
        }
        if (!l->corr && !free_slot) free_slot = l;
    }
    if (!free_slot) return; /* more concurrent launches than slots: that launch goes unrecorded */
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->corr = r->corr;
    free_slot->g.kind = KIND_GRAPH_TRACE;
    free_slot->g.correlationId = corr_out(r->corr);
    free_slot->g.start = rt(r->start);
    free_slot->g.end = rt(r->end);
    free_slot->g.deviceId = free_slot->g.endDeviceId = (uint32_t)r->device;
    free_slot->g.graphId = (uint32_t)r->graph_id;
    free_slot->g.contextId = free_slot->g.endContextId = ctx;
    free_slot->g.streamId = r->stream_id;
}

static void graph_launch_returned(uint64_t corr) {
    struct mock_graph_trace2 g;
    int found = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_GRAPH_LAUNCHES; i++) {
        if (graph_launches[i].corr == corr) {
            g = graph_launches[i].g;
            graph_launches[i].corr = 0;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (found) emit(&g, KIND_GRAPH_TRACE);
}

static void on_gpu_op(const simgpu_gpu_rec *r) {
    uint32_t ctx;
    const char *name;
    int fire_clone = 0;
    uint64_t e = atomic_load(&last_gpu_end);
    while (r->end > e && !atomic_compare_exchange_weak(&last_gpu_end, &e, r->end)) {
    }
    pthread_mutex_lock(&mu);
    ctx = ctx_id_locked(r->context);
    learn_stream_locked(r->stream, r->stream_id);
    name = intern_locked(r->name);
    if (r->kind == SIMGPU_OP_KERNEL && r->graph_exec_id)
        fire_clone = !clone_seen_locked(clone_node_id(r->graph_exec_id, r->node_id));
    int whole_graph = r->graph_exec_id && atomic_load(&kind_on[KIND_GRAPH_TRACE]);
    if (whole_graph) graph_node_ran_locked(r, ctx);
    pthread_mutex_unlock(&mu);

    if (r->kind == SIMGPU_OP_KERNEL) {
        uint64_t node = 0;
        if (r->graph_exec_id) {
            node = clone_node_id(r->graph_exec_id, r->node_id);
            if (fire_clone) {
                struct mock_graph_data g = {.graph = GRAPH_HANDLE(r->graph_id),
                                            .originalGraph = GRAPH_HANDLE(r->graph_id),
                                            .node = NODE_HANDLE(node),
                                            .originalNode = NODE_HANDLE(orig_node_id(r->graph_id, r->node_id)),
                                            .nodeType = 0};
                struct mock_resource_data rd = {.resourceDescriptor = &g};
                fire(DOM_RESOURCE, CB_GRAPHNODE_CLONED, &rd);
            }
        }
        if (whole_graph || !atomic_load(&kind_on[KIND_CONCURRENT_KERNEL])) return;
        struct mock_kernel10 k;
        memset(&k, 0, sizeof k);
        k.k9.kind = KIND_CONCURRENT_KERNEL;
        k.k9.registersPerThread = 32;
        k.k9.start = rt(r->start);
        k.k9.end = rt(r->end);
        k.k9.completed = rt(r->end);
        k.k9.deviceId = (uint32_t)r->device;
        k.k9.contextId = ctx;
        k.k9.streamId = r->stream_id;
        k.k9.gridX = (int32_t)r->grid[0];
        k.k9.gridY = (int32_t)r->grid[1];
        k.k9.gridZ = (int32_t)r->grid[2];
        k.k9.blockX = (int32_t)r->block[0];
        k.k9.blockY = (int32_t)r->block[1];
        k.k9.blockZ = (int32_t)r->block[2];
        k.k9.staticSharedMemory = 0;
        k.k9.dynamicSharedMemory = (int32_t)r->shared_mem;
        k.k9.correlationId = corr_out(r->corr);
        k.k9.gridId = (int64_t)r->corr;
        k.k9.name = name;
        k.k9.queued = rt(r->submit);
        k.k9.submitted = rt(r->submit);
        k.k9.graphNodeId = node;
        k.k9.graphId = (uint32_t)r->graph_id;
        emit(&k, KIND_CONCURRENT_KERNEL);
    } else if (r->kind == SIMGPU_OP_MEMCPY) {
        if (whole_graph || !atomic_load(&kind_on[KIND_MEMCPY])) return;
        struct mock_memcpy6 m;
        memset(&m, 0, sizeof m);
        int htod = r->copy_kind && !strcmp(r->copy_kind, "HtoD");
        m.m5.kind = KIND_MEMCPY;
        m.m5.copyKind = htod ? 1 : 2;     /* CUPTI_ACTIVITY_MEMCPY_KIND_HTOD / DTOH */
        m.m5.srcKind = htod ? 1 : 3;      /* PAGEABLE / DEVICE */
        m.m5.dstKind = htod ? 3 : 1;
        m.m5.flags = strstr(r->api, "Async") ? 1 : 0; /* CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC */
        m.m5.bytes = r->bytes;
        m.m5.start = rt(r->start);
        m.m5.end = rt(r->end);
        m.m5.deviceId = (uint32_t)r->device;
        m.m5.contextId = ctx;
        m.m5.streamId = r->stream_id;
        m.m5.correlationId = corr_out(r->corr);
        m.copyCount = 1;
        emit(&m, KIND_MEMCPY);
    } else if (r->kind == SIMGPU_OP_MEMSET) {
        if (whole_graph || !atomic_load(&kind_on[KIND_MEMSET])) return;
        struct mock_memset4 m;
        memset(&m, 0, sizeof m);
        m.kind = KIND_MEMSET;
        m.value = r->value;
        m.bytes = r->bytes;
        m.start = rt(r->start);
        m.end = rt(r->end);
        m.deviceId = (uint32_t)r->device;
        m.contextId = ctx;
        m.streamId = r->stream_id;
        m.correlationId = corr_out(r->corr);
        m.memoryKind = 3;
        emit(&m, KIND_MEMSET);
    }
}

static void on_graph_node(const simgpu_graph_node_rec *g) {
    uint64_t id = orig_node_id(g->graph_id, g->node_id);
    struct mock_graph_data d = {.graph = GRAPH_HANDLE(g->graph_id), .node = NODE_HANDLE(id), .nodeType = 0};
    struct mock_resource_data rd = {.resourceDescriptor = &d};
    pthread_mutex_lock(&mu);
    if (sub.subscribed) atomic_store(&graphs_under_cupti, 1);
    pthread_mutex_unlock(&mu);
    fire(DOM_RESOURCE, CB_GRAPHNODE_CREATED, &rd);
}

/* ------------------------------------------------------------------------------------------ */
/* Initialization and exit                                                                    */

static void write_stats(void) {
    if (!cfg.stats_path[0]) return;
    unsigned long long cb_on = 0; /* callbacks still enabled at exit */
    pthread_mutex_lock(&mu);
    for (int d = 0; sub.subscribed && d < DOM_MAX; d++)
        for (int c = 0; c < MAX_CBID; c++) cb_on += sub.enabled[d][c];
    pthread_mutex_unlock(&mu);
    FILE *f = fopen(cfg.stats_path, "w");
    if (!f) return;
    fprintf(f,
            "{\"version\":%u,\"ever_enabled\":%s,\"records\":{\"kernel\":%llu,\"memcpy\":%llu,\"memset\":%llu,"
            "\"api\":%llu,\"runtime_api\":%llu,\"sync\":%llu,\"overhead\":%llu},\"dropped\":%llu,\"driver_callbacks\":%llu,\"runtime_callbacks\":%llu,"
            "\"resource_callbacks\":%llu,\"buffers_delivered\":%llu,\"flushes\":%llu,\"subscribes\":%llu,"
            "\"finalizes\":%llu,\"finalize_outside_exit_callback\":%llu,\"calls_while_detached\":%llu,"
            "\"finalize_with_graphs\":%llu,\"gpu_switch_in_graph_launch\":%llu,\"gpu_switch_in_flight\":%llu,"
            "\"stuck_correlation_id\":%llu,\"unsubscribes\":%llu,\"callbacks_enabled_at_exit\":%llu,\"warnings\":[",
            cfg.version, atomic_load(&ever_enabled) ? "true" : "false",
            (unsigned long long)n_records[KIND_CONCURRENT_KERNEL], (unsigned long long)n_records[KIND_MEMCPY],
            (unsigned long long)n_records[KIND_MEMSET], (unsigned long long)n_records[KIND_DRIVER],
            (unsigned long long)n_records[KIND_RUNTIME], (unsigned long long)n_records[KIND_SYNCHRONIZATION],
            (unsigned long long)n_records[KIND_OVERHEAD], (unsigned long long)dropped_total,
            (unsigned long long)n_driver_cb, (unsigned long long)n_runtime_cb, (unsigned long long)n_resource_cb,
            (unsigned long long)n_delivered_buffers, (unsigned long long)n_flushes,
            (unsigned long long)n_subscribes, (unsigned long long)n_finalizes,
            (unsigned long long)n_finalize_outside_exit, (unsigned long long)n_calls_detached,
            (unsigned long long)n_finalize_with_graphs, (unsigned long long)n_gpu_switch_in_launch,
            (unsigned long long)n_gpu_switch_in_flight, (unsigned long long)atomic_load(&stuck_id),
            (unsigned long long)n_unsubscribes, cb_on);
    for (int i = 0; i < nwarn; i++) fprintf(f, "%s\"%s\"", i ? "," : "", warnings[i]);
    fprintf(f, "]}\n");
    fclose(f);
}

static void init(void) {
    const char *v = getenv("SPECPROF_MOCK_CUPTI_VERSION");
    cfg.version = v && *v ? (uint32_t)strtoul(v, NULL, 10) : 130001;
    cfg.layout = cfg.version >= 130000 ? LAYOUT_13_0
                 : cfg.version >= 26   ? LAYOUT_12_8
                 : cfg.version >= 22   ? LAYOUT_12_4
                                       : LAYOUT_12_0;
    cfg.busy = getenv("SPECPROF_MOCK_CUPTI_BUSY") && !strcmp(getenv("SPECPROF_MOCK_CUPTI_BUSY"), "1");
    cfg.no_ts = getenv("SPECPROF_MOCK_CUPTI_NO_TS_CALLBACK") &&
                !strcmp(getenv("SPECPROF_MOCK_CUPTI_NO_TS_CALLBACK"), "1");
    const char *lim = getenv("SPECPROF_MOCK_CUPTI_BUFFER_LIMIT");
    cfg.buffer_limit = lim && *lim ? strtol(lim, NULL, 10) : -1;
    cfg.hold_buffers = getenv("SPECPROF_MOCK_CUPTI_HOLD_BUFFERS") && !strcmp(getenv("SPECPROF_MOCK_CUPTI_HOLD_BUFFERS"), "1");
    const char *ks = getenv("SPECPROF_MOCK_CUPTI_KERNEL_SIZE");
    cfg.kernel_size = ks && *ks ? strtoul(ks, NULL, 10) : 0;
    if (cfg.kernel_size > sizeof(struct mock_kernel10)) cfg.kernel_size = sizeof(struct mock_kernel10);
    const char *da = getenv("SPECPROF_MOCK_CUPTI_DROP_API");
    unsigned long long don = 0, dper = 0;
    if (da && sscanf(da, "%llu/%llu", &don, &dper) == 2 && dper > don)
        cfg.drop_on_ns = don * 1000000ull, cfg.drop_period_ns = dper * 1000000ull;
    cfg.stuck_corr = getenv("SPECPROF_MOCK_CUPTI_STUCK_CORR") && !strcmp(getenv("SPECPROF_MOCK_CUPTI_STUCK_CORR"), "1");
    const char *sd = getenv("SPECPROF_MOCK_CUPTI_SWITCH_DELAY_US");
    cfg.switch_delay_us = sd && *sd ? (unsigned)strtoul(sd, NULL, 10) : 0;
    const char *sp = getenv("SPECPROF_MOCK_CUPTI_STATS");
    if (sp) snprintf(cfg.stats_path, sizeof cfg.stats_path, "%s", sp);
    struct timespec r;
    clock_gettime(CLOCK_REALTIME, &r);
    cfg.clock_offset = (int64_t)((uint64_t)r.tv_sec * 1000000000ull + (uint64_t)r.tv_nsec) - (int64_t)mono_ns();

    int (*reg)(const simgpu_observer *) = (int (*)(const simgpu_observer *))dlsym(RTLD_DEFAULT,
                                                                                   "simgpu_register_observer");
    if (!reg) {
        warn("simgpu_register_observer not found: is the stand-in libcuda.so.1 loaded?");
    } else {
        simgpu_observer o;
        memset(&o, 0, sizeof o);
        o.api_enter = on_api_enter;
        o.api_exit = on_api_exit;
        o.gpu_op = on_gpu_op;
        o.graph_node = on_graph_node;
        o.runtime_enter = on_runtime_enter;
        o.runtime_exit = on_runtime_exit;
        if (reg(&o) != 0) warn("simgpu_register_observer failed");
    }
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) == 0) pthread_detach(t);
    atexit(write_stats);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
#define INIT() pthread_once(&once, init)

/* ------------------------------------------------------------------------------------------ */
/* CUPTI entry points                                                                         */

EXPORT CUptiResult cuptiGetVersion(uint32_t *version) {
    INIT();
    if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
    *version = cfg.version;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
    if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_NOT_SUPPORTED: *str = "CUPTI_ERROR_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; break;
    }
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(void **subscriber, cb_fn callback, void *userdata) {
    INIT();
    if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    if (cfg.busy || sub.subscribed) {
        pthread_mutex_unlock(&mu);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    sub.subscribed = 1;
    atomic_store(&detached, 0);
    atomic_store(&unsubscribed, 0);
    atomic_fetch_add(&n_subscribes, 1);
    sub.cb = callback;
    sub.ud = userdata;
    memset(sub.enabled, 0, sizeof sub.enabled);
    pthread_mutex_unlock(&mu);
    *subscriber = &sub;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(void *subscriber) {
    pthread_mutex_lock(&mu);
    sub.subscribed = 0;
    memset(sub.enabled, 0, sizeof sub.enabled);
    pthread_mutex_unlock(&mu);
    atomic_store(&unsubscribed, 1);
    atomic_fetch_add(&n_unsubscribes, 1);
    return subscriber == &sub ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, void *subscriber, uint32_t domain, uint32_t cbid) {
    NOT_DETACHED();
    if (subscriber != &sub || domain >= DOM_MAX || cbid >= MAX_CBID) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    sub.enabled[domain][cbid] = enable ? 1 : 0;
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, void *subscriber, uint32_t domain) {
    NOT_DETACHED();
    if (subscriber != &sub || domain >= DOM_MAX) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    memset(sub.enabled[domain], enable ? 1 : 0, MAX_CBID);
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(req_fn request, done_fn complete) {
    INIT();
    if (!request || !complete) return CUPTI_ERROR_INVALID_PARAMETER;
    g_req = request;
    g_done = complete;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(ts_fn fn) {
    INIT();
    if (!fn) return CUPTI_ERROR_INVALID_PARAMETER;
    if (cfg.no_ts) return CUPTI_ERROR_NOT_SUPPORTED;
    if (atomic_load(&ever_enabled))
        warn("timestamp callback registered after an activity kind was enabled: earlier records keep the old clock");
    uint64_t a = mono_ns(), t = fn(), b = mono_ns();
    if (t + 1000000 < a || t > b + 1000000) warn("the timestamp callback does not return CLOCK_MONOTONIC");
    g_ts = fn;
    return CUPTI_SUCCESS;
}

static int kind_supported(uint32_t kind) { return rec_size(kind) != 0; }

EXPORT CUptiResult cuptiActivityEnable(uint32_t kind) {
    INIT();
    NOT_DETACHED();
    if (kind >= KIND_MAX || !kind_supported(kind)) return CUPTI_ERROR_NOT_SUPPORTED;
    note_switch(kind);
    if (cfg.stuck_corr && kind == KIND_DRIVER && atomic_fetch_add(&driver_enables, 1) == 1)
        atomic_store(&stuck_armed, 1);
    atomic_store(&kind_on[kind], 1);
    atomic_store(&ever_enabled, 1);
    if (cfg.switch_delay_us) usleep(cfg.switch_delay_us);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityDisable(uint32_t kind) {
    NOT_DETACHED();
    if (kind >= KIND_MAX || !kind_supported(kind)) return CUPTI_ERROR_NOT_SUPPORTED;
    note_switch(kind);
    atomic_store(&kind_on[kind], 0);
    if (cfg.switch_delay_us) usleep(cfg.switch_delay_us);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    (void)flag; /* every mock record is complete: both flush modes return everything */
    INIT();
    NOT_DETACHED();
    atomic_fetch_add(&n_flushes, 1);
    uint64_t t0 = mono_ns();
    pthread_mutex_lock(&mu);
    int any = cur != NULL && cur_used > 0;
    pthread_mutex_unlock(&mu);
    if (any && atomic_load(&kind_on[KIND_OVERHEAD])) {
        struct mock_overhead3 o;
        memset(&o, 0, sizeof o);
        o.o.kind = KIND_OVERHEAD;
        o.o.overheadKind = 1u << 16; /* CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH */
        o.o.objectKind = 2;          /* CUPTI_ACTIVITY_OBJECT_THREAD */
        o.o.objectId[0] = (uint32_t)getpid();
        o.o.objectId[1] = (uint32_t)gettid();
        o.o.start = rt(t0);
        o.o.end = rt(mono_ns());
        emit(&o, KIND_OVERHEAD);
    }
    deliver_all();
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t ms) {
    (void)ms;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record) {
    NOT_DETACHED();
    if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
    uint8_t *p;
    if (!*record) {
        p = buffer;
    } else {
        uint32_t kind;
        memcpy(&kind, *record, sizeof kind);
        size_t size = rec_size(kind);
        if (!size) return CUPTI_ERROR_INVALID_KIND;
        p = (uint8_t *)*record + ((size + 7) & ~(size_t)7);
    }
    if (p + sizeof(uint32_t) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = p;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
    (void)ctx;
    (void)stream;
    if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
    *dropped = (size_t)atomic_exchange(&dropped_since_read, 0); /* reset on read, as documented */
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    INIT();
    if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = rt(mono_ns());
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSetThreadIdType(uint32_t type) {
    if (type > 1) return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
    atomic_store(&thread_id_type, type);
    return 0;
}

EXPORT CUptiResult cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t enable) {
    if (cbid == 0 || cbid >= MOCK_MAX_CBID) return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
    atomic_store(&driver_api_off[cbid], !enable);
    atomic_fetch_add(&driver_api_calls, 1);
    return 0;
}

EXPORT CUptiResult cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t enable) {
    if (cbid == 0 || cbid >= MOCK_MAX_CBID) return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
    atomic_store(&runtime_api_off[cbid], !enable);
    return 0;
}

EXPORT CUptiResult cuptiGetThreadIdType(uint32_t *type) {
    if (!type) return 1;
    *type = atomic_load(&thread_id_type);
    return 0;
}

EXPORT CUptiResult cuptiGetGraphId(void *graph, uint32_t *id) {
    if (!graph || !id) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = (uint32_t)((uintptr_t)graph - 0x100000u);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetGraphNodeId(void *node, uint64_t *id) {
    if (!node || !id) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = (uint64_t)(uintptr_t)node - 1;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiFinalize(void) {
    INIT();
    if (!t_in_exit_callback) {
        atomic_fetch_add(&n_finalize_outside_exit, 1);
        warn("cuptiFinalize called outside an API exit callback");
    }
    if (atomic_load(&graphs_under_cupti)) {
        atomic_fetch_add(&n_finalize_with_graphs, 1);
        warn("cuptiFinalize after CUDA graphs were built under CUPTI: their launches fail on real CUPTI");
    }
    for (int k = 0; k < KIND_MAX; k++) atomic_store(&kind_on[k], 0);
    deliver_all();
    pthread_mutex_lock(&mu);
    if (cur) { /* an empty buffer the client granted: handed back too */
        struct fullbuf b = {cur, cur_size, 0};
        cur = NULL;
        cur_size = cur_used = 0;
        pthread_mutex_unlock(&mu);
        deliver(&b, 1);
        pthread_mutex_lock(&mu);
    }
    sub.subscribed = 0;
    memset(sub.enabled, 0, sizeof sub.enabled);
    g_req = NULL;
    g_done = NULL;
    g_ts = NULL;
    pthread_mutex_unlock(&mu);
    for (int c = 0; c < MOCK_MAX_CBID; c++) atomic_store(&driver_api_off[c], 0), atomic_store(&runtime_api_off[c], 0);
    atomic_store(&thread_id_type, 0);
    atomic_store(&ever_enabled, 0);
    atomic_store(&detached, 1);
    atomic_fetch_add(&n_finalizes, 1);
    return CUPTI_SUCCESS;
}
