/*
 * libspecprof_cupti.so — specprof's CUPTI injection library.
 *
 * The CUDA driver loads it through CUDA_INJECTION64_PATH and calls InitializeInjection from
 * cuInit. It subscribes to CUPTI, converts activity records into specprof's wire format
 * (../wire.h) and streams them over a unix socket to the agent (SPECPROF_SOCKET).
 *
 * Never harm the target (design §8):
 *   - Nothing on an application or CUPTI thread blocks or does socket I/O: CUPTI's completed
 *     buffers go to a short mutex-protected queue, graph-node events to a lock-free table; the
 *     library's own sender thread converts and sends, with non-blocking sends and short polls.
 *   - No agent, slow agent, dead agent: records are dropped and counted (STATS), never waited on.
 *     Activity collection is enabled only while an agent is connected.
 *   - SIGPIPE cannot fire (MSG_NOSIGNAL). CUPTI errors are logged once (stderr, "specprof-cupti:")
 *     and switch the library off; it never exits or aborts the host.
 *   - Another CUPTI subscriber (torch.profiler, Nsight): step aside, once, clearly.
 *   - fork: the child inherits no sender thread and collects nothing.
 *   - exit: one forced flush and at most 200 ms for the sender to deliver.
 *   - SPECPROF_CUPTI_DETACH=1: once the library has nothing more to trace (the last of
 *     SPECPROF_CUPTI_WINDOWS duty windows closed, or no agent listens), CUPTI itself is detached
 *     (cuptiFinalize), because a subscribed CUPTI costs the application on every CUDA call even
 *     with no activity kind enabled. The detach is final: on the H200 (CUDA 13.0) a process that
 *     replays CUDA graphs failed its next graph launches after CUPTI was attached again. CUPTI
 *     requires cuptiFinalize to run in an API exit callback, so one application thread waits for
 *     it (a context synchronisation and CUPTI's teardown): that wait is measured (STATS).
 */
#define _GNU_SOURCE
#include "cupti_min.h"
#include "api_filter.h"
#include "../wire.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define DEFAULT_SOCKET "/run/specprof/cupti.sock"
#define EXIT_BUDGET_NS 200000000ull /* atexit: at most 200 ms for the sender to deliver */
#define MAX_BUFS_LIMIT 256
#define STATS_PERIOD_NS 1000000000ull
#define CONGESTION_WAIT_MS 5

/* Supported cuptiGetVersion ranges: see cupti_min.h for the record versions each one emits. */
#define API_MIN_12 18u     /* CUDA 11.8 and 12.0 */
#define API_MAX_12 28u     /* CUDA 12.9 */
#define API_MIN_13 130000u /* CUDA 13.0.x */
#define API_MAX_13 130099u

/* ------------------------------------------------------------------------------------------ */
/* Configuration and logging                                                                  */

/* Record-type bits of the kinds the user asked for (SPECPROF_CUPTI_KINDS). */
#define K_KERNEL (1u << SPW_KERNEL)
#define K_MEMCPY (1u << SPW_MEMCPY)
#define K_MEMSET (1u << SPW_MEMSET)
#define K_API (1u << SPW_API)
#define K_SYNC (1u << SPW_SYNC)
#define K_OVERHEAD (1u << SPW_OVERHEAD)
#define K_ALL (K_KERNEL | K_MEMCPY | K_MEMSET | K_API | K_SYNC | K_OVERHEAD)
/* Graph-level tracing (not in "all"): one record per graph launch instead of one per node. */
#define K_GRAPH (1u << SPW_GRAPH_EXEC)

static struct {
    char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint32_t kinds;
    size_t buf_size;
    int max_bufs;
    uint64_t flush_ns;
    uint64_t retry_ns;
    uint32_t graph_cap;
    size_t out_cap; /* sender's output buffer */
    int debug;
    int all_api; /* SPECPROF_CUPTI_API=all: records of every driver/runtime call, not only work */
    /* SPECPROF_CUPTI_DUTY=ON_MS/PERIOD_MS: GPU activity (kernels, copies, sets) is traced only in
     * windows of ON_MS every PERIOD_MS while an agent listens; 0: always. */
    uint64_t duty_on_ns, duty_period_ns;
    int detach;           /* SPECPROF_CUPTI_DETACH=1: finalize CUPTI once nothing more is traced */
    uint32_t max_windows; /* SPECPROF_CUPTI_WINDOWS=N: at most N duty windows; 0: no limit */
    /* SPECPROF_CUPTI_GRAPH_DETACH: what a detach does in a process that built CUDA graphs, which
     * cuptiFinalize breaks (see g_graphs): "quiet" (default) turns every callback off and stays
     * subscribed; "unsubscribe" also drops the subscription (cuptiUnsubscribe, no finalize). */
    int graph_unsub;
    /* SPECPROF_CUPTI_DUTY_START=cycles: a duty window opens only when the agent says the process is
     * running its decode cycles (SPW_CMD_WINDOW), no sooner than a period after the last one opened;
     * "now" (default): the first window opens as soon as an agent listens. Windows at start fall on
     * model loading and warm-up, or on a server waiting for requests. */
    int duty_gated;
    /* Cost experiments (bench/gpu/launchcost_h200.sh): SPECPROF_CUPTI_LAUNCH_CALLBACKS=0 leaves the
     * launch callbacks off (graph nodes are then tied to their launch by time only);
     * SPECPROF_CUPTI_CLOCK=offset converts timestamps with a measured offset instead of CUPTI
     * calling back for each one. */
    int no_launch_cb;
    int clock_offset;
    /* SPECPROF_CUPTI_SUBSCRIBE=0 (a cost experiment): the activity API alone, without cuptiSubscribe:
     * no callbacks at all, so no duty cycling, no detach, no late agent's GPU records, and graph nodes
     * are not tied to their creating launch. It saves little of full tracing's cost (docs/overhead.md). */
    int no_subscribe;
    uint32_t duty_mask; /* SPECPROF_CUPTI_DUTY_KINDS: the kinds windows switch (default all of K_WINDOWED) */
    int duty_graphs;    /* SPECPROF_CUPTI_DUTY_GRAPHS (default 1); 0: no window opens in a process that has
                         * built CUDA graphs (see g_duty_stopped) */
    /* SPECPROF_CUPTI_API_SOURCE=callbacks (the default with duty-cycled tracing): the API records of
     * the work calls are made by this library in CUPTI's enter and exit callbacks (timestamps from
     * CLOCK_MONOTONIC, the correlation id CUPTI hands the callback) instead of CUPTI's DRIVER and
     * RUNTIME activity kinds, which are never enabled, so windows never switch them (see
     * read_config). With every kernel traced it saves nothing measurable, so there CUPTI's own
     * records stay the default. */
    int api_cb;
    uint32_t api_ring; /* SPECPROF_CUPTI_API_RING: slots of the callbacks' record ring (power of 2) */
} cfg;

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...) {
    char b[512];
    int n = snprintf(b, sizeof b, "specprof-cupti: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(b + n, sizeof b - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof b - 2) n = (int)sizeof b - 2;
    b[n++] = '\n';
    ssize_t w = write(2, b, (size_t)n); /* one write: lines from several processes stay whole */
    (void)w;
}

/* Logs each distinct message at most once per process. */
enum { L_NOLIB, L_VERSION, L_BUSY, L_SUBSCRIBE, L_REGISTER, L_TS, L_TID, L_FILTER, L_ENABLE, L_LAYOUT, L_SOCKET, L_ALLOC,
       L_GETNEXT, L_DETACH, L_NOSUB, L_NUM };
static atomic_int logged[L_NUM];
#define LOG_ONCE(id, ...)                                          \
    do {                                                           \
        if (!atomic_exchange(&logged[id], 1)) logmsg(__VA_ARGS__); \
    } while (0)
#define DEBUG(...)                           \
    do {                                     \
        if (cfg.debug) logmsg(__VA_ARGS__);  \
    } while (0)

static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v < lo || v > hi) return def;
    return v;
}

/* A variable that picks one of two words: 1 for `alt`, 0 for `def`, unset or anything else (logged,
 * with what happens instead). */
static int env_choice(const char *name, const char *def, const char *alt, const char *instead) {
    const char *s = getenv(name);
    if (!s || !*s || !strcmp(s, def)) return 0;
    if (!strcmp(s, alt)) return 1;
    logmsg("%s=%s: want %s or %s; %s", name, s, def, alt, instead);
    return 0;
}

static uint32_t parse_kinds(const char *s) {
    if (!s || !*s) return K_ALL;
    uint32_t k = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(t, "kernel")) k |= K_KERNEL;
        else if (!strcmp(t, "memcpy")) k |= K_MEMCPY;
        else if (!strcmp(t, "memset")) k |= K_MEMSET;
        else if (!strcmp(t, "api")) k |= K_API;
        else if (!strcmp(t, "sync")) k |= K_SYNC;
        else if (!strcmp(t, "overhead")) k |= K_OVERHEAD;
        else if (!strcmp(t, "all")) k |= K_ALL;
        else if (!strcmp(t, "graph")) k |= K_GRAPH;
    }
    return k;
}

static void read_config(void) {
    const char *p = getenv("SPECPROF_SOCKET");
    if (!p || !*p) p = DEFAULT_SOCKET;
    if (strlen(p) >= sizeof cfg.socket_path) {
        LOG_ONCE(L_SOCKET, "SPECPROF_SOCKET is longer than %zu bytes; using %s", sizeof cfg.socket_path - 1,
                 DEFAULT_SOCKET);
        p = DEFAULT_SOCKET;
    }
    snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", p);
    cfg.kinds = parse_kinds(getenv("SPECPROF_CUPTI_KINDS"));
    cfg.buf_size = (size_t)env_u64("SPECPROF_CUPTI_BUFFER_KB", 1024, 16, 65536) * 1024;
    cfg.max_bufs = (int)env_u64("SPECPROF_CUPTI_BUFFERS", 16, 2, MAX_BUFS_LIMIT);
    cfg.flush_ns = env_u64("SPECPROF_CUPTI_FLUSH_MS", 100, 1, 60000) * 1000000ull;
    cfg.retry_ns = env_u64("SPECPROF_CUPTI_RETRY_MS", 500, 10, 600000) * 1000000ull;
    cfg.graph_cap = (uint32_t)env_u64("SPECPROF_CUPTI_GRAPH_NODES", 262144, 0, 1u << 24);
    cfg.out_cap = (size_t)env_u64("SPECPROF_CUPTI_SEND_BUFFER_KB", 4096, 64, 1u << 20) * 1024;
    cfg.debug = env_u64("SPECPROF_CUPTI_DEBUG", 0, 0, 1) != 0;
    cfg.all_api = getenv("SPECPROF_CUPTI_API") && !strcmp(getenv("SPECPROF_CUPTI_API"), "all");
    cfg.detach = env_u64("SPECPROF_CUPTI_DETACH", 0, 0, 1) != 0;
    cfg.max_windows = (uint32_t)env_u64("SPECPROF_CUPTI_WINDOWS", 0, 0, 1u << 30);
    cfg.duty_gated = env_choice("SPECPROF_CUPTI_DUTY_START", "now", "cycles", "opening windows from the start");
    cfg.graph_unsub = env_choice("SPECPROF_CUPTI_GRAPH_DETACH", "quiet", "unsubscribe", "using quiet");
    cfg.duty_mask = getenv("SPECPROF_CUPTI_DUTY_KINDS") ? parse_kinds(getenv("SPECPROF_CUPTI_DUTY_KINDS")) : K_ALL | K_GRAPH;
    cfg.no_launch_cb = env_u64("SPECPROF_CUPTI_LAUNCH_CALLBACKS", 1, 0, 1) == 0;
    cfg.clock_offset = getenv("SPECPROF_CUPTI_CLOCK") && !strcmp(getenv("SPECPROF_CUPTI_CLOCK"), "offset");
    cfg.no_subscribe = env_u64("SPECPROF_CUPTI_SUBSCRIBE", 1, 0, 1) == 0;
    cfg.duty_graphs = env_u64("SPECPROF_CUPTI_DUTY_GRAPHS", 1, 0, 1) != 0;
    const char *src = getenv("SPECPROF_CUPTI_API_SOURCE");
    int src_set = src && *src;
    if (src_set && strcmp(src, "activity")) {
        if (!strcmp(src, "callbacks"))
            cfg.api_cb = 1;
        else
            logmsg("SPECPROF_CUPTI_API_SOURCE=%s: want activity or callbacks; using CUPTI's activity records", src);
    }
    if (cfg.api_cb && cfg.no_subscribe) {
        logmsg("SPECPROF_CUPTI_API_SOURCE=callbacks needs CUPTI's callbacks (SPECPROF_CUPTI_SUBSCRIBE=0); using "
               "CUPTI's activity records");
        cfg.api_cb = 0;
    }
    uint64_t ring = env_u64("SPECPROF_CUPTI_API_RING", 65536, 1024, 1u << 22);
    for (cfg.api_ring = 1024; cfg.api_ring < ring;) cfg.api_ring <<= 1;
    const char *duty = getenv("SPECPROF_CUPTI_DUTY");
    if (cfg.no_subscribe && ((duty && *duty) || cfg.detach)) {
        /* Switching the GPU kinds safely needs an application thread's callback (see g_gs). */
        logmsg("SPECPROF_CUPTI_SUBSCRIBE=0: no duty cycling and no detach without callbacks; tracing GPU activity "
               "all the time");
        duty = NULL;
        cfg.detach = 0;
    }
    if (duty && *duty && (cfg.kinds & K_GRAPH)) {
        /* On the H200 every graph-loop run whose graph-level tracing was switched by windows crashed
         * in a graph launch (3 of 3, the switch made on the launching thread): never switch it. */
        logmsg("SPECPROF_CUPTI_DUTY=%s with graph-level tracing: switching it crashes CUDA graph launches; "
               "tracing GPU activity all the time",
               duty);
        duty = NULL;
    }
    if (duty && *duty) {
        unsigned long long on = 0, period = 0;
        if (sscanf(duty, "%llu/%llu", &on, &period) == 2 && on > 0 && period >= on && period <= 3600000)
            cfg.duty_on_ns = on * 1000000ull, cfg.duty_period_ns = period * 1000000ull;
        else
            logmsg("SPECPROF_CUPTI_DUTY=%s: want ON_MS/PERIOD_MS with 0 < ON_MS <= PERIOD_MS; tracing GPU activity "
                   "all the time",
                   duty);
    }
    /* Duty-cycled, the API records come from the callbacks unless asked otherwise: switching CUPTI's
     * DRIVER and RUNTIME kinds on and off leaves CUPTI 13.0 giving one correlation id to every later
     * call and kernel of the switching thread, so the windows' launches lose their join; with those
     * kinds never enabled none does (docs/overhead.md, known hazards). */
    if (cfg.duty_on_ns && !src_set && !cfg.no_subscribe) cfg.api_cb = 1;
    if (cfg.duty_on_ns && src_set && !cfg.api_cb)
        logmsg("SPECPROF_CUPTI_API_SOURCE=activity with duty-cycled tracing: switching CUPTI's API kinds can leave "
               "it giving every later call one correlation id (their GPU work then lost, and counted)");
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The timestamp CUPTI puts in every record: CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns. */
static uint64_t timestamp_cb(void) { return mono_ns(); }

static uint32_t my_tid(void) {
    static __thread uint32_t tid;
    if (!tid) tid = (uint32_t)syscall(SYS_gettid);
    return tid;
}

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                      */

static struct spc_api_table C; /* CUPTI entry points */
static uint32_t g_cupti_version;
static spc_subscriber g_sub;
static int g_clock = SPW_CLOCK_CALLBACK;
static _Atomic int64_t g_offset; /* SPW_CLOCK_OFFSET: CUPTI time - CLOCK_MONOTONIC */

static atomic_int g_active;     /* initialized and not switched off */
static atomic_int g_collecting; /* an agent is connected: kinds enabled, buffers granted */
static atomic_int g_forked;     /* we are a forked child: do nothing */
static atomic_int g_shutdown;   /* exit in progress: no more CUPTI calls from the sender */

/* Detach (cfg.detach). CUPTI allows cuptiFinalize only from an API exit callback: the sender asks
 * (DETACH_REQ, with the API domains' callbacks on), the first application thread to leave a CUDA
 * call takes the request (FINALIZING) and detaches (DETACHED, final). While not ATTACHED no thread
 * calls into CUPTI, which would initialise it again without our subscription. */
enum { CS_ATTACHED, CS_DETACH_REQ, CS_FINALIZING, CS_DETACHED };
static atomic_int g_cs;
static int g_detach_pending;  /* sender: a request made and not yet seen through */
static int g_detach_off;      /* sender: cuptiFinalize failed or is missing: stay attached */
static uint32_t g_windows;    /* sender: duty windows opened */
static int g_no_detach;       /* under detach_mu: exit began, no new request */
static pthread_mutex_t detach_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_ullong g_detaches, g_detach_stall_ns, g_detach_refused;
/* 1: instead of a finalize, every callback went off (quiet); 2: and the subscription went too. */
static atomic_ullong g_detach_quiet;
/* 1: windows stopped opening because the process had built CUDA graphs (SPECPROF_CUPTI_DUTY_GRAPHS=0
 * only). Switching at the exit of any call crashed graph processes (see g_gs); switching only where
 * the application waits for the GPU does not, so graph processes switch too by default. */
static atomic_ullong g_duty_stopped;
/* A CUDA graph node was created or cloned while CUPTI was subscribed. Launches of such graphs fail
 * once CUPTI is finalized (CUPTI 13.0; PyTorch's profiler skips its CUPTI teardown when graphs are
 * used, pytorch#112507), also when the graphs were captured before any window and only replayed in
 * one (docs/overhead.md, known hazards), so a process with graphs is never finalized: its detach
 * turns CUPTI quiet instead (quiet_cupti). */
static atomic_int g_graphs;
static const char refused_msg[] = "not finalizing CUPTI: this process has built CUDA graphs, whose launches fail after "
                                  "cuptiFinalize; every CUPTI callback turned off instead";

/* CUPTI may be called: attached, and no detach asked for (sender thread). */
static int cupti_usable(void) { return !g_detach_pending && atomic_load(&g_cs) == CS_ATTACHED; }

/* Counters behind STATS (cumulative). */
static struct {
    atomic_ullong delivered, dropped_cupti, dropped_no_agent, dropped_backpressure, dropped_disconnect,
        dropped_graph, buffers_completed, buffers_refused, bytes_sent, unknown, connects, names_dropped;
} st;

/* Activity buffers: a pool of at most cfg.max_bufs, and the queue of completed ones. */
struct done_buf {
    uint8_t *buf;
    size_t valid;
};
static struct {
    pthread_mutex_t mu;
    uint8_t *free[MAX_BUFS_LIMIT];
    int nfree, nalloc;
    struct done_buf done[MAX_BUFS_LIMIT];
    int dhead, dn;
} bq = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int g_efd = -1;              /* eventfd that wakes the sender */
static atomic_int g_sender_waiting; /* the sender sleeps in poll: wake it */

/* Exit handshake between atexit and the sender. */
static pthread_mutex_t exit_mu = PTHREAD_MUTEX_INITIALIZER;
/* Held by the sender while it calls CUPTI (flush, buffers, kinds, callbacks), and taken with trylock by
 * the application thread that applies a posted switch: the two never call into CUPTI at the same time,
 * and the application thread never waits (busy: the next call's exit applies the switch). */
static pthread_mutex_t cupti_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t exit_cv; /* on CLOCK_MONOTONIC, set up in init */
static atomic_int g_exit_req;
static int g_exit_done; /* under exit_mu */
static uint64_t g_exit_deadline;

static void wake_sender(void) {
    if (g_efd >= 0 && atomic_load(&g_sender_waiting)) {
        uint64_t one = 1;
        ssize_t w = write(g_efd, &one, sizeof one); /* non-blocking eventfd: never waits */
        (void)w;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Graph nodes: a lock-free append-only table written from CUPTI callbacks on application      */
/* threads, read by the sender. It is kept, so every new connection gets the whole mapping     */
/* (graphs are usually captured at startup, before a late agent connects).                     */

struct gn_slot {
    struct spw_graph_node rec;
    atomic_int ready;
};
static struct gn_slot *g_gn;
static atomic_uint g_gn_n;

static void gn_append(const struct spw_graph_node *r) {
    if (!g_gn) return;
    unsigned i = atomic_fetch_add(&g_gn_n, 1);
    if (i >= cfg.graph_cap) {
        atomic_fetch_add(&st.dropped_graph, 1);
        return;
    }
    g_gn[i].rec = *r;
    atomic_store_explicit(&g_gn[i].ready, 1, memory_order_release);
}

/* ------------------------------------------------------------------------------------------ */
/* CUPTI callbacks                                                                            */

/* Driver API calls during which graph nodes get created or cloned: their enter callback records
 * the correlation id that a GRAPHNODE_CREATED/CLONED callback (issued between enter and exit)
 * attributes the node to. Numbers from cupti_driver_cbid.h (stable across versions; a cbid a
 * CUPTI version does not know is skipped when enabling). */
static const uint16_t tracked_cbids[] = {
    60,  62,  64,  66,  67,  68,  69,  115, 116, 117, 216, 218, 220, 222, 224, 226, /* legacy async copies, launches */
    277, 279, 281, 283, 289, 291, 293, 306, 307, 319, 321,                         /* _v2 async copies, cuLaunchKernel */
    418, 419, 420, 421, 422, 423, 424, 425, 426, 427, 428, 429, 430, 431, 432, 433, /* _ptsz async copies/sets */
    442, 477, 478, 480,                                                             /* launches */
    502, 504, 506, 513, 523, 525, 526, 527, 528, 530, 538, 561, 578, 589, 590,     /* graph building */
    618, 621, 638, 639, 643, 652, 653, 656, 657, 669, 689, 692, 696, 712, 713, 714, 720, 721, 723,
    776, 777, 778, 779, 796, 797, 798, 799, /* batched async copies (12.8+) */
};

static __thread uint32_t t_corr, t_cbid;

/* Beyond the highest cbid of any CUPTI so far (13.0: under 800 driver, under 500 runtime); CUPTI
 * refuses the ids it does not know, which costs nothing. */
#define SPC_MAX_CBID 1024
static uint8_t g_tracked[SPC_MAX_CBID]; /* tracked_cbids as a set (written once, in init) */
static uint8_t g_counted[SPC_MAX_CBID]; /* the calls counted in flight: tracked and kept driver calls */
/* The driver calls that return only once the GPU work before them is done (context, stream and event
 * synchronisation, synchronous device-to-host copies: cupti_driver_cbid.h): a posted switch is applied
 * at their exit only. On the H200, switching CUPTI's GPU kinds at the exit of any call (a launch's
 * included) crashed the eager and the graph loop alike (13 of 15 runs with 2 ms windows every 10 ms:
 * heap corruption, SIGSEGV in the interpreter), whichever thread switched; with the kernels of the
 * switching thread's stream all done, nothing of theirs is in flight. Work on other streams may be. */
static const uint16_t drain_cbids[] = {17, 45, 121, 126, 278, 305, 398, 408, 440, 800};
static uint8_t g_drain[SPC_MAX_CBID];

/* Tracked driver calls in progress (duty-cycled tracing): a window closes only once the calls that
 * may have made GPU records have returned and so have their API records. A generation bumped at each
 * window opening discards calls that entered in an earlier one (their exit callback may never
 * come once the callbacks are off). */
static atomic_int g_inflight;
static atomic_uint g_inflight_gen;
static atomic_int g_count_inflight; /* duty-cycled only: no shared counter on other launches' path */
static __thread unsigned t_inflight_gen; /* generation + 1 of this thread's call in progress, 0: none */

static void finalize_here(void);

/* Switching the GPU activity kinds (kernels, copies, sets) on an application thread. On the H200,
 * switching them while GPU work was in flight crashed the process (heap corruption: SIGSEGV, SIGABRT),
 * from the sender (6 of 8 graph-loop runs with 2 ms windows every 10 ms; 0 of 4 with only the API
 * kinds switched) and from the exit of any driver call of the application thread alike (13 of 15 eager
 * and graph runs). So the sender never switches them: it posts the switch and turns on the callbacks
 * of the calls that wait for the GPU (g_drain), and the next application thread that leaves one
 * applies it there: 0 of 6 runs crashed (5,800 switches in the eager loop, 1,500 in the graph loop).
 * Work of other streams or threads may still be in flight then: a smaller risk that remains. */
enum { GS_IDLE, GS_WANT_ON, GS_WANT_OFF, GS_APPLYING };
static atomic_int g_gs = GS_IDLE;
static uint32_t g_gs_kinds;       /* the record-type bits a switch applies to (set before posting) */
static atomic_int g_gpu_on;       /* those kinds are enabled, as last applied */
static _Atomic uint64_t g_gs_at;  /* the last switch: after enabling, or before disabling */
static atomic_ullong g_gs_count, g_gs_ns, g_gs_max_ns; /* switches applied, application threads' time */
static void gpu_switch_here(int on);

/* API records made in callbacks (cfg.api_cb): application threads push them into a bounded ring
 * (a sequence number per slot: lock-free, never waits; a full ring drops the record and counts it as
 * backpressure), the sender pops them. */
struct api_slot {
    _Atomic uint64_t seq; /* == position + 1: filled; == position: free for that position */
    struct spw_api rec;
};
static struct api_slot *g_api_ring;
static _Atomic uint64_t g_api_tail; /* next position to claim (application threads) */
static uint64_t g_api_head;         /* next position to read (sender) */
static atomic_int g_cb_api;         /* the callbacks make API records now (collecting, in a window) */
static uint8_t g_kept_api[2][SPC_MAX_CBID]; /* api_filter.h as sets: [0] driver, [1] runtime */
static uint32_t g_pid;
/* This thread's driver [0] and runtime [1] call in progress (a runtime call holds at most one
 * driver call that CUPTI reports): its enter time (0: none seen), correlation id, and whether
 * records were on when it entered. */
static __thread uint64_t t_api_start[2];
static __thread uint32_t t_api_corr[2];
static __thread uint8_t t_api_on[2];

static void api_ring_push(const struct spw_api *w) {
    uint64_t mask = cfg.api_ring - 1, pos = atomic_load_explicit(&g_api_tail, memory_order_relaxed);
    for (;;) {
        struct api_slot *sl = &g_api_ring[pos & mask];
        uint64_t seq = atomic_load_explicit(&sl->seq, memory_order_acquire);
        if (seq == pos) {
            if (atomic_compare_exchange_weak_explicit(&g_api_tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                sl->rec = *w;
                atomic_store_explicit(&sl->seq, pos + 1, memory_order_release);
                if (!(pos & (mask >> 1)) && pos) wake_sender(); /* another half ring filled: drain it */
                return;
            }
        } else if (seq < pos) { /* the sender has not read this slot's last lap: full */
            atomic_fetch_add(&st.dropped_backpressure, 1);
            return;
        } else {
            pos = atomic_load_explicit(&g_api_tail, memory_order_relaxed);
        }
    }
}

/* Sender: whether half the ring or more is filled. */
static int api_ring_half(void) {
    return g_api_ring && atomic_load_explicit(&g_api_tail, memory_order_relaxed) - g_api_head >= cfg.api_ring / 2;
}

/* Sender: the next record of the ring, 0 if none. */
static int api_ring_pop(struct spw_api *w) {
    if (!g_api_ring) return 0;
    struct api_slot *sl = &g_api_ring[g_api_head & (cfg.api_ring - 1)];
    if (atomic_load_explicit(&sl->seq, memory_order_acquire) != g_api_head + 1) return 0;
    *w = sl->rec;
    atomic_store_explicit(&sl->seq, g_api_head + cfg.api_ring, memory_order_release);
    g_api_head++;
    return 1;
}

/* An enter or exit callback of a kept driver (dom 0) or runtime (dom 1) call (cfg.api_cb). A call
 * gets its record if records were on when it entered (a window closing waits for such calls, as for
 * CUPTI's own records) or are on when it returns, as CUPTI makes its own at exit: a window that an
 * application thread opens while another thread is inside a launch can give that launch's kernels
 * GPU records, and then the launch needs its API record too. */
static void api_cb_note(int dom, spc_cbid cbid, const struct spc_callback_data *cd) {
    if (cbid >= SPC_MAX_CBID || !g_kept_api[dom][cbid]) return;
    /* A driver call made inside a kept runtime call (cudaLaunchKernel's cuLaunchKernel) is the same
     * work: CUPTI's own records have only the runtime call's, whose correlation id the kernels carry.
     * A second record per launch cost the H200's eager loop 110,254 extra records in 1,000 cycles. */
    if (!dom && t_api_start[1]) return;
    if (cd->callbackSite == SPC_API_ENTER) {
        t_api_start[dom] = mono_ns();
        t_api_corr[dom] = cd->correlationId;
        t_api_on[dom] = (uint8_t)atomic_load_explicit(&g_cb_api, memory_order_relaxed);
        return;
    }
    uint64_t start = t_api_start[dom], end = mono_ns();
    t_api_start[dom] = 0;
    int entered = start && t_api_corr[dom] == cd->correlationId;
    if (!(entered && t_api_on[dom]) && !atomic_load_explicit(&g_cb_api, memory_order_relaxed)) return;
    /* A call that entered before the callbacks went on (a window opening) still gets its record, from
     * its exit: its launch lies in the agent's slack before it, and its kernels may have GPU records. */
    struct spw_api w = {.start = entered ? start : end,
                        .end = end,
                        .cbid = cbid,
                        .pid = g_pid,
                        .tid = my_tid(),
                        .correlationID = cd->correlationId,
                        .result = cd->functionReturnValue ? *(const uint32_t *)cd->functionReturnValue : 0,
                        .domain = dom ? SPW_DOMAIN_RUNTIME : SPW_DOMAIN_DRIVER};
    api_ring_push(&w);
}

static void on_callback(void *ud, uint32_t domain, spc_cbid cbid, const void *data) {
    (void)ud;
    if (atomic_load_explicit(&g_forked, memory_order_relaxed) || !data) return;
    if (atomic_load_explicit(&g_cs, memory_order_relaxed) == CS_DETACH_REQ &&
        (domain == SPC_DOMAIN_DRIVER_API || domain == SPC_DOMAIN_RUNTIME_API) &&
        ((const struct spc_callback_data *)data)->callbackSite == SPC_API_EXIT) {
        int want = CS_DETACH_REQ;
        if (atomic_compare_exchange_strong(&g_cs, &want, CS_FINALIZING)) {
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
            int gs = atomic_load_explicit(&g_gs, memory_order_relaxed);
            if ((gs == GS_WANT_ON || gs == GS_WANT_OFF) && cbid < SPC_MAX_CBID && g_drain[cbid] &&
                atomic_load(&g_cs) == CS_ATTACHED && pthread_mutex_trylock(&cupti_mu) == 0) {
                if (atomic_compare_exchange_strong(&g_gs, &gs, GS_APPLYING)) gpu_switch_here(gs == GS_WANT_ON);
                pthread_mutex_unlock(&cupti_mu);
            }
        }
        /* After a switch made at this exit: CUPTI, too, makes its record of the call that switched at
         * its exit, with the kinds the switch set. */
        if (cfg.api_cb) api_cb_note(0, cbid, cd);
        int count = cbid < SPC_MAX_CBID && g_counted[cbid] && atomic_load_explicit(&g_count_inflight, memory_order_relaxed);
        unsigned gen = count ? atomic_load_explicit(&g_inflight_gen, memory_order_relaxed) : 0;
        int tracked = cbid < SPC_MAX_CBID && g_tracked[cbid];
        if (cd->callbackSite == SPC_API_ENTER) {
            if (tracked) t_corr = cd->correlationId, t_cbid = cbid;
            if (count && t_inflight_gen != gen + 1) {
                t_inflight_gen = gen + 1;
                atomic_fetch_add_explicit(&g_inflight, 1, memory_order_relaxed);
            }
        } else {
            if (tracked) t_corr = 0, t_cbid = 0;
            if (count && t_inflight_gen == gen + 1) atomic_fetch_sub_explicit(&g_inflight, 1, memory_order_relaxed);
            t_inflight_gen = 0;
        }
        return;
    }
    if (domain != SPC_DOMAIN_RESOURCE ||
        (cbid != SPC_CBID_RESOURCE_GRAPHNODE_CREATED && cbid != SPC_CBID_RESOURCE_GRAPHNODE_CLONED))
        return;
    if (!atomic_load_explicit(&g_graphs, memory_order_relaxed)) atomic_store(&g_graphs, 1);
    const struct spc_resource_data *rd = data;
    const struct spc_graph_data *gd = rd->resourceDescriptor;
    if (!gd || !C.GetGraphNodeId) return;
    struct spw_graph_node r;
    memset(&r, 0, sizeof r);
    if (C.GetGraphNodeId(gd->node, &r.nodeID) != SPC_SUCCESS) return;
    if (C.GetGraphId && gd->graph) C.GetGraphId(gd->graph, &r.graphID);
    if (cbid == SPC_CBID_RESOURCE_GRAPHNODE_CLONED) {
        r.op = SPW_GRAPH_NODE_CLONED;
        if (gd->originalNode) C.GetGraphNodeId(gd->originalNode, &r.originalNodeID);
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
    if (!atomic_load(&g_collecting) || atomic_load(&g_forked)) {
        atomic_fetch_add(&st.buffers_refused, 1);
        return;
    }
    uint8_t *b = NULL;
    int grow = 0;
    pthread_mutex_lock(&bq.mu);
    if (bq.nfree > 0)
        b = bq.free[--bq.nfree];
    else if (bq.nalloc < cfg.max_bufs) {
        bq.nalloc++;
        grow = 1;
    }
    pthread_mutex_unlock(&bq.mu);
    if (grow) {
        b = aligned_alloc(8, cfg.buf_size);
        if (!b) {
            pthread_mutex_lock(&bq.mu);
            bq.nalloc--;
            pthread_mutex_unlock(&bq.mu);
            LOG_ONCE(L_ALLOC, "cannot allocate a %zu-byte activity buffer; records will be dropped", cfg.buf_size);
        }
    }
    if (!b) {
        atomic_fetch_add(&st.buffers_refused, 1);
        return;
    }
    *buffer = b;
    *size = cfg.buf_size;
}

static void buffer_free(uint8_t *b) {
    pthread_mutex_lock(&bq.mu);
    if (bq.nfree < MAX_BUFS_LIMIT) {
        bq.free[bq.nfree++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&bq.mu);
    free(b);
}

/* CUPTI hands a buffer back (its worker thread, or the thread that flushes): queue it. */
static void buffer_completed(spc_cucontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    size_t dropped = 0;
    if (C.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == SPC_SUCCESS && dropped)
        atomic_fetch_add(&st.dropped_cupti, dropped);
    atomic_fetch_add(&st.buffers_completed, 1);
    if (!buffer) return;
    pthread_mutex_lock(&bq.mu);
    if (bq.dn < MAX_BUFS_LIMIT) {
        bq.done[(bq.dhead + bq.dn) % MAX_BUFS_LIMIT] = (struct done_buf){buffer, valid};
        bq.dn++;
        buffer = NULL;
    }
    pthread_mutex_unlock(&bq.mu);
    if (buffer) free(buffer); /* cannot happen: at most max_bufs buffers exist */
    wake_sender();
}

/* ------------------------------------------------------------------------------------------ */
/* Enabling and disabling collection (on connect / disconnect)                                */

static const struct {
    uint32_t type_bit;
    uint32_t kind;
    const char *name;
} kind_map[] = {
    {K_KERNEL, SPC_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
    {K_MEMCPY, SPC_KIND_MEMCPY, "MEMCPY"},
    {K_MEMSET, SPC_KIND_MEMSET, "MEMSET"},
    {K_API, SPC_KIND_DRIVER, "DRIVER"},
    /* torch launches through the runtime: its kernels carry the runtime
     * call's correlation id, so runtime API records are needed to join. */
    {K_API, SPC_KIND_RUNTIME, "RUNTIME"},
    {K_SYNC, SPC_KIND_SYNCHRONIZATION, "SYNCHRONIZATION"},
    {K_OVERHEAD, SPC_KIND_OVERHEAD, "OVERHEAD"},
    /* CUPTI 11.7 Update 1+: enabling it stops the per-node records of graph launches (kernels,
     * copies and sets in graphs); work launched outside graphs keeps its records. */
    {K_GRAPH, SPC_KIND_GRAPH_TRACE, "GRAPH_TRACE"},
};
static uint32_t g_enabled_types; /* record-type bits actually enabled (sender/init only) */

/* Duty-cycled GPU tracing (cfg.duty_*; sender thread only): the kinds that windows switch (the GPU
 * records and the API and synchronization records that join them: outside a window CUPTI does
 * nothing per call), whether one is open, since when, and when the next switch is due. */
#define K_GPU (K_KERNEL | K_MEMCPY | K_MEMSET | K_GRAPH)
#define K_WINDOWED (K_GPU | K_API | K_SYNC)
static uint32_t g_duty_types;
enum { W_CLOSED, W_OPENING, W_OPEN, W_CLOSING }; /* OPENING, CLOSING: the GPU kinds' switch is posted */
static int g_wstate;
static uint64_t g_window_start, g_window_end, g_next_toggle;
static int g_window_req; /* sender: the agent asked for a window (SPW_CMD_WINDOW, cfg.duty_gated) */
static uint64_t g_window_asof; /* the last "still open" WINDOW record's time (sender) */
#define WINDOW_HEARTBEAT_NS 100000000ull

static const char *result_str(spc_result r) {
    const char *s = NULL;
    if (C.GetResultString && C.GetResultString(r, &s) == SPC_SUCCESS && s) return s;
    return "unknown CUPTI error";
}

static int kept(const uint16_t *set, size_t n, uint32_t cbid) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (set[m] < cbid) lo = m + 1;
        else hi = m;
    }
    return lo < n && set[lo] == cbid;
}

/* API records only for the calls that make, wait for or capture GPU work (api_filter.h): the
 * others (a dozen per eager PyTorch launch) would each cost the application thread a record. */
static void filter_api_records(void) {
    if (cfg.all_api || cfg.api_cb || !((g_enabled_types | g_duty_types) & K_API)) return;
    if (!C.ActivityEnableDriverApi || !C.ActivityEnableRuntimeApi) {
        LOG_ONCE(L_FILTER, "this CUPTI cannot select API records per call (cuptiActivityEnableDriverApi needs "
                           "CUDA 12.5+); every driver and runtime call is recorded, at a higher cost");
        return;
    }
    for (uint32_t c = 1; c < SPC_MAX_CBID; c++) {
        (void)C.ActivityEnableDriverApi(c, (uint8_t)kept(kept_driver_cbids,
                                                         sizeof kept_driver_cbids / sizeof kept_driver_cbids[0], c));
        (void)C.ActivityEnableRuntimeApi(c, (uint8_t)kept(kept_runtime_cbids, sizeof kept_runtime_cbids /
                                                                                  sizeof kept_runtime_cbids[0], c));
    }
}

/* The launch and capture calls (the creating call of graph nodes); with duty-cycled tracing also
 * every call whose API record is kept (api_filter.h), to know which are in progress when a window
 * closes. */
static int g_cb_on; /* the launch callbacks are on (sender) */
static void set_driver_callbacks(uint32_t on) {
    g_cb_on = (int)on;
    if (!g_sub) return;
    if (cfg.no_launch_cb && !(g_duty_types & K_API) && !cfg.api_cb) return;
    for (size_t i = 0; i < sizeof tracked_cbids / sizeof tracked_cbids[0]; i++)
        (void)C.EnableCallback(on, g_sub, SPC_DOMAIN_DRIVER_API, tracked_cbids[i]);
    if ((g_duty_types & K_API) || cfg.api_cb)
        for (size_t i = 0; i < sizeof kept_driver_cbids / sizeof kept_driver_cbids[0]; i++)
            if (!g_tracked[kept_driver_cbids[i]])
                (void)C.EnableCallback(on, g_sub, SPC_DOMAIN_DRIVER_API, kept_driver_cbids[i]);
    if (cfg.api_cb) /* the runtime calls whose records join torch's kernels (see kind_map) */
        for (size_t i = 0; i < sizeof kept_runtime_cbids / sizeof kept_runtime_cbids[0]; i++)
            (void)C.EnableCallback(on, g_sub, SPC_DOMAIN_RUNTIME_API, kept_runtime_cbids[i]);
}

/* Switches the kinds `bits`. The GPU kinds go on last and off first: another thread's call made
 * between the two would otherwise get its kernel's record without the API record that joins it
 * (seen on the mock in CI, a few records when the switching thread was preempted in between). */
static void apply_kinds(uint32_t bits, int on) {
    int cb_api = cfg.api_cb && (bits & K_API); /* records from the callbacks, which collection keeps on */
    if (cb_api) bits &= ~K_API;
    if (cb_api && on) atomic_store(&g_cb_api, 1);
    for (int pass = 0; pass < 2; pass++) {
        int gpu_pass = on ? pass == 1 : pass == 0;
        for (size_t i = 0; i < sizeof kind_map / sizeof kind_map[0]; i++) {
            int is_gpu = (kind_map[i].type_bit & K_GPU) != 0;
            if (!(bits & kind_map[i].type_bit) || is_gpu != gpu_pass) continue;
            spc_result r = on ? C.ActivityEnable(kind_map[i].kind) : C.ActivityDisable(kind_map[i].kind);
            if (r != SPC_SUCCESS && on)
                LOG_ONCE(L_ENABLE, "cuptiActivityEnable(%s): %s; that kind is not collected", kind_map[i].name,
                         result_str(r));
        }
    }
    if (cb_api && !on) atomic_store(&g_cb_api, 0);
}

/* On an application thread, in its driver API exit callback (see g_gs). */
static void gpu_switch_here(int on) {
    uint64_t t0 = mono_ns();
    if (!on) atomic_store(&g_gs_at, t0);
    apply_kinds(g_gs_kinds, on);
    uint64_t t1 = mono_ns(), d = t1 - t0;
    if (on) atomic_store(&g_gs_at, t1);
    atomic_store(&g_gpu_on, on);
    atomic_fetch_add(&g_gs_count, 1);
    atomic_fetch_add(&g_gs_ns, d);
    unsigned long long m = atomic_load(&g_gs_max_ns);
    while (d > m && !atomic_compare_exchange_weak(&g_gs_max_ns, &m, d)) {
    }
    atomic_store(&g_gs, GS_IDLE);
    if (g_efd >= 0) { /* the sender waits for it */
        uint64_t one = 1;
        ssize_t w = write(g_efd, &one, sizeof one);
        (void)w;
    }
}

static int g_gs_cb; /* sender: the callbacks of the calls in g_drain are on for a posted switch */

/* The calls whose exit applies a posted switch (g_drain), which an application that reads its
 * results makes every step. Only per-call callbacks, never cuptiEnableDomain: a whole domain's
 * callbacks cost every call. */
static void set_switch_callbacks(uint32_t on) {
    if (!g_sub) return;
    for (uint32_t c = 1; c < SPC_MAX_CBID; c++) {
        if (!g_drain[c]) continue;
        /* Leaving a switch: keep the callbacks that collection itself has on (set_driver_callbacks). */
        if (!on && g_cb_on && (g_tracked[c] || (g_duty_types & K_API) || cfg.api_cb) &&
            (!cfg.no_launch_cb || (g_duty_types & K_API) || cfg.api_cb))
            continue;
        (void)C.EnableCallback(on, g_sub, SPC_DOMAIN_DRIVER_API, c);
    }
}

/* Whether the GPU kinds are as last posted (sender); then the callbacks go back to what collection
 * needs. */
static int gpu_switch_done(void) {
    if (atomic_load(&g_gs) != GS_IDLE) return 0;
    if (g_gs_cb) {
        g_gs_cb = 0;
        set_switch_callbacks(0);
        /* A switch that turned the API kinds on too (a window opening, a late agent): now keep only the
         * work calls' records. */
        if (g_collecting && (g_gs_kinds & K_API) && atomic_load(&g_gpu_on)) filter_api_records();
    }
    return 1;
}

/* Posts a switch of the GPU kinds `bits` (sender); cancels a pending switch the other way instead
 * when that leaves them as wanted. 1: done, 0: an application thread has yet to apply it. */
static int gpu_switch_post(int on, uint32_t bits) {
    struct timespec step = {0, 20000};
    for (int i = 0; i < 1000 && atomic_load(&g_gs) == GS_APPLYING; i++) nanosleep(&step, NULL);
    int other = on ? GS_WANT_OFF : GS_WANT_ON;
    (void)atomic_compare_exchange_strong(&g_gs, &other, GS_IDLE);
    if (atomic_load(&g_gs) == GS_IDLE && atomic_load(&g_gpu_on) == on) {
        atomic_store(&g_gs_at, mono_ns());
        return gpu_switch_done();
    }
    if (atomic_load(&g_gs) == GS_IDLE) {
        if (!bits) { /* nothing to switch */
            atomic_store(&g_gpu_on, on);
            atomic_store(&g_gs_at, mono_ns());
            return gpu_switch_done();
        }
        g_gs_kinds = bits;
        atomic_store(&g_gs, on ? GS_WANT_ON : GS_WANT_OFF);
    }
    /* Every time: collection may have turned these callbacks off since the switch was posted
     * (a disconnection while a window closes). */
    set_switch_callbacks(1);
    g_gs_cb = 1;
    return gpu_switch_done();
}

static int ensure_attached(void);

/* app_thread: called on an application thread (cuInit's injection), which may switch the GPU kinds
 * itself. */
static void enable_collection(int app_thread) {
    g_enabled_types = 0;
    g_duty_types = 0;
    g_wstate = W_CLOSED;
    if (ensure_attached() < 0) return; /* detached for good: nothing is enabled or granted */
    atomic_store(&g_collecting, 1);
    /* With a final detach every kind follows the windows: nothing records after the last flush. */
    g_duty_types =
        cfg.duty_period_ns ? cfg.kinds & cfg.duty_mask & (cfg.detach ? K_WINDOWED | K_OVERHEAD : K_WINDOWED) : 0;
    atomic_store(&g_count_inflight, (g_duty_types & K_API) != 0);
    g_next_toggle = 0; /* the first window opens at once */
    uint32_t gpu = 0, want = 0;
    for (size_t i = 0; i < sizeof kind_map / sizeof kind_map[0]; i++)
        if ((cfg.kinds & kind_map[i].type_bit) && !(g_duty_types & kind_map[i].type_bit)) want |= kind_map[i].type_bit;
    gpu = want & K_GPU;
    if (gpu && !app_thread && !g_sub) {
        LOG_ONCE(L_NOSUB, "SPECPROF_CUPTI_SUBSCRIBE=0: an agent that connects to a running process gets no GPU "
                          "records (switching them on safely needs callbacks)");
        want &= ~K_GPU;
        gpu = 0;
    }
    if (gpu && !app_thread) {
        /* An agent that comes later: every kind goes on with the GPU kinds, on an application thread,
         * so that no launch gets an API record without its GPU records (its cycle would look
         * complete); the launches before have neither, and are counted. */
        g_enabled_types = want;
        if (!(g_duty_types & K_API)) set_driver_callbacks(1);
        (void)gpu_switch_post(1, want);
        return;
    }
    for (size_t i = 0; i < sizeof kind_map / sizeof kind_map[0]; i++) {
        if (!(want & kind_map[i].type_bit)) continue;
        if (kind_map[i].type_bit & K_GPU) { /* switched on below */
            g_enabled_types |= kind_map[i].type_bit;
            continue;
        }
        if (cfg.api_cb && (kind_map[i].type_bit & K_API)) { /* made in the callbacks (apply_kinds) */
            g_enabled_types |= K_API;
            atomic_store(&g_cb_api, 1);
            continue;
        }
        spc_result r = C.ActivityEnable(kind_map[i].kind);
        if (r == SPC_SUCCESS)
            g_enabled_types |= kind_map[i].type_bit;
        else
            LOG_ONCE(L_ENABLE, "cuptiActivityEnable(%s): %s; that kind is not collected", kind_map[i].name,
                     result_str(r));
    }
    filter_api_records();
    /* Duty-cycled: the launch callbacks (the creating call of captured graph nodes) follow the
     * windows too, so graphs captured outside a window have nodes without their creating call. */
    if (!(g_duty_types & K_API)) set_driver_callbacks(1);
    if (gpu) { /* cuInit's injection, on the application thread: nothing of it is in a launch */
        g_gs_kinds = gpu;
        gpu_switch_here(1);
    }
}

/* A window's kinds other than the GPU ones (sender). They go off after the GPU kinds, so that no GPU
 * record of a window lacks the API record that joins it. They go on with the GPU kinds, on the
 * application thread that switches those (app_switch): on the H200, API kinds that the sender had
 * switched on just before recorded almost nothing once an application thread switched the GPU kinds
 * on (no kernel, and 89 % of the window's launches without API record); either kind switched alone
 * recorded everything. */
static void window_api(uint32_t on, int app_switch) {
    if (on) {
        atomic_store(&g_inflight, 0);
        atomic_fetch_add(&g_inflight_gen, 1);
    } else if (g_duty_types & K_API) {
        /* The GPU kinds are off: let the calls in progress return (and write their API records),
         * at most 20 ms, then 1 ms more for the runtime call around a driver call. */
        struct timespec step = {0, 20000}, grace = {0, 1000000};
        for (int i = 0; i < 1000 && atomic_load(&g_inflight) > 0; i++) nanosleep(&step, NULL);
        nanosleep(&grace, NULL);
    }
    if (!app_switch) apply_kinds(g_duty_types & ~K_GPU, (int)on);
    if (g_duty_types & K_API) {
        if (on) filter_api_records(); /* again once the kinds are on (gpu_switch_done) */
        set_driver_callbacks(on);
    }
}

/* The GPU kinds go off when an application thread next leaves a driver call (see g_gs). */
static void disable_collection(void) {
    atomic_store(&g_collecting, 0);
    if (!cupti_usable()) { /* detached or detaching: nothing is enabled */
        g_wstate = W_CLOSED;
        g_enabled_types = 0;
        return;
    }
    uint32_t gpu = (g_enabled_types | g_duty_types) & K_GPU;
    /* First, so that a window's opening switch (which carries its API kinds) is either cancelled or
     * applied before those kinds go off below. Without callbacks the GPU kinds stay on (their records
     * are dropped and counted) rather than be switched under a launch. */
    if (g_sub) (void)gpu_switch_post(0, gpu);
    if (g_wstate != W_CLOSED) {
        window_api(0, 0);
        g_wstate = W_CLOSED;
    }
    set_driver_callbacks(0);
    apply_kinds(g_enabled_types & ~K_GPU, 0);
    if (g_gs_cb) set_switch_callbacks(1); /* the GPU kinds' switch off is still to be applied */
    g_enabled_types = 0;
}

/* Offset mode: CUPTI time minus CLOCK_MONOTONIC, from the tightest of a few brackets. */
static void measure_offset(void) {
    if (!C.GetTimestamp || !cupti_usable()) return;
    uint64_t best = UINT64_MAX;
    int64_t off = atomic_load(&g_offset);
    for (int i = 0; i < 5; i++) {
        uint64_t c = 0, t0 = mono_ns();
        if (C.GetTimestamp(&c) != SPC_SUCCESS) return;
        uint64_t t1 = mono_ns();
        if (t1 - t0 < best) {
            best = t1 - t0;
            off = (int64_t)(c - (t0 + (t1 - t0) / 2));
        }
    }
    atomic_store(&g_offset, off);
}

/* ------------------------------------------------------------------------------------------ */
/* Sender: output buffer                                                                      */

static struct {
    uint8_t *b;
    size_t head;   /* sent up to */
    size_t tail;   /* written up to */
    size_t cursor; /* first record not yet counted as delivered */
    int fd;
    int congested; /* the agent stopped reading: drop until a send makes progress */
    int hello_pending;
    uint32_t epoch;
    unsigned gn_cursor;
    int driver_version;
} S = {.fd = -1};

static int is_data_record(uint16_t type) { return type != SPW_HELLO && type != SPW_STATS; }

/* Counts the records between from and to (record boundaries) whose bytes are all in [from,to). */
static uint64_t count_records(size_t *from, size_t to) {
    uint64_t n = 0;
    while (*from + sizeof(struct spw_header) <= to) {
        struct spw_header h;
        memcpy(&h, S.b + *from, sizeof h);
        if (*from + h.len > to) break;
        if (is_data_record(h.type)) n++;
        *from += h.len;
    }
    return n;
}

static void disconnect(const char *why);

/* Writes what it can without blocking. Returns -1 when the connection broke. */
static int out_send(void) {
    while (S.fd >= 0 && S.head < S.tail) {
        ssize_t n = send(S.fd, S.b + S.head, S.tail - S.head, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            S.head += (size_t)n;
            S.congested = 0;
            atomic_fetch_add(&st.bytes_sent, (unsigned long long)n);
            atomic_fetch_add(&st.delivered, count_records(&S.cursor, S.head));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        disconnect(n == 0 ? "connection closed" : strerror(errno));
        return -1;
    }
    if (S.head == S.tail) S.head = S.tail = S.cursor = 0;
    return 0;
}

/* Room for n more bytes at S.tail, or NULL (counted by the caller as backpressure). Waits at most
 * CONGESTION_WAIT_MS once per congestion episode: a briefly slow agent loses nothing, a stuck one
 * costs the sender (never the application) one short wait. */
static uint8_t *out_reserve(size_t n) {
    if (S.fd < 0) return NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (cfg.out_cap - S.tail >= n) return S.b + S.tail;
        if (S.cursor > 0) { /* compact, keeping the partly sent record for the delivery count */
            memmove(S.b, S.b + S.cursor, S.tail - S.cursor);
            S.tail -= S.cursor;
            S.head -= S.cursor;
            S.cursor = 0;
            if (cfg.out_cap - S.tail >= n) return S.b + S.tail;
        }
        if (out_send() < 0) return NULL;
        if (cfg.out_cap - S.tail >= n || S.head > 0) continue;
        if (S.congested) return NULL;
        struct pollfd p = {.fd = S.fd, .events = POLLOUT};
        if (poll(&p, 1, CONGESTION_WAIT_MS) <= 0) {
            S.congested = 1;
            return NULL;
        }
        if (out_send() < 0) return NULL;
    }
    return NULL;
}

/* Appends one record (header + payload + extra bytes, zero-padded to 8). */
static int out_record(uint16_t type, uint16_t flags, const void *payload, size_t plen, const void *extra,
                      size_t elen) {
    size_t len = (sizeof(struct spw_header) + plen + elen + 7) & ~(size_t)7;
    uint8_t *p = out_reserve(len);
    if (!p) return -1;
    struct spw_header h = {.len = (uint32_t)len, .type = type, .flags = flags};
    memcpy(p, &h, sizeof h);
    memcpy(p + sizeof h, payload, plen);
    if (elen) memcpy(p + sizeof h + plen, extra, elen);
    size_t used = sizeof h + plen + elen;
    memset(p + used, 0, len - used);
    S.tail += len;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Sender: kernel names, interned per process, sent once per connection                       */

struct name_ent {
    char *s;
    uint32_t len, id, epoch; /* epoch: the connection it was last sent on */
    uint64_t hash;
};
static struct {
    struct name_ent *t;
    uint32_t cap, n;
    const char *cache_ptr[1024];
    uint32_t cache_slot[1024];
} N;
#define NAMES_MAX (1u << 20)

static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ? h : 1;
}

/* Returns the table slot of name s (inserted when new), or UINT32_MAX when the table is full. */
static uint32_t name_slot(const char *s) {
    size_t ci = ((uintptr_t)s >> 3) & 1023;
    if (N.cache_ptr[ci] == s && N.t && !strcmp(N.t[N.cache_slot[ci]].s, s)) return N.cache_slot[ci];
    size_t len = strnlen(s, SPW_MAX_NAME);
    uint64_t h = name_hash(s, len);
    if (N.n * 2 >= N.cap) {
        if (N.n >= NAMES_MAX) return UINT32_MAX;
        uint32_t nc = N.cap ? N.cap * 2 : 1024;
        struct name_ent *nt = calloc(nc, sizeof *nt);
        if (!nt) return UINT32_MAX;
        for (uint32_t i = 0; i < N.cap; i++) {
            if (!N.t[i].s) continue;
            uint32_t j = (uint32_t)(N.t[i].hash & (nc - 1));
            while (nt[j].s) j = (j + 1) & (nc - 1);
            nt[j] = N.t[i];
        }
        free(N.t);
        N.t = nt;
        N.cap = nc;
        memset(N.cache_ptr, 0, sizeof N.cache_ptr);
    }
    uint32_t j = (uint32_t)(h & (N.cap - 1));
    for (; N.t[j].s; j = (j + 1) & (N.cap - 1))
        if (N.t[j].hash == h && N.t[j].len == len && !memcmp(N.t[j].s, s, len)) goto found;
    char *copy = malloc(len + 1);
    if (!copy) return UINT32_MAX;
    memcpy(copy, s, len);
    copy[len] = 0;
    N.t[j] = (struct name_ent){.s = copy, .len = (uint32_t)len, .id = ++N.n, .epoch = 0, .hash = h};
found:
    N.cache_ptr[ci] = s;
    N.cache_slot[ci] = j;
    return j;
}

/* Name id for a kernel record, sending the NAME record first on this connection. 0: unknown. */
static int name_id(const char *s, uint32_t *id) {
    *id = 0;
    if (!s) return 0;
    uint32_t j = name_slot(s);
    if (j == UINT32_MAX) {
        atomic_fetch_add(&st.names_dropped, 1);
        return 0;
    }
    struct name_ent *e = &N.t[j];
    if (e->epoch != S.epoch) {
        struct spw_name nh = {.id = e->id, .len = e->len};
        if (out_record(SPW_NAME, 0, &nh, sizeof nh, e->s, e->len) < 0) return -1;
        e->epoch = S.epoch;
    }
    *id = e->id;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Sender: CUPTI record -> wire record                                                        */

static uint64_t ts(uint64_t t) {
    if (!t || g_clock == SPW_CLOCK_CALLBACK) return t;
    return t - (uint64_t)atomic_load_explicit(&g_offset, memory_order_relaxed);
}

static void layout_mismatch(uint32_t kind, size_t size, size_t need) {
    LOG_ONCE(L_LAYOUT,
             "CUPTI %u: a kind-%u activity record is %zu bytes, fewer than the %zu this library reads; "
             "collection disabled (unsupported record layout)",
             g_cupti_version, kind, size, need);
    atomic_store(&g_active, 0);
}

/* Converts one record of `size` bytes (distance to the next record, or to the end of the valid
 * data for the last one). Returns -1 when the output is full (the record is dropped). */
static int convert(const struct spc_activity *a, size_t size) {
    switch (a->kind) {
    case SPC_KIND_CONCURRENT_KERNEL: {
        if (size < sizeof(struct spc_kernel_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_kernel_prefix));
            return 0;
        }
        const struct spc_kernel_prefix *k = (const void *)a;
        struct spw_kernel w = {
            .start = ts(k->start),
            .end = ts(k->end),
            .graphNodeID = k->graphNodeId,
            .graphID = k->graphId,
            .device = k->deviceId,
            .context = k->contextId,
            .stream = k->streamId,
            .correlationID = k->correlationId,
            .grid = {(uint32_t)k->gridX, (uint32_t)k->gridY, (uint32_t)k->gridZ},
            .block = {(uint32_t)k->blockX, (uint32_t)k->blockY, (uint32_t)k->blockZ},
            .registers = k->registersPerThread,
            .staticShared = (uint32_t)k->staticSharedMemory,
            .dynamicShared = (uint32_t)k->dynamicSharedMemory,
        };
        if (name_id(k->name, &w.nameID) < 0) return -1;
        return out_record(SPW_KERNEL, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_MEMCPY: {
        if (size < sizeof(struct spc_memcpy_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_memcpy_prefix));
            return 0;
        }
        const struct spc_memcpy_prefix *m = (const void *)a;
        struct spw_memcpy w = {.start = ts(m->start),
                               .end = ts(m->end),
                               .bytes = m->bytes,
                               .graphNodeID = m->graphNodeId,
                               .graphID = m->graphId,
                               .device = m->deviceId,
                               .context = m->contextId,
                               .stream = m->streamId,
                               .correlationID = m->correlationId,
                               .copyKind = m->copyKind,
                               .srcKind = m->srcKind,
                               .dstKind = m->dstKind,
                               .flags = m->flags};
        return out_record(SPW_MEMCPY, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_MEMSET: {
        if (size < sizeof(struct spc_memset_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_memset_prefix));
            return 0;
        }
        const struct spc_memset_prefix *m = (const void *)a;
        struct spw_memset w = {.start = ts(m->start),
                               .end = ts(m->end),
                               .bytes = m->bytes,
                               .graphNodeID = m->graphNodeId,
                               .graphID = m->graphId,
                               .device = m->deviceId,
                               .context = m->contextId,
                               .stream = m->streamId,
                               .correlationID = m->correlationId,
                               .value = m->value,
                               .memoryKind = m->memoryKind,
                               .flags = m->flags};
        return out_record(SPW_MEMSET, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_DRIVER:
    case SPC_KIND_RUNTIME: {
        if (size < sizeof(struct spc_api)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_api));
            return 0;
        }
        const struct spc_api *r = (const void *)a;
        struct spw_api w = {.start = ts(r->start),
                            .end = ts(r->end),
                            .cbid = r->cbid,
                            .pid = r->processId,
                            .tid = r->threadId,
                            .correlationID = r->correlationId,
                            .result = r->returnValue,
                            .domain = a->kind == SPC_KIND_RUNTIME ? SPW_DOMAIN_RUNTIME : SPW_DOMAIN_DRIVER};
        return out_record(SPW_API, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_SYNCHRONIZATION: {
        if (size < sizeof(struct spc_sync_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_sync_prefix));
            return 0;
        }
        const struct spc_sync_prefix *s = (const void *)a;
        struct spw_sync w = {.start = ts(s->start),
                             .end = ts(s->end),
                             .kind = s->type,
                             .context = s->contextId,
                             .stream = s->streamId,
                             .event = s->cudaEventId,
                             .correlationID = s->correlationId};
        return out_record(SPW_SYNC, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_OVERHEAD: {
        if (size < sizeof(struct spc_overhead_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_overhead_prefix));
            return 0;
        }
        const struct spc_overhead_prefix *o = (const void *)a;
        struct spw_overhead w = {.start = ts(o->start),
                                 .end = ts(o->end),
                                 .kind = o->overheadKind,
                                 .objectKind = o->objectKind,
                                 .objectID = {o->objectId[0], o->objectId[1], o->objectId[2]}};
        return out_record(SPW_OVERHEAD, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_GRAPH_TRACE: {
        if (size < sizeof(struct spc_graph_trace_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_graph_trace_prefix));
            return 0;
        }
        const struct spc_graph_trace_prefix *g = (const void *)a;
        struct spw_graph_exec w = {.start = ts(g->start),
                                   .end = ts(g->end),
                                   .graphID = g->graphId,
                                   .device = g->deviceId,
                                   .context = g->contextId,
                                   .stream = g->streamId,
                                   .correlationID = g->correlationId};
        return out_record(SPW_GRAPH_EXEC, 0, &w, sizeof w, NULL, 0);
    }
    default:
        atomic_fetch_add(&st.unknown, 1);
        return 0;
    }
}

/* Converts (or, without an agent, counts) every record of one completed buffer. */
static void process_buffer(uint8_t *buf, size_t valid) {
    struct spc_activity *rec = NULL;
    spc_result r = C.ActivityGetNextRecord(buf, valid, &rec);
    uint64_t dropped = 0;
    int full = 0;
    while (r == SPC_SUCCESS && rec) {
        struct spc_activity *cur = rec;
        r = C.ActivityGetNextRecord(buf, valid, &rec);
        size_t size = (r == SPC_SUCCESS && rec) ? (size_t)((uint8_t *)rec - (uint8_t *)cur)
                                                : (size_t)(buf + valid - (uint8_t *)cur);
        if (!atomic_load(&g_active)) {
            dropped++;
            continue;
        }
        if (S.fd < 0 || S.hello_pending) {
            atomic_fetch_add(&st.dropped_no_agent, 1);
            continue;
        }
        if (full || convert(cur, size) < 0) {
            full = 1;
            atomic_fetch_add(&st.dropped_backpressure, 1);
        }
    }
    if (dropped) atomic_fetch_add(&st.dropped_no_agent, dropped);
    if (r != SPC_SUCCESS && r != SPC_ERROR_MAX_LIMIT_REACHED)
        LOG_ONCE(L_GETNEXT, "cuptiActivityGetNextRecord: %s; rest of a buffer skipped", result_str(r));
    buffer_free(buf);
}

static int cupti_usable(void);

/* Converts the completed buffers, at most max of them (-1: all). */
static int drain_buffers_n(int max) {
    int n = 0;
    /* Reading records calls CUPTI: not while it detaches or is detached (queued until attached). */
    if (!cupti_usable()) return 0;
    for (; max < 0 || n < max;) {
        struct done_buf d;
        pthread_mutex_lock(&bq.mu);
        if (bq.dn == 0) {
            pthread_mutex_unlock(&bq.mu);
            return n;
        }
        d = bq.done[bq.dhead];
        bq.dhead = (bq.dhead + 1) % MAX_BUFS_LIMIT;
        bq.dn--;
        pthread_mutex_unlock(&bq.mu);
        process_buffer(d.buf, d.valid);
        n++;
    }
    return n;
}

static int drain_buffers(void) { return drain_buffers_n(-1); }

static int buffers_done(void) {
    pthread_mutex_lock(&bq.mu);
    int n = bq.dn;
    pthread_mutex_unlock(&bq.mu);
    return n;
}

/* The callbacks' API records (cfg.api_cb) up to position upto (UINT64_MAX: all) to the agent, or
 * counted as lost without one. The sender drains them at CUPTI's flush cadence (and when half the
 * ring is full), as CUPTI delivers its own: the agent then gets them in batches, mostly after their
 * launches' eBPF events (it copes with either order). */
static void drain_api_ring_to(uint64_t upto) {
    struct spw_api w;
    while (g_api_head < upto && api_ring_pop(&w)) {
        if (S.fd < 0 || S.hello_pending)
            atomic_fetch_add(&st.dropped_no_agent, 1);
        else if (out_record(SPW_API, 0, &w, sizeof w, NULL, 0) < 0)
            atomic_fetch_add(&st.dropped_backpressure, 1);
    }
}

static void drain_api_ring(void) { drain_api_ring_to(UINT64_MAX); }

static void send_graph_nodes(void) {
    if (!g_gn || S.fd < 0 || S.hello_pending) return;
    unsigned n = atomic_load(&g_gn_n);
    if (n > cfg.graph_cap) n = cfg.graph_cap;
    while (S.gn_cursor < n && atomic_load_explicit(&g_gn[S.gn_cursor].ready, memory_order_acquire)) {
        if (out_record(SPW_GRAPH_NODE, 0, &g_gn[S.gn_cursor].rec, sizeof(struct spw_graph_node), NULL, 0) < 0)
            return; /* retried on the next round */
        S.gn_cursor++;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Detach (cfg.detach)                                                                        */

/* Runs on the application thread that took the detach request, in its API exit callback. */
static void finalize_here(void) {
    if (atomic_load(&g_graphs)) { /* a graph was built after the request: refuse (see g_graphs) */
        atomic_store(&g_detach_refused, 1);
        atomic_store(&g_cs, CS_ATTACHED);
    } else {
        uint64_t t0 = mono_ns();
        spc_result r = C.Finalize();
        uint64_t d = mono_ns() - t0;
        if (r != SPC_SUCCESS) {
            LOG_ONCE(L_DETACH, "cuptiFinalize: %s; CUPTI stays attached", result_str(r));
            atomic_store(&g_cs, CS_ATTACHED);
        } else {
            atomic_store(&g_detach_stall_ns, d);
            atomic_store(&g_detaches, 1);
            atomic_store(&g_cs, CS_DETACHED);
        }
    }
    if (g_efd >= 0) { /* the sender sees it at once (it may be polling for it) */
        uint64_t one = 1;
        ssize_t w = write(g_efd, &one, sizeof one);
        (void)w;
    }
}

/* The detach of a process that built CUDA graphs (sender, cupti_mu held, nothing enabled): no
 * cuptiFinalize (see g_graphs), but every callback off, so that CUPTI's callbacks no longer run in
 * the application's CUDA calls; with cfg.graph_unsub the subscription goes as well. Final, as a
 * detach: from here on nothing calls CUPTI (CS_DETACHED). */
static void quiet_cupti(void) {
    (void)C.ActivityFlushAll(SPC_FLUSH_FORCED);
    drain_buffers();
    static const uint32_t domains[] = {SPC_DOMAIN_DRIVER_API, SPC_DOMAIN_RUNTIME_API, SPC_DOMAIN_RESOURCE};
    int ok = 1;
    for (size_t i = 0; i < sizeof domains / sizeof domains[0]; i++)
        if (C.EnableDomain(0, g_sub, domains[i]) != SPC_SUCCESS) ok = 0;
    atomic_store(&g_cb_api, 0);
    g_cb_on = 0;
    g_gs_cb = 0;
    int unsub = ok && cfg.graph_unsub && C.Unsubscribe(g_sub) == SPC_SUCCESS;
    if (!ok) LOG_ONCE(L_DETACH, "cuptiEnableDomain failed while turning CUPTI's callbacks off; CUPTI stays attached");
    else logmsg("%s%s", refused_msg, unsub ? ", and unsubscribed" : "");
    atomic_store(&g_detach_refused, 1);
    if (!ok) return;
    if (unsub) g_sub = NULL;
    atomic_store(&g_detach_quiet, unsub ? 2 : 1);
    atomic_store(&g_cs, CS_DETACHED);
}

/* Asks for a detach once nothing is enabled (sender): CUPTI's buffers are flushed and converted
 * first, then the API domains' callbacks wait for the next application call to return. */
static void request_detach(void) {
    if (!cfg.detach || g_detach_off || !cupti_usable() || atomic_load(&g_exit_req)) return;
    if (!gpu_switch_done() || atomic_load(&g_gpu_on)) return; /* retried once the GPU kinds are off */
    if (!C.Finalize || !C.EnableDomain) {
        LOG_ONCE(L_DETACH, "this CUPTI lacks cuptiFinalize or cuptiEnableDomain; CUPTI stays attached");
        g_detach_off = 1;
        return;
    }
    if (atomic_load(&g_graphs)) {
        quiet_cupti();
        g_detach_off = 1;
        return;
    }
    (void)C.ActivityFlushAll(SPC_FLUSH_FORCED);
    drain_buffers();
    if (C.EnableDomain(1, g_sub, SPC_DOMAIN_DRIVER_API) != SPC_SUCCESS ||
        C.EnableDomain(1, g_sub, SPC_DOMAIN_RUNTIME_API) != SPC_SUCCESS) {
        LOG_ONCE(L_DETACH, "cuptiEnableDomain failed; CUPTI stays attached");
        (void)C.EnableDomain(0, g_sub, SPC_DOMAIN_DRIVER_API);
        (void)C.EnableDomain(0, g_sub, SPC_DOMAIN_RUNTIME_API);
        if (g_collecting && !g_duty_types) set_driver_callbacks(1);
        g_detach_off = 1;
        return;
    }
    pthread_mutex_lock(&detach_mu);
    int want = CS_ATTACHED;
    if (!g_no_detach && atomic_compare_exchange_strong(&g_cs, &want, CS_DETACH_REQ)) g_detach_pending = 1;
    pthread_mutex_unlock(&detach_mu);
    DEBUG("detach requested");
}

/* Sees a requested detach through (sender). */
static void poll_detach(void) {
    if (!g_detach_pending) return;
    int s = atomic_load(&g_cs);
    if (s == CS_DETACHED) {
        g_detach_pending = 0;
        g_sub = NULL;
        DEBUG("detached");
    } else if (s == CS_ATTACHED) { /* refused, cuptiFinalize failed or exit cancelled: still subscribed */
        g_detach_pending = 0;
        g_detach_off = 1;
        (void)C.EnableDomain(0, g_sub, SPC_DOMAIN_DRIVER_API);
        (void)C.EnableDomain(0, g_sub, SPC_DOMAIN_RUNTIME_API);
        if (atomic_load(&g_detach_refused) && !atomic_load(&g_exit_req)) quiet_cupti(); /* graphs came after the request */
    }
}

/* Makes CUPTI usable (sender, or init before the sender exists): cancels a pending detach, or
 * waits for one in progress. -1: CUPTI is detached, for good. */
static int ensure_attached(void) {
    if (g_detach_pending) {
        int want = CS_DETACH_REQ;
        if (atomic_compare_exchange_strong(&g_cs, &want, CS_ATTACHED)) {
            g_detach_pending = 0; /* no thread took it: still subscribed, as before the request */
            (void)C.EnableDomain(0, g_sub, SPC_DOMAIN_DRIVER_API);
            (void)C.EnableDomain(0, g_sub, SPC_DOMAIN_RUNTIME_API);
            return 0;
        }
        struct timespec step = {0, 50000};
        for (int i = 0; i < 2000 && atomic_load(&g_cs) == CS_FINALIZING; i++) nanosleep(&step, NULL);
        poll_detach();
    }
    return atomic_load(&g_cs) == CS_ATTACHED && !g_detach_pending ? 0 : -1;
}

/* Says that the open window was still open at `at` (a WINDOW record with close 0 and openAsOf):
 * the agent holds a window's cycles until it knows the window's close came after them, and a
 * process that stops synchronising (idle, or launching without waiting) keeps its window open. */
static void window_heartbeat(uint64_t at) {
    struct spw_window w = {.open = g_window_start, .close = 0, .openAsOf = at};
    g_window_asof = at;
    (void)out_record(SPW_WINDOW, 0, &w, sizeof w, NULL, 0);
}

/* Opens or closes the tracing window when due (cfg.duty_*); returns the next due time. Work launched
 * while a window is open has its GPU records; the agent counts GPU figures only for cycles that
 * lie wholly inside a window (WINDOW records). */
static uint64_t duty_step(uint64_t now) {
    poll_detach();
    uint64_t poll = g_detach_pending ? now + 1000000ull : UINT64_MAX; /* see a detach through */
    if (!g_duty_types) return poll;
    uint32_t gpu = g_duty_types & K_GPU;
    const uint64_t wait_switch = now + 100000000ull; /* the switch wakes the sender (eventfd) before that */
    struct spw_window w = {0};
    switch (g_wstate) {
    case W_CLOSED:
        if (cfg.max_windows && g_windows >= cfg.max_windows) return poll;
        if (cfg.duty_gated && !g_window_req) return poll; /* read_commands wakes the sender */
        if (now < g_next_toggle) return poll < g_next_toggle ? poll : g_next_toggle;
        if (atomic_load(&g_graphs) && !cfg.duty_graphs) { /* see g_duty_stopped */
            if (!atomic_exchange(&g_duty_stopped, 1))
                logmsg("no more GPU tracing windows: this process has built CUDA graphs, and switching CUPTI's "
                       "tracing while graphs replay crashed such processes; later cycles have CPU figures only");
            return poll;
        }
        if (ensure_attached() < 0) return UINT64_MAX;
        g_windows++;
        g_window_req = 0;
        window_api(1, gpu != 0);
        g_wstate = W_OPENING;
        if (gpu && !gpu_switch_post(1, g_duty_types)) return wait_switch;
        /* fall through */
    case W_OPENING:
        if (gpu && !gpu_switch_done()) return wait_switch;
        g_window_start = gpu ? atomic_load(&g_gs_at) : mono_ns();
        g_window_asof = g_window_start;
        g_wstate = W_OPEN;
        g_next_toggle = g_window_start + cfg.duty_on_ns;
        w.open = g_window_start, w.close = 0, w.openAsOf = 0;
        (void)out_record(SPW_WINDOW, 0, &w, sizeof w, NULL, 0);
        return g_next_toggle;
    case W_OPEN:
        if (now < g_next_toggle) {
            /* Only the sender closes a window: it is open now. */
            if (now >= g_window_asof + WINDOW_HEARTBEAT_NS) window_heartbeat(now);
            uint64_t next = g_window_asof + WINDOW_HEARTBEAT_NS;
            if (g_next_toggle < next) next = g_next_toggle;
            return poll < next ? poll : next;
        }
        g_window_end = mono_ns();
        g_wstate = W_CLOSING;
        if (gpu && !gpu_switch_post(0, gpu)) return wait_switch;
        /* fall through */
    default: /* W_CLOSING */
        if (gpu && !gpu_switch_done()) {
            /* The close waits for a synchronising call. Time first: while no application thread has
             * begun applying it (GS_WANT_OFF), the close's time will come after t. */
            uint64_t t = mono_ns();
            if (t >= g_window_asof + WINDOW_HEARTBEAT_NS && atomic_load(&g_gs) == GS_WANT_OFF)
                window_heartbeat(t);
            return wait_switch;
        }
        if (gpu) g_window_end = atomic_load(&g_gs_at);
        window_api(0, 0);
        g_wstate = W_CLOSED;
        g_next_toggle = g_window_start + cfg.duty_period_ns;
        w.open = g_window_start, w.close = g_window_end, w.openAsOf = 0;
        (void)out_record(SPW_WINDOW, 0, &w, sizeof w, NULL, 0);
        if (cfg.max_windows && g_windows >= cfg.max_windows) { /* the last window closed */
            request_detach();
            return g_detach_pending ? now + 1000000ull : UINT64_MAX;
        }
        return g_next_toggle;
    }
}

/* Adds what CUPTI dropped since the last read to st.dropped_cupti (sender thread, under cupti_mu).
 * buffer_completed reads the count too, but only when a buffer comes back: records dropped because
 * no buffer could be had (the pool exhausted, a failed allocation, CUPTI's own limits) are often the
 * last ones before the process ends, with no buffer completed after them, so every STATS reads the
 * global queue's count first (NULL context: CUPTI resets it on each read, so nothing counts twice). */
static void read_dropped(void) {
    size_t dropped = 0;
    if (!C.ActivityGetNumDroppedRecords || !cupti_usable()) return;
    if (C.ActivityGetNumDroppedRecords(NULL, 0, &dropped) == SPC_SUCCESS && dropped)
        atomic_fetch_add(&st.dropped_cupti, dropped);
}

static void send_stats(uint16_t flags) {
    read_dropped();
    struct spw_stats w = {
        .recordsDelivered = atomic_load(&st.delivered),
        .droppedCUPTI = atomic_load(&st.dropped_cupti),
        .droppedNoAgent = atomic_load(&st.dropped_no_agent),
        .droppedBackpressure = atomic_load(&st.dropped_backpressure),
        .droppedDisconnect = atomic_load(&st.dropped_disconnect),
        .droppedGraphNodes = atomic_load(&st.dropped_graph),
        .buffersCompleted = atomic_load(&st.buffers_completed),
        .buffersRefused = atomic_load(&st.buffers_refused),
        .bytesSent = atomic_load(&st.bytes_sent),
        .recordsUnknown = atomic_load(&st.unknown),
        .connects = atomic_load(&st.connects),
        .namesDropped = atomic_load(&st.names_dropped),
        .detaches = atomic_load(&g_detaches),
        .detachStallNs = atomic_load(&g_detach_stall_ns),
        .detachRefused = atomic_load(&g_detach_refused),
        .detachQuiet = atomic_load(&g_detach_quiet),
        .gpuSwitches = atomic_load(&g_gs_count),
        .gpuSwitchNs = atomic_load(&g_gs_ns),
        .gpuSwitchMaxNs = atomic_load(&g_gs_max_ns),
        .dutyStopped = atomic_load(&g_duty_stopped),
    };
    (void)out_record(SPW_STATS, flags, &w, sizeof w, NULL, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Sender: connection                                                                         */

/* Connects without blocking (a unix socket connects or fails at once). 0 on success. */
static int try_connect(int app_thread) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, cfg.socket_path, strlen(cfg.socket_path));
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    S.fd = fd;
    S.head = S.tail = S.cursor = 0;
    S.congested = 0;
    S.hello_pending = 1;
    S.epoch++;
    S.gn_cursor = 0;
    atomic_fetch_add(&st.connects, 1);
    if (g_clock == SPW_CLOCK_OFFSET) measure_offset();
    enable_collection(app_thread);
    return 0;
}

static void send_hello(void) {
    if (!S.driver_version) {
        /* libcuda may be loaded RTLD_LOCAL (torch, cudart): fall back to its own handle. */
        int (*get)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
        void *cuda = get ? NULL : dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (cuda) get = (int (*)(int *))dlsym(cuda, "cuDriverGetVersion");
        if (!get || get(&S.driver_version) != 0) S.driver_version = -1;
        if (cuda) dlclose(cuda); /* NOLOAD handle: only drops the reference it took */
    }
    struct spw_hello h = {
        .wireVersion = SPW_WIRE_VERSION,
        .pid = (uint32_t)getpid(),
        .cuptiVersion = g_cupti_version,
        .driverVersion = S.driver_version > 0 ? S.driver_version : 0,
        .clockSource = (uint32_t)g_clock,
        /* Duty-cycled: the windowed kinds and WINDOW records too; the agent knows from the HELLO
         * that records exist only inside windows, before the first window's record comes. */
        .types = g_enabled_types | g_duty_types | (1u << SPW_HELLO) | (1u << SPW_STATS) | (1u << SPW_NAME) |
                 (1u << SPW_GRAPH_NODE) | (g_duty_types ? 1u << SPW_WINDOW : 0),
        .clockOffset = g_clock == SPW_CLOCK_OFFSET ? atomic_load(&g_offset) : 0,
        .connectTime = mono_ns(),
    };
    memcpy(h.magic, SPW_MAGIC, sizeof h.magic);
    S.hello_pending = 0;
    if (out_record(SPW_HELLO, 0, &h, sizeof h, NULL, 0) < 0) disconnect("cannot queue HELLO");
    DEBUG("connected to %s (connection %u)", cfg.socket_path, S.epoch);
}

static void disconnect(const char *why) {
    if (S.fd < 0) return;
    DEBUG("agent connection lost (%s); collection off until it comes back", why);
    close(S.fd);
    S.fd = -1;
    atomic_fetch_add(&st.dropped_disconnect, count_records(&S.cursor, S.tail));
    S.head = S.tail = S.cursor = 0;
    if (atomic_load(&g_shutdown) || atomic_load(&g_exit_req)) return; /* no CUPTI calls while exiting */
    disable_collection();
    if (!cupti_usable()) return;
    /* Take back every buffer CUPTI holds; its records are counted as dropped (no agent). */
    (void)C.ActivityFlushAll(SPC_FLUSH_FORCED);
    drain_buffers();
    request_detach(); /* no agent: detach for good (cfg.detach) */
}

/* Reads the agent's commands. Returns 1 when it asked for a flush. */
static int read_commands(void) {
    int flush = 0;
    char b[64];
    for (;;) {
        ssize_t n = recv(S.fd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++) {
                if (b[i] == SPW_CMD_FLUSH) flush = 1;
                if (b[i] == SPW_CMD_WINDOW && cfg.duty_gated) g_window_req = 1;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        disconnect(n == 0 ? "closed by the agent" : strerror(errno));
        break;
    }
    return flush;
}

/* Writes until everything is sent, the connection breaks or the deadline passes. */
static void send_until(uint64_t deadline) {
    while (S.fd >= 0 && S.head < S.tail) {
        uint64_t now = mono_ns();
        if (now >= deadline) break;
        struct pollfd p = {.fd = S.fd, .events = POLLOUT};
        int ms = (int)((deadline - now) / 1000000ull) + 1;
        if (poll(&p, 1, ms) <= 0) break;
        if (out_send() < 0) break;
    }
}

static void sender_exit_flush(void) {
    /* atexit already forced CUPTI's flush; deliver what came back within the deadline, then the
     * final counters (exact when everything before them went out). */
    poll_detach(); /* atexit cancelled or waited for a detach */
    drain_api_ring();
    drain_buffers();
    send_graph_nodes();
    send_until(g_exit_deadline - 10000000ull);
    if (S.fd >= 0 && !S.hello_pending) send_stats(SPW_FLAG_FINAL);
    send_until(g_exit_deadline);
}

static void *sender_main(void *arg) {
    (void)arg;
    uint64_t now = mono_ns(), next_retry = now + cfg.retry_ns, next_flush = now + cfg.flush_ns,
             next_stats = now + STATS_PERIOD_NS, next_duty = UINT64_MAX;
    int ack_pending = 0; /* the agent asked for a flush: answer after the next one */
    for (;;) {
        pthread_mutex_lock(&cupti_mu);
        if (atomic_load(&g_exit_req)) {
            if (atomic_load(&g_active)) sender_exit_flush();
            pthread_mutex_unlock(&cupti_mu);
            pthread_mutex_lock(&exit_mu);
            g_exit_done = 1;
            pthread_cond_broadcast(&exit_cv);
            pthread_mutex_unlock(&exit_mu);
            return NULL;
        }
        now = mono_ns();
        if (!atomic_load(&g_active)) { /* switched off (layout mismatch): drain and idle */
            if (S.fd >= 0) disconnect("collection disabled");
            drain_buffers();
            next_retry = UINT64_MAX;
        } else if (S.fd < 0 && now >= next_retry) {
            if (try_connect(0) == 0) {
                next_flush = now + cfg.flush_ns;
                next_stats = now + STATS_PERIOD_NS;
            }
            next_retry = now + cfg.retry_ns;
        }
        if (S.fd >= 0 && S.hello_pending) send_hello();

        int flush_req = 0;
        if (S.fd >= 0) {
            int flushed = now >= next_flush;
            if (flushed) {
                if (cupti_usable()) (void)C.ActivityFlushAll(0); /* completed records only */
                next_flush = now + cfg.flush_ns;
            }
            /* Only the records made before the switches seen below: a record made after a window
             * opened must reach the agent after that window's WINDOW record, or the agent takes its
             * launch for one made outside the windows. */
            uint64_t api_upto = atomic_load(&g_api_tail);
            int bufs = buffers_done();
            next_duty = duty_step(now);
            if (g_gs_cb) (void)gpu_switch_done(); /* a switch posted outside the windows */
            if (flushed || api_ring_half()) drain_api_ring_to(api_upto);
            drain_buffers_n(bufs);
            send_graph_nodes();
            if (ack_pending && flushed) { /* everything CUPTI completed before the request is sent */
                send_stats(SPW_FLAG_FLUSH_ACK);
                ack_pending = 0;
            }
            if (now >= next_stats) {
                if (g_clock == SPW_CLOCK_OFFSET) measure_offset();
                send_stats(0);
                next_stats = now + STATS_PERIOD_NS;
            }
            (void)out_send();
        } else {
            ack_pending = 0;
            poll_detach();
            if (g_gs_cb) (void)gpu_switch_done(); /* the GPU kinds' switch off, after a disconnect */
            if (!atomic_load(&g_collecting)) request_detach(); /* no agent: detach (cfg.detach) */
            drain_api_ring();
            drain_buffers();
        }

        /* Sleep until the next deadline, a completed buffer, a command or writability. */
        uint64_t until = S.fd >= 0 ? (next_flush < next_stats ? next_flush : next_stats) : next_retry;
        if (S.fd >= 0 && next_duty < until) until = next_duty;
        if (g_detach_pending && now + 1000000ull < until) until = now + 1000000ull;
        now = mono_ns();
        int ms = until == UINT64_MAX ? 1000 : until > now ? (int)((until - now + 999999) / 1000000) : 0;
        if (ms > 1000) ms = 1000;
        struct pollfd p[2] = {{.fd = g_efd, .events = POLLIN}, {.fd = S.fd, .events = POLLIN}};
        if (S.fd >= 0 && S.head < S.tail && !S.congested) p[1].events |= POLLOUT;
        pthread_mutex_unlock(&cupti_mu);
        atomic_store(&g_sender_waiting, 1);
        int pr = 0;
        pthread_mutex_lock(&bq.mu);
        int pending = bq.dn;
        pthread_mutex_unlock(&bq.mu);
        if (!pending && !atomic_load(&g_exit_req)) pr = poll(p, S.fd >= 0 ? 2 : 1, ms);
        atomic_store(&g_sender_waiting, 0);
        if (pr > 0 && (p[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(g_efd, &v, sizeof v);
            (void)r;
        }
        if (pr > 0 && S.fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            pthread_mutex_lock(&cupti_mu); /* a disconnection switches collection off */
            flush_req = read_commands();
            pthread_mutex_unlock(&cupti_mu);
        }
        if (pr > 0 && S.fd >= 0 && (p[1].revents & POLLOUT)) S.congested = 0;
        /* The agent asks for a flush at the end of a session and while it waits on a process that
         * went idle (agent/gpu.go flushQuiet): made at once by the next pass, in the order that keeps
         * records after the WINDOW records of the switches made before them. */
        if (flush_req && S.fd >= 0) {
            ack_pending = 1;
            next_flush = 0;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Exit and fork                                                                              */

static void at_exit(void) {
    if (!atomic_load(&g_active) || atomic_load(&g_forked)) return;
    /* No detach from now on: cancel one not yet taken, wait (briefly) for one in progress. */
    pthread_mutex_lock(&detach_mu);
    g_no_detach = 1;
    int want = CS_DETACH_REQ;
    (void)atomic_compare_exchange_strong(&g_cs, &want, CS_ATTACHED);
    pthread_mutex_unlock(&detach_mu);
    struct timespec step = {0, 100000};
    for (int i = 0; i < 1000 && atomic_load(&g_cs) == CS_FINALIZING; i++) nanosleep(&step, NULL);
    if (atomic_load(&g_collecting) && atomic_load(&g_cs) == CS_ATTACHED) {
        pthread_mutex_lock(&cupti_mu); /* the sender holds it for a flush or a switch at most */
        (void)C.ActivityFlushAll(SPC_FLUSH_FORCED);
        pthread_mutex_unlock(&cupti_mu);
    }
    pthread_mutex_lock(&exit_mu);
    g_exit_deadline = mono_ns() + EXIT_BUDGET_NS;
    atomic_store(&g_exit_req, 1);
    uint64_t one = 1;
    ssize_t w = write(g_efd, &one, sizeof one);
    (void)w;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += (long)(EXIT_BUDGET_NS + 20000000ull); /* the sender's budget plus a margin */
    dl.tv_sec += dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    while (!g_exit_done)
        if (pthread_cond_timedwait(&exit_cv, &exit_mu, &dl) == ETIMEDOUT) break;
    pthread_mutex_unlock(&exit_mu);
    atomic_store(&g_shutdown, 1);
}

static void fork_prepare(void) { pthread_mutex_lock(&bq.mu); }
static void fork_parent(void) { pthread_mutex_unlock(&bq.mu); }
static void fork_child(void) {
    /* The sender thread does not exist here and CUDA cannot be used from a forked child: off. */
    pthread_mutex_unlock(&bq.mu);
    atomic_store(&g_forked, 1);
    atomic_store(&g_collecting, 0);
    if (S.fd >= 0) close(S.fd); /* the parent's connection: never write to it from here */
    S.fd = -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading CUPTI                                                                              */

static void *try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h && !dlsym(h, "cuptiGetVersion")) {
        dlclose(h);
        return NULL;
    }
    return h;
}

/* Tries every file matching pattern, highest name first (libcupti.so.13 before .so.12). */
static void *try_glob(const char *pattern, char *found, size_t fsz) {
    glob_t g;
    void *h = NULL;
    if (glob(pattern, 0, NULL, &g) != 0) return NULL;
    for (size_t i = g.gl_pathc; i-- > 0 && !h;) {
        h = try_open(g.gl_pathv[i]);
        if (h) snprintf(found, fsz, "%s", g.gl_pathv[i]);
    }
    globfree(&g);
    return h;
}

/* A libcupti the process already mapped (e.g. torch's), so one process never holds two. */
static void *try_mapped(char *found, size_t fsz) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return NULL;
    char line[4096];
    void *h = NULL;
    while (!h && fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (!p || !strstr(p, "/libcupti.so")) continue;
        p[strcspn(p, "\n")] = 0;
        h = try_open(p);
        if (h) snprintf(found, fsz, "%s", p);
    }
    fclose(f);
    return h;
}

/* site-packages directories: from the process's own maps (libpython, torch, any wheel), then
 * the usual system and /opt virtualenv places. */
static void *try_python(char *found, size_t fsz) {
    static const char *subdirs[] = {"nvidia/cuda_cupti/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"};
    char dirs[16][512];
    int nd = 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f) {
        char line[4096];
        while (nd < 12 && fgets(line, sizeof line, f)) {
            char *p = strchr(line, '/');
            if (!p) continue;
            p[strcspn(p, "\n")] = 0;
            char *sp = strstr(p, "/site-packages/");
            if (!sp) sp = strstr(p, "/dist-packages/");
            char d[512];
            if (sp) {
                snprintf(d, sizeof d, "%.*s", (int)(sp - p + 14), p);
            } else if ((sp = strstr(p, "/libpython3."))) {
                /* <prefix>/lib/libpython3.X.so -> <prefix>/lib/python3.X/site-packages */
                int minor = atoi(sp + 12);
                snprintf(d, sizeof d, "%.*s/python3.%d/site-packages", (int)(sp - p), p, minor);
            } else {
                continue;
            }
            int dup = 0;
            for (int i = 0; i < nd; i++) dup |= !strcmp(dirs[i], d);
            if (!dup) snprintf(dirs[nd++], sizeof dirs[0], "%s", d);
        }
        fclose(f);
    }
    for (int i = 0; i < nd; i++)
        for (size_t s = 0; s < sizeof subdirs / sizeof subdirs[0]; s++) {
            char pat[700];
            snprintf(pat, sizeof pat, "%s/%s/libcupti.so*", dirs[i], subdirs[s]);
            void *h = try_glob(pat, found, fsz);
            if (h) return h;
        }
    static const char *globs[] = {"/usr/lib/python3*/site-packages", "/usr/local/lib/python3*/site-packages",
                                  "/usr/lib/python3/dist-packages", "/usr/local/lib/python3*/dist-packages",
                                  "/opt/*/.venv/lib/python3*/site-packages"};
    for (size_t g = 0; g < sizeof globs / sizeof globs[0]; g++)
        for (size_t s = 0; s < sizeof subdirs / sizeof subdirs[0]; s++) {
            char pat[512];
            snprintf(pat, sizeof pat, "%s/%s/libcupti.so*", globs[g], subdirs[s]);
            void *h = try_glob(pat, found, fsz);
            if (h) return h;
        }
    return NULL;
}

static void *load_cupti(char *found, size_t fsz) {
    void *h;
    const char *env = getenv("SPECPROF_CUPTI_LIB");
    if (env && *env) {
        if ((h = try_open(env))) {
            snprintf(found, fsz, "%s", env);
            return h;
        }
        logmsg("SPECPROF_CUPTI_LIB=%s: cannot load it (%s); searching elsewhere", env, dlerror());
    }
    if ((h = try_mapped(found, fsz))) return h;
    static const char *cuda[] = {"/usr/local/cuda/lib64/libcupti.so*", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so*",
                                 "/usr/local/cuda-*/targets/x86_64-linux/lib/libcupti.so*"};
    for (size_t i = 0; i < sizeof cuda / sizeof cuda[0]; i++)
        if ((h = try_glob(cuda[i], found, fsz))) return h;
    if ((h = try_python(found, fsz))) return h;
    static const char *names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((h = try_open(names[i]))) {
            snprintf(found, fsz, "%s", names[i]);
            return h;
        }
    return NULL;
}

static int resolve(void *h) {
#define SYM(field, name, required)                                           \
    do {                                                                     \
        *(void **)&C.field = dlsym(h, name);                                 \
        if (!C.field && (required)) {                                        \
            LOG_ONCE(L_NOLIB, "libcupti lacks %s; collection disabled", name); \
            return -1;                                                       \
        }                                                                    \
    } while (0)
    SYM(GetVersion, "cuptiGetVersion", 1);
    SYM(GetResultString, "cuptiGetResultString", 0);
    SYM(Subscribe, "cuptiSubscribe", 1);
    SYM(Unsubscribe, "cuptiUnsubscribe", 1);
    SYM(EnableCallback, "cuptiEnableCallback", 1);
    SYM(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks", 1);
    SYM(ActivityRegisterTimestampCallback, "cuptiActivityRegisterTimestampCallback", 0);
    SYM(ActivityEnable, "cuptiActivityEnable", 1);
    SYM(ActivityDisable, "cuptiActivityDisable", 1);
    SYM(ActivityFlushAll, "cuptiActivityFlushAll", 1);
    SYM(ActivityGetNextRecord, "cuptiActivityGetNextRecord", 1);
    SYM(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords", 1);
    SYM(GetTimestamp, "cuptiGetTimestamp", 0);
    SYM(GetGraphId, "cuptiGetGraphId", 0);
    SYM(GetGraphNodeId, "cuptiGetGraphNodeId", 0);
    SYM(SetThreadIdType, "cuptiSetThreadIdType", 0);
    SYM(ActivityEnableDriverApi, "cuptiActivityEnableDriverApi", 0);
    SYM(ActivityEnableRuntimeApi, "cuptiActivityEnableRuntimeApi", 0);
    SYM(EnableDomain, "cuptiEnableDomain", 0);
    SYM(Finalize, "cuptiFinalize", 0);
#undef SYM
    return 0;
}

static int version_supported(uint32_t v) {
    return (v >= API_MIN_12 && v <= API_MAX_12) || (v >= API_MIN_13 && v <= API_MAX_13);
}

/* Subscribes to CUPTI and registers what collection needs. The clock first: CUPTI applies it
 * only to records of kinds enabled after registration. -1: not subscribed (said once). */
static int subscribe_cupti(void) {
    spc_result r = cfg.no_subscribe ? SPC_SUCCESS : C.Subscribe(&g_sub, on_callback, NULL);
    if (r == SPC_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        LOG_ONCE(L_BUSY, "another CUPTI client is already subscribed in this process (torch.profiler/Kineto, "
                         "Nsight, ...); specprof steps aside and collects no GPU activity here");
        return -1;
    }
    if (r != SPC_SUCCESS) {
        LOG_ONCE(L_SUBSCRIBE, "cuptiSubscribe: %s; collection disabled", result_str(r));
        return -1;
    }
    r = C.ActivityRegisterTimestampCallback && !cfg.clock_offset ? C.ActivityRegisterTimestampCallback(timestamp_cb)
                                                                 : SPC_ERROR_NOT_SUPPORTED;
    if (r != SPC_SUCCESS) {
        if (!C.GetTimestamp) {
            LOG_ONCE(L_TS, "cannot align CUPTI's clock with CLOCK_MONOTONIC (no timestamp callback, no "
                           "cuptiGetTimestamp); collection disabled");
            if (g_sub) C.Unsubscribe(g_sub);
            return -1;
        }
        if (!cfg.clock_offset)
            LOG_ONCE(L_TS, "cuptiActivityRegisterTimestampCallback: %s; converting CUPTI timestamps with a "
                           "measured CLOCK_MONOTONIC offset instead",
                     result_str(r));
        g_clock = SPW_CLOCK_OFFSET;
        measure_offset();
    }
    /* CUPTI's default thread id is pthread_self() cut to 32 bits; the agent joins API records
     * with eBPF events by kernel thread id, which SYSTEM (gettid) gives. Without it the agent
     * cannot tell the threads apart, so say so once: launches then stay unjoined (counted). */
    r = C.SetThreadIdType ? C.SetThreadIdType(SPC_THREAD_ID_TYPE_SYSTEM) : SPC_ERROR_NOT_SUPPORTED;
    if (r != SPC_SUCCESS)
        LOG_ONCE(L_TID, "cuptiSetThreadIdType(SYSTEM): %s; CUPTI thread ids will not match kernel thread ids "
                        "and launches will not be joined to GPU records",
                 result_str(r));
    r = C.ActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != SPC_SUCCESS) {
        LOG_ONCE(L_REGISTER, "cuptiActivityRegisterCallbacks: %s; collection disabled", result_str(r));
        if (g_sub) C.Unsubscribe(g_sub);
        return -1;
    }
    /* Graph-node callbacks stay on while subscribed: they are rare (capture, instantiation) and a
     * late agent gets the whole retained mapping. */
    if (g_sub) {
        (void)C.EnableCallback(1, g_sub, SPC_DOMAIN_RESOURCE, SPC_CBID_RESOURCE_GRAPHNODE_CREATED);
        (void)C.EnableCallback(1, g_sub, SPC_DOMAIN_RESOURCE, SPC_CBID_RESOURCE_GRAPHNODE_CLONED);
    }
    return 0;
}

static void init(void) {
    if (getenv("SPECPROF_CUPTI_DISABLE") && strcmp(getenv("SPECPROF_CUPTI_DISABLE"), "0") != 0) return;
    read_config();
    char found[1024] = "";
    void *h = load_cupti(found, sizeof found);
    if (!h) {
        LOG_ONCE(L_NOLIB,
                 "libcupti not found (set SPECPROF_CUPTI_LIB; searched the mapped libraries, /usr/local/cuda*, "
                 "nvidia-cuda-cupti in site-packages and the loader path); GPU activity is not collected");
        return;
    }
    if (resolve(h) < 0) return;
    spc_result r = C.GetVersion(&g_cupti_version);
    if (r != SPC_SUCCESS) {
        LOG_ONCE(L_VERSION, "cuptiGetVersion (%s): %s; collection disabled", found, result_str(r));
        return;
    }
    if (!version_supported(g_cupti_version)) {
        LOG_ONCE(L_VERSION,
                 "CUPTI API version %u (%s) is not supported (supported: %u-%u = CUDA 11.8-12.9, %u-%u = "
                 "CUDA 13.0); collection disabled rather than mis-decoding its records",
                 g_cupti_version, found, API_MIN_12, API_MAX_12, API_MIN_13, API_MAX_13);
        return;
    }
    if (cfg.graph_cap) { /* untouched pages cost nothing */
        void *m = mmap(NULL, (size_t)cfg.graph_cap * sizeof(struct gn_slot), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        g_gn = m == MAP_FAILED ? NULL : m;
    }
    /* Before any callback can run: on_callback reads it on application threads, unlocked (the
     * windows' sender used to rewrite it while they ran). */
    for (size_t i = 0; i < sizeof tracked_cbids / sizeof tracked_cbids[0]; i++)
        g_tracked[tracked_cbids[i]] = g_counted[tracked_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof kept_driver_cbids / sizeof kept_driver_cbids[0]; i++)
        if (kept_driver_cbids[i] < SPC_MAX_CBID) g_counted[kept_driver_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof drain_cbids / sizeof drain_cbids[0]; i++) g_drain[drain_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof kept_driver_cbids / sizeof kept_driver_cbids[0]; i++)
        if (kept_driver_cbids[i] < SPC_MAX_CBID) g_kept_api[0][kept_driver_cbids[i]] = 1;
    for (size_t i = 0; i < sizeof kept_runtime_cbids / sizeof kept_runtime_cbids[0]; i++)
        if (kept_runtime_cbids[i] < SPC_MAX_CBID) g_kept_api[1][kept_runtime_cbids[i]] = 1;
    g_pid = (uint32_t)getpid();
    if (cfg.api_cb) {
        g_api_ring = calloc(cfg.api_ring, sizeof *g_api_ring);
        if (!g_api_ring) {
            logmsg("cannot allocate the API record ring (%u slots); using CUPTI's activity records", cfg.api_ring);
            cfg.api_cb = 0;
        } else {
            for (uint32_t i = 0; i < cfg.api_ring; i++) atomic_store_explicit(&g_api_ring[i].seq, i, memory_order_relaxed);
        }
    }
    if (subscribe_cupti() < 0) return;
    S.b = malloc(cfg.out_cap);
    g_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!S.b || g_efd < 0) {
        LOG_ONCE(L_ALLOC, "cannot allocate the sender's buffers; collection disabled");
        if (g_sub) C.Unsubscribe(g_sub);
        return;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&exit_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store(&g_active, 1);
    /* An agent already listening gets everything from the first API call on. */
    (void)try_connect(1);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(at_exit);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, sender_main, NULL) != 0) {
        LOG_ONCE(L_ALLOC, "cannot start the sender thread; collection disabled");
        if (S.fd >= 0) {
            disable_collection();
            close(S.fd);
            S.fd = -1;
        }
        atomic_store(&g_active, 0);
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
