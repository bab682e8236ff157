/*
 * The injection: InitializeInjection (called by the CUDA driver from cuInit), the CUPTI
 * subscription and every CUPTI callback. Callbacks run on application threads inside their CUDA
 * calls, and the buffer callbacks also on CUPTI's threads: none of them blocks or does I/O. They
 * note the calls in progress, append graph nodes to a lock-free table, push the callbacks' API
 * records into a lock-free ring, hand out pooled activity buffers and queue completed ones, and
 * apply a GPU switch the sender posted (windows.c) or a detach it asked for (detach.c).
 */
#define _GNU_SOURCE
#include "state.h"
#include "api_filter.h"

#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

struct spc_state spc = {
    .clock = SPW_CLOCK_CALLBACK,
    .efd = -1,
    .gs = GS_IDLE,
    .detach_mu = PTHREAD_MUTEX_INITIALIZER,
    .cupti_mu = PTHREAD_MUTEX_INITIALIZER,
    .exit_mu = PTHREAD_MUTEX_INITIALIZER,
    .bufs = {.mu = PTHREAD_MUTEX_INITIALIZER},
    .out = {.fd = -1},
};

/* The timestamp CUPTI puts in every record: CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns. */
static uint64_t timestamp_cb(void) { return mono_ns(); }

static uint32_t my_tid(void) {
    static __thread uint32_t tid;
    if (!tid) tid = (uint32_t)syscall(SYS_gettid);
    return tid;
}

static void gn_append(const struct spw_graph_node *r) {
    if (!spc.gn) return;
    unsigned i = atomic_fetch_add(&spc.gn_n, 1);
    if (i >= cfg.graph_cap) {
        atomic_fetch_add(&spc.st.dropped_graph, 1);
        return;
    }
    spc.gn[i].rec = *r;
    atomic_store_explicit(&spc.gn[i].ready, 1, memory_order_release);
}

/* Driver API calls during which graph nodes get created or cloned: their enter callback records
 * the correlation id that a GRAPHNODE_CREATED/CLONED callback (issued between enter and exit)
 * attributes the node to. Numbers from cupti_driver_cbid.h (stable across versions; a cbid a
 * CUPTI version does not know is skipped when enabling). */
const uint16_t tracked_cbids[] = {
    60,  62,  64,  66,  67,  68,  69,  115, 116, 117, 216, 218, 220, 222, 224, 226, /* legacy async copies, launches */
    277, 279, 281, 283, 289, 291, 293, 306, 307, 319, 321,                         /* _v2 async copies, cuLaunchKernel */
    418, 419, 420, 421, 422, 423, 424, 425, 426, 427, 428, 429, 430, 431, 432, 433, /* _ptsz async copies/sets */
    442, 477, 478, 480,                                                             /* launches */
    502, 504, 506, 513, 523, 525, 526, 527, 528, 530, 538, 561, 578, 589, 590,     /* graph building */
    618, 621, 638, 639, 643, 652, 653, 656, 657, 669, 689, 692, 696, 712, 713, 714, 720, 721, 723,
    776, 777, 778, 779, 796, 797, 798, 799, /* batched async copies (12.8+) */
};
const size_t n_tracked_cbids = sizeof tracked_cbids / sizeof tracked_cbids[0];

/* This thread's tracked call in progress: the creating call of the graph nodes it makes. */
static __thread uint32_t t_corr, t_cbid;

/* The driver calls that return only once the GPU work before them is done (context, stream and event
 * synchronisation, synchronous device-to-host copies: cupti_driver_cbid.h): a posted switch is applied
 * at their exit only. On the H200, switching CUPTI's GPU kinds at the exit of any call (a launch's
 * included) crashed the eager and the graph loop alike (13 of 15 runs with 2 ms windows every 10 ms:
 * heap corruption, SIGSEGV in the interpreter), whichever thread switched; with the kernels of the
 * switching thread's stream all done, nothing of theirs is in flight. Work on other streams may be. */
static const uint16_t drain_cbids[] = {17, 45, 121, 126, 278, 305, 398, 408, 440, 800};

static __thread unsigned t_inflight_gen; /* generation + 1 of this thread's call in progress, 0: none */

/* This thread's driver [0] and runtime [1] call in progress (a runtime call holds at most one
 * driver call that CUPTI reports): its enter time (0: none seen), correlation id, and whether
 * records were on when it entered. */
static __thread uint64_t t_api_start[2];
static __thread uint32_t t_api_corr[2];
static __thread uint8_t t_api_on[2];

static void api_ring_push(const struct spw_api *w) {
    uint64_t mask = cfg.api_ring - 1, pos = atomic_load_explicit(&spc.api_tail, memory_order_relaxed);
    for (;;) {
        struct api_slot *sl = &spc.api_ring[pos & mask];
        uint64_t seq = atomic_load_explicit(&sl->seq, memory_order_acquire);
        if (seq == pos) {
            if (atomic_compare_exchange_weak_explicit(&spc.api_tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                sl->rec = *w;
                atomic_store_explicit(&sl->seq, pos + 1, memory_order_release);
                if (!(pos & (mask >> 1)) && pos) wake_sender(); /* another half ring filled: drain it */
                return;
            }
        } else if (seq < pos) { /* the sender has not read this slot's last lap: full */
            atomic_fetch_add(&spc.st.dropped_backpressure, 1);
            return;
        } else {
            pos = atomic_load_explicit(&spc.api_tail, memory_order_relaxed);
        }
    }
}

/* An enter or exit callback of a kept driver (dom 0) or runtime (dom 1) call (cfg.api_cb). A call
 * gets its record if records were on when it entered (a window closing waits for such calls, as for
 * CUPTI's own records) or are on when it returns, as CUPTI makes its own at exit: a window that an
 * application thread opens while another thread is inside a launch can give that launch's kernels
 * GPU records, and then the launch needs its API record too. */
static void api_cb_note(int dom, spc_cbid cbid, const struct spc_callback_data *cd) {
    if (cbid >= SPC_MAX_CBID || !spc.kept_api[dom][cbid]) return;
    /* A driver call made inside a kept runtime call (cudaLaunchKernel's cuLaunchKernel) is the same
     * work: CUPTI's own records have only the runtime call's, whose correlation id the kernels carry.
     * A second record per launch cost the H200's eager loop 110,254 extra records in 1,000 cycles. */
    if (!dom && t_api_start[1]) return;
    if (cd->callbackSite == SPC_API_ENTER) {
        t_api_start[dom] = mono_ns();
        t_api_corr[dom] = cd->correlationId;
        t_api_on[dom] = (uint8_t)atomic_load_explicit(&spc.cb_api, memory_order_relaxed);
        return;
    }
    uint64_t start = t_api_start[dom], end = mono_ns();
    t_api_start[dom] = 0;
    int entered = start && t_api_corr[dom] == cd->correlationId;
    if (!(entered && t_api_on[dom]) && !atomic_load_explicit(&spc.cb_api, memory_order_relaxed)) return;
    /* A call that entered before the callbacks went on (a window opening) still gets its record, from
     * its exit: its launch lies in the agent's slack before it, and its kernels may have GPU records. */
    struct spw_api w = {.start = entered ? start : end,
                        .end = end,
                        .cbid = cbid,
                        .pid = spc.pid,
                        .tid = my_tid(),
                        .correlationID = cd->correlationId,
                        .result = cd->functionReturnValue ? *(const uint32_t *)cd->functionReturnValue : 0,
                        .domain = dom ? SPW_DOMAIN_RUNTIME : SPW_DOMAIN_DRIVER};
    api_ring_push(&w);
}

static void on_callback(void *ud, uint32_t domain, spc_cbid cbid, const void *data) {
    (void)ud;
    if (atomic_load_explicit(&spc.forked, memory_order_relaxed) || !data) return;
    if (atomic_load_explicit(&spc.cs, memory_order_relaxed) == CS_DETACH_REQ &&
        (domain == SPC_DOMAIN_DRIVER_API || domain == SPC_DOMAIN_RUNTIME_API) &&
        ((const struct spc_callback_data *)data)->callbackSite == SPC_API_EXIT) {
        int want = CS_DETACH_REQ;
        if (atomic_compare_exchange_strong(&spc.cs, &want, CS_FINALIZING)) {
            finalize_here();
            return;
        }
    }
    if (domain == SPC_DOMAIN_RUNTIME_API) { /* the kept calls with cfg.api_cb; else only to detach */
        if (cfg.api_cb) api_cb_note(1, cbid, data);
        return;
    }
    if (domain == SPC_DOMAIN_DRIVER_API) {
        const struct spc_callback_data *cd = data;
        if (cd->callbackSite == SPC_API_EXIT) { /* every tracked call: one relaxed load unless a switch is posted */
            int gs = atomic_load_explicit(&spc.gs, memory_order_relaxed);
            if ((gs == GS_WANT_ON || gs == GS_WANT_OFF) && cbid < SPC_MAX_CBID && spc.drain[cbid] &&
                atomic_load(&spc.cs) == CS_ATTACHED && pthread_mutex_trylock(&spc.cupti_mu) == 0) {
                if (atomic_compare_exchange_strong(&spc.gs, &gs, GS_APPLYING)) gpu_switch_here(gs == GS_WANT_ON);
                pthread_mutex_unlock(&spc.cupti_mu);
            }
        }
        /* After a switch made at this exit: CUPTI, too, makes its record of the call that switched at
         * its exit, with the kinds the switch set. */
        if (cfg.api_cb) api_cb_note(0, cbid, cd);
        int count = cbid < SPC_MAX_CBID && spc.counted[cbid] && atomic_load_explicit(&spc.count_inflight, memory_order_relaxed);
        unsigned gen = count ? atomic_load_explicit(&spc.inflight_gen, memory_order_relaxed) : 0;
        int tracked = cbid < SPC_MAX_CBID && spc.tracked[cbid];
        if (cd->callbackSite == SPC_API_ENTER) {
            if (tracked) t_corr = cd->correlationId, t_cbid = cbid;
            if (count && t_inflight_gen != gen + 1) {
                t_inflight_gen = gen + 1;
                atomic_fetch_add_explicit(&spc.inflight, 1, memory_order_relaxed);
            }
        } else {
            if (tracked) t_corr = 0, t_cbid = 0;
            if (count && t_inflight_gen == gen + 1) atomic_fetch_sub_explicit(&spc.inflight, 1, memory_order_relaxed);
            t_inflight_gen = 0;
        }
        return;
    }
    if (domain != SPC_DOMAIN_RESOURCE ||
        (cbid != SPC_CBID_RESOURCE_GRAPHNODE_CREATED && cbid != SPC_CBID_RESOURCE_GRAPHNODE_CLONED))
        return;
    if (!atomic_load_explicit(&spc.graphs, memory_order_relaxed)) atomic_store(&spc.graphs, 1);
    const struct spc_resource_data *rd = data;
    const struct spc_graph_data *gd = rd->resourceDescriptor;
    if (!gd || !spc.cupti.GetGraphNodeId) return;
    struct spw_graph_node r;
    memset(&r, 0, sizeof r);
    if (spc.cupti.GetGraphNodeId(gd->node, &r.nodeID) != SPC_SUCCESS) return;
    if (spc.cupti.GetGraphId && gd->graph) spc.cupti.GetGraphId(gd->graph, &r.graphID);
    if (cbid == SPC_CBID_RESOURCE_GRAPHNODE_CLONED) {
        r.op = SPW_GRAPH_NODE_CLONED;
        if (gd->originalNode) spc.cupti.GetGraphNodeId(gd->originalNode, &r.originalNodeID);
    } else {
        r.op = SPW_GRAPH_NODE_CREATED;
    }
    r.correlationID = t_corr;
    r.cbid = t_cbid;
    r.nodeType = gd->nodeType;
    r.tid = my_tid();
    /* Inside the driver call that made the node, after its eBPF entry probe: ties the node to
     * that launch without its API record (which exists only while an agent is connected). */
    r.timestamp = mono_ns();
    gn_append(&r);
}

/* CUPTI asks for a buffer (any thread). Never blocks: a pooled buffer, a new one while under the
 * cap, or none — CUPTI then drops records and counts them (cuptiActivityGetNumDroppedRecords). */
static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    if (!atomic_load(&spc.collecting) || atomic_load(&spc.forked)) {
        atomic_fetch_add(&spc.st.buffers_refused, 1);
        return;
    }
    uint8_t *b = NULL;
    int grow = 0;
    pthread_mutex_lock(&spc.bufs.mu);
    if (spc.bufs.nfree > 0)
        b = spc.bufs.free[--spc.bufs.nfree];
    else if (spc.bufs.nalloc < cfg.max_bufs) {
        spc.bufs.nalloc++;
        grow = 1;
    }
    pthread_mutex_unlock(&spc.bufs.mu);
    if (grow) {
        b = aligned_alloc(8, cfg.buf_size);
        if (!b) {
            pthread_mutex_lock(&spc.bufs.mu);
            spc.bufs.nalloc--;
            pthread_mutex_unlock(&spc.bufs.mu);
            LOG_ONCE(L_ALLOC, "cannot allocate a %zu-byte activity buffer; records will be dropped", cfg.buf_size);
        }
    }
    if (!b) {
        atomic_fetch_add(&spc.st.buffers_refused, 1);
        return;
    }
    *buffer = b;
    *size = cfg.buf_size;
}

void buffer_free(uint8_t *b) {
    pthread_mutex_lock(&spc.bufs.mu);
    if (spc.bufs.nfree < MAX_BUFS_LIMIT) {
        spc.bufs.free[spc.bufs.nfree++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&spc.bufs.mu);
    free(b);
}

/* CUPTI hands a buffer back (its worker thread, or the thread that flushes): queue it. */
static void buffer_completed(spc_cucontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    size_t dropped = 0;
    if (spc.cupti.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == SPC_SUCCESS && dropped)
        atomic_fetch_add(&spc.st.dropped_cupti, dropped);
    atomic_fetch_add(&spc.st.buffers_completed, 1);
    if (!buffer) return;
    pthread_mutex_lock(&spc.bufs.mu);
    if (spc.bufs.dn < MAX_BUFS_LIMIT) {
        spc.bufs.done[(spc.bufs.dhead + spc.bufs.dn) % MAX_BUFS_LIMIT] = (struct done_buf){buffer, valid};
        spc.bufs.dn++;
        buffer = NULL;
    }
    pthread_mutex_unlock(&spc.bufs.mu);
    if (buffer) free(buffer); /* cannot happen: at most max_bufs buffers exist */
    wake_sender();
}

static void fork_prepare(void) { pthread_mutex_lock(&spc.bufs.mu); }
static void fork_parent(void) { pthread_mutex_unlock(&spc.bufs.mu); }
static void fork_child(void) {
    /* The sender thread does not exist here and CUDA cannot be used from a forked child: off. */
    pthread_mutex_unlock(&spc.bufs.mu);
    atomic_store(&spc.forked, 1);
    atomic_store(&spc.collecting, 0);
    if (spc.out.fd >= 0) close(spc.out.fd); /* the parent's connection: never write to it from here */
    spc.out.fd = -1;
}

/* Subscribes to CUPTI and registers what collection needs. The clock first: CUPTI applies it
 * only to records of kinds enabled after registration. -1: not subscribed (said once). */
static int subscribe_cupti(void) {
    spc_result r = spc.cupti.Subscribe(&spc.sub, on_callback, NULL);
    if (r == SPC_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        LOG_ONCE(L_BUSY, "another CUPTI client is already subscribed in this process (torch.profiler/Kineto, "
                         "Nsight, ...); specprof steps aside and collects no GPU activity here");
        return -1;
    }
    if (r != SPC_SUCCESS) {
        LOG_ONCE(L_SUBSCRIBE, "cuptiSubscribe: %s; collection disabled", result_str(r));
        return -1;
    }
    r = spc.cupti.ActivityRegisterTimestampCallback ? spc.cupti.ActivityRegisterTimestampCallback(timestamp_cb)
                                                    : SPC_ERROR_NOT_SUPPORTED;
    if (r != SPC_SUCCESS) {
        if (!spc.cupti.GetTimestamp) {
            LOG_ONCE(L_TS, "cannot align CUPTI's clock with CLOCK_MONOTONIC (no timestamp callback, no "
                           "cuptiGetTimestamp); collection disabled");
            spc.cupti.Unsubscribe(spc.sub);
            return -1;
        }
        LOG_ONCE(L_TS, "cuptiActivityRegisterTimestampCallback: %s; converting CUPTI timestamps with a "
                       "measured CLOCK_MONOTONIC offset instead",
                 result_str(r));
        spc.clock = SPW_CLOCK_OFFSET;
        measure_offset();
    }
    /* CUPTI's default thread id is pthread_self() cut to 32 bits; the agent joins API records
     * with eBPF events by kernel thread id, which SYSTEM (gettid) gives. Without it the agent
     * cannot tell the threads apart, so say so once: launches then stay unjoined (counted). */
    r = spc.cupti.SetThreadIdType ? spc.cupti.SetThreadIdType(SPC_THREAD_ID_TYPE_SYSTEM) : SPC_ERROR_NOT_SUPPORTED;
    if (r != SPC_SUCCESS)
        LOG_ONCE(L_TID, "cuptiSetThreadIdType(SYSTEM): %s; CUPTI thread ids will not match kernel thread ids "
                        "and launches will not be joined to GPU records",
                 result_str(r));
    r = spc.cupti.ActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != SPC_SUCCESS) {
        LOG_ONCE(L_REGISTER, "cuptiActivityRegisterCallbacks: %s; collection disabled", result_str(r));
        spc.cupti.Unsubscribe(spc.sub);
        return -1;
    }
    /* Graph-node callbacks stay on while subscribed: they are rare (capture, instantiation) and a
     * late agent gets the whole retained mapping. */
    (void)spc.cupti.EnableCallback(1, spc.sub, SPC_DOMAIN_RESOURCE, SPC_CBID_RESOURCE_GRAPHNODE_CREATED);
    (void)spc.cupti.EnableCallback(1, spc.sub, SPC_DOMAIN_RESOURCE, SPC_CBID_RESOURCE_GRAPHNODE_CLONED);
    return 0;
}

static void init(void) {
    config_read();
    if (cfg.disabled) return;
    char found[1024] = "";
    void *h = load_cupti(found, sizeof found);
    if (!h) {
        LOG_ONCE(L_NOLIB,
                 "libcupti not found (set SPECPROF_CUPTI_LIB; searched the mapped libraries, /usr/local/cuda*, "
                 "nvidia-cuda-cupti in site-packages and the loader path); GPU activity is not collected");
        return;
    }
    if (resolve(h) < 0 || check_version(found) < 0) return;
    if (cfg.graph_cap) { /* untouched pages cost nothing */
        void *m = mmap(NULL, (size_t)cfg.graph_cap * sizeof(struct gn_slot), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        spc.gn = m == MAP_FAILED ? NULL : m;
    }
    /* Before any callback can run: on_callback reads it on application threads, unlocked (the
     * windows' sender used to rewrite it while they ran). */
    for (size_t i = 0; i < n_tracked_cbids; i++)
        spc.tracked[tracked_cbids[i]] = spc.counted[tracked_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof kept_driver_cbids / sizeof kept_driver_cbids[0]; i++)
        if (kept_driver_cbids[i] < SPC_MAX_CBID) spc.counted[kept_driver_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof drain_cbids / sizeof drain_cbids[0]; i++) spc.drain[drain_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof kept_driver_cbids / sizeof kept_driver_cbids[0]; i++)
        if (kept_driver_cbids[i] < SPC_MAX_CBID) spc.kept_api[0][kept_driver_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof kept_runtime_cbids / sizeof kept_runtime_cbids[0]; i++)
        if (kept_runtime_cbids[i] < SPC_MAX_CBID) spc.kept_api[1][kept_runtime_cbids[i]] = 1;
    spc.pid = (uint32_t)getpid();
    if (cfg.api_cb) {
        spc.api_ring = calloc(cfg.api_ring, sizeof *spc.api_ring);
        if (!spc.api_ring) {
            logmsg("cannot allocate the API record ring (%u slots); using CUPTI's activity records", cfg.api_ring);
            cfg.api_cb = 0;
        } else {
            for (uint32_t i = 0; i < cfg.api_ring; i++) atomic_store_explicit(&spc.api_ring[i].seq, i, memory_order_relaxed);
        }
    }
    if (subscribe_cupti() < 0) return;
    spc.out.b = malloc(cfg.out_cap);
    spc.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!spc.out.b || spc.efd < 0) {
        LOG_ONCE(L_ALLOC, "cannot allocate the sender's buffers; collection disabled");
        spc.cupti.Unsubscribe(spc.sub);
        return;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&spc.exit_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store(&spc.active, 1);
    /* An agent already listening gets everything from the first API call on. */
    (void)try_connect(1);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(sender_at_exit);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, sender_main, NULL) != 0) {
        LOG_ONCE(L_ALLOC, "cannot start the sender thread; collection disabled");
        if (spc.out.fd >= 0) {
            disable_collection();
            close(spc.out.fd);
            spc.out.fd = -1;
        }
        atomic_store(&spc.active, 0);
    } else {
        pthread_setname_np(t, "specprof-cupti");
    }
    pthread_attr_destroy(&attr);
}

/* Called by the CUDA driver (cuInit) when CUDA_INJECTION64_PATH names this library. Always
 * reports success: a failure here must never become the application's failure. */
EXPORT int InitializeInjection(void) {
    static atomic_int once;
    if (atomic_exchange(&once, 1)) return 1;
    init();
    return 1;
}
