/*
 * libspecprof_cupti.so — specprof's CUPTI injection library. The CUDA driver loads it through
 * CUDA_INJECTION64_PATH and calls InitializeInjection from cuInit. It subscribes to CUPTI, converts
 * activity records into specprof's wire format (../wire.h) and streams them over a unix socket to
 * the agent (SPECPROF_SOCKET).
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
 *   - SPECPROF_CUPTI_DETACH=1: CUPTI detached for good once nothing more is traced (detach.c).
 *
 * This header holds the configuration (config.c), the one struct that holds what the library's
 * files share (`spc`), and the functions each file offers the others.
 *
 * Files, by concern:
 *   config.c     the environment, read once (config_read) into `cfg`; logging
 *   loader.c     finding and dlopen-ing libcupti, resolving its entry points, the versions accepted
 *   injection.c  InitializeInjection, the subscription, CUPTI's callbacks (application and CUPTI
 *                threads), the activity buffer pool, fork
 *   convert.c    CUPTI activity records -> wire records (../wire.h), kernel names, timestamps
 *   sender.c     the library's thread: the socket to the agent, HELLO, the output buffer,
 *                backpressure and drop counting, STATS, exit
 *   windows.c    enabling and disabling collection, switching activity kinds (GPU kinds on last,
 *                off first, on an application thread), duty-cycled windows
 *   detach.c     cuptiFinalize, or every callback off in a process that built CUDA graphs
 *
 * Threads. "app": application threads, inside CUPTI's callbacks for their CUDA calls (and the one
 * that runs cuInit, hence init). "cupti": CUPTI's own threads (buffer callbacks). "sender": the
 * library's thread specprof-cupti. "init": InitializeInjection before the sender exists. "exit":
 * the atexit handler. "fork": the atfork child handler. Nothing on an app or cupti thread blocks:
 * they take bufs.mu for a few instructions, cupti_mu only with trylock, and otherwise use atomics.
 */
#ifndef SPECPROF_CUPTI_STATE_H
#define SPECPROF_CUPTI_STATE_H

#include "cupti_min.h"
#include "../wire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>
#include <time.h>

#define DEFAULT_SOCKET "/run/specprof/cupti.sock"
#define EXIT_BUDGET_NS 200000000ull /* atexit: at most 200 ms for the sender to deliver */
#define MAX_BUFS_LIMIT 256
#define STATS_PERIOD_NS 1000000000ull
#define CONGESTION_WAIT_MS 5
#define WINDOW_HEARTBEAT_NS 100000000ull
#define NAMES_MAX (1u << 20)
/* Beyond the highest cbid of any CUPTI so far (13.0: under 800 driver, under 500 runtime); CUPTI
 * refuses the ids it does not know, which costs nothing. */
#define SPC_MAX_CBID 1024

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
/* The GPU kinds, switched only on an application thread (windows.c), and what duty windows switch:
 * the GPU records and the API and synchronization records that join them. */
#define K_GPU (K_KERNEL | K_MEMCPY | K_MEMSET | K_GRAPH)
#define K_WINDOWED (K_GPU | K_API | K_SYNC)

/* ------------------------------------------------------------------------------------------ */
/* Configuration (config.c): written once by config_read in init, before any callback or the     */
/* sender runs; read-only afterwards (init may clear api_cb before subscribing).                 */

struct spc_config {
    int disabled;          /* SPECPROF_CUPTI_DISABLE: anything but 0 */
    const char *cupti_lib; /* SPECPROF_CUPTI_LIB, or NULL */
    char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint32_t kinds;
    size_t buf_size;
    int max_bufs;
    uint32_t graph_cap;
    size_t out_cap; /* sender's output buffer */
    int all_api;    /* SPECPROF_CUPTI_API=all: records of every driver/runtime call, not only work */
    /* SPECPROF_CUPTI_DUTY=ON_MS/PERIOD_MS: GPU activity (kernels, copies, sets) is traced only in
     * windows of ON_MS every PERIOD_MS while an agent listens; 0: always. */
    uint64_t duty_on_ns, duty_period_ns;
    int detach;           /* SPECPROF_CUPTI_DETACH=1: finalize CUPTI once nothing more is traced */
    uint32_t max_windows; /* SPECPROF_CUPTI_WINDOWS=N: at most N duty windows; 0: no limit */
    /* SPECPROF_CUPTI_GRAPH_DETACH: what a detach does in a process that built CUDA graphs, which
     * cuptiFinalize breaks (see spc.graphs): "quiet" (default) turns every callback off and stays
     * subscribed; "unsubscribe" also drops the subscription (cuptiUnsubscribe, no finalize). */
    int graph_unsub;
    /* SPECPROF_CUPTI_DUTY_START=cycles: a duty window opens only when the agent says the process is
     * running its decode cycles (SPW_CMD_WINDOW), no sooner than a period after the last one opened;
     * "now" (default): the first window opens as soon as an agent listens. Windows at start fall on
     * model loading and warm-up, or on a server waiting for requests. */
    int duty_gated;
    int duty_graphs; /* SPECPROF_CUPTI_DUTY_GRAPHS (default 1); 0: no window opens in a process that
                      * has built CUDA graphs (see spc.duty_stopped) */

    /* Developer-only (config.c, "Developer-only knobs"): diagnostics and test cadences. */
    int debug;          /* SPECPROF_CUPTI_DEBUG=1: log connects and disconnects */
    uint64_t flush_ns;  /* SPECPROF_CUPTI_FLUSH_MS */
    uint64_t retry_ns;  /* SPECPROF_CUPTI_RETRY_MS */
    uint32_t duty_mask; /* SPECPROF_CUPTI_DUTY_KINDS: the kinds windows switch (default all of K_WINDOWED) */
    /* SPECPROF_CUPTI_API_SOURCE=callbacks (the default with duty-cycled tracing): the API records of
     * the work calls are made by this library in CUPTI's enter and exit callbacks (timestamps from
     * CLOCK_MONOTONIC, the correlation id CUPTI hands the callback) instead of CUPTI's DRIVER and
     * RUNTIME activity kinds, which are never enabled, so windows never switch them (see
     * config_read). With every kernel traced it saves nothing measurable, so there CUPTI's own
     * records stay the default. */
    int api_cb;
    uint32_t api_ring; /* SPECPROF_CUPTI_API_RING: slots of the callbacks' record ring (power of 2) */
};
extern struct spc_config cfg;

/* Reads the environment into cfg, each value checked (a bad one is logged with what is used instead). */
void config_read(void);

void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Logs each distinct message at most once per process (spc.logged). */
enum { L_NOLIB, L_VERSION, L_BUSY, L_SUBSCRIBE, L_REGISTER, L_TS, L_TID, L_FILTER, L_ENABLE, L_LAYOUT, L_SOCKET, L_ALLOC,
       L_GETNEXT, L_DETACH, L_NUM };
#define LOG_ONCE(id, ...)                                              \
    do {                                                               \
        if (!atomic_exchange(&spc.logged[id], 1)) logmsg(__VA_ARGS__); \
    } while (0)
#define DEBUG(...)                          \
    do {                                    \
        if (cfg.debug) logmsg(__VA_ARGS__); \
    } while (0)

static inline uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                      */

/* Detach (cfg.detach). CUPTI allows cuptiFinalize only from an API exit callback: the sender asks
 * (DETACH_REQ, with the API domains' callbacks on), the first application thread to leave a CUDA
 * call takes the request (FINALIZING) and detaches (DETACHED, final). While not ATTACHED no thread
 * calls into CUPTI, which would initialise it again without our subscription. */
enum { CS_ATTACHED, CS_DETACH_REQ, CS_FINALIZING, CS_DETACHED };
/* A posted switch of the GPU kinds (windows.c): WANT_*, taken by an application thread (APPLYING). */
enum { GS_IDLE, GS_WANT_ON, GS_WANT_OFF, GS_APPLYING };
/* Duty windows. OPENING, CLOSING: the GPU kinds' switch is posted. */
enum { W_CLOSED, W_OPENING, W_OPEN, W_CLOSING };

struct done_buf {
    uint8_t *buf;
    size_t valid;
};

/* A graph-node event; `ready` is released once rec is written. */
struct gn_slot {
    struct spw_graph_node rec;
    atomic_int ready;
};

/* A slot of the callbacks' API record ring. */
struct api_slot {
    _Atomic uint64_t seq; /* == position + 1: filled; == position: free for that position */
    struct spw_api rec;
};

struct name_ent {
    char *s;
    uint32_t len, id, epoch; /* epoch: the connection it was last sent on */
    uint64_t hash;
};

struct spc_state {
    /* --- Set once in init, before any callback or the sender runs; read-only afterwards. -------- */
    struct spc_api_table cupti; /* CUPTI entry points (loader.c) */
    uint32_t cupti_version;
    int clock;     /* SPW_CLOCK_CALLBACK, or SPW_CLOCK_OFFSET when CUPTI refused the timestamp callback */
    uint32_t pid;
    int efd;       /* eventfd that wakes the sender (non-blocking: any thread may write it) */
    struct gn_slot *gn;        /* graph-node table, cfg.graph_cap slots (mmap, touched on use) */
    struct api_slot *api_ring; /* cfg.api_ring slots with cfg.api_cb, else NULL */
    uint8_t tracked[SPC_MAX_CBID]; /* tracked_cbids as a set: launch and capture calls */
    uint8_t counted[SPC_MAX_CBID]; /* the calls counted in flight: tracked and kept driver calls */
    uint8_t drain[SPC_MAX_CBID];   /* the calls whose exit applies a posted GPU switch (drain_cbids) */
    uint8_t kept_api[2][SPC_MAX_CBID]; /* api_filter.h as sets: [0] driver, [1] runtime */

    /* --- Any thread, atomics. ------------------------------------------------------------------ */
    atomic_int logged[L_NUM];
    atomic_int active;     /* initialized and not switched off (init; the sender clears it on a layout mismatch) */
    atomic_int collecting; /* an agent is connected: kinds enabled, buffers granted (sender, init; fork clears it) */
    atomic_int forked;     /* we are a forked child: do nothing (fork) */
    atomic_int shutdown;   /* exit in progress: no more CUPTI calls from the sender (exit) */
    _Atomic int64_t offset; /* SPW_CLOCK_OFFSET: CUPTI time - CLOCK_MONOTONIC (sender, init) */
    atomic_int sender_waiting; /* the sender sleeps in poll: wake it (sender) */
    atomic_int exit_req;       /* atexit began the exit handshake (exit) */
    /* Counters behind STATS (cumulative; any thread adds). */
    struct {
        atomic_ullong delivered, dropped_cupti, dropped_no_agent, dropped_backpressure, dropped_disconnect,
            dropped_graph, buffers_completed, buffers_refused, bytes_sent, unknown, connects, names_dropped;
    } st;

    /* --- Detach (detach.c). ------------------------------------------------------------------- */
    atomic_int cs; /* CS_*: sender posts DETACH_REQ, an app thread takes it, exit cancels it */
    /* A CUDA graph node was created or cloned while CUPTI was subscribed (app, set once). Launches of
     * such graphs fail once CUPTI is finalized (CUPTI 13.0; PyTorch's profiler skips its CUPTI
     * teardown when graphs are used, pytorch#112507), also when the graphs were captured before any
     * window and only replayed in one (docs/overhead.md, known hazards), so a process with graphs is
     * never finalized: its detach turns CUPTI quiet instead (quiet_cupti). */
    atomic_int graphs;
    atomic_ullong detaches, detach_stall_ns, detach_refused; /* STATS (app, sender) */
    /* 1: instead of a finalize, every callback went off (quiet); 2: and the subscription went too. */
    atomic_ullong detach_quiet;
    /* 1: windows stopped opening because the process had built CUDA graphs (SPECPROF_CUPTI_DUTY_GRAPHS=0
     * only). Switching at the exit of any call crashed graph processes (see windows.c); switching only
     * where the application waits for the GPU does not, so graph processes switch too by default. */
    atomic_ullong duty_stopped;
    int detach_pending;         /* sender: a request made and not yet seen through */
    int detach_off;             /* sender: cuptiFinalize failed or is missing: stay attached */
    int no_detach;              /* under detach_mu: exit began, no new request */
    pthread_mutex_t detach_mu;  /* orders the sender's request against exit's cancel */
    /* The subscriber (init); the sender clears it once CUPTI is detached or unsubscribed, after which
     * no thread uses it (cs is CS_DETACHED). */
    spc_subscriber sub;

    /* --- Locks between threads. ---------------------------------------------------------------- */
    /* Held by the sender while it calls CUPTI (flush, buffers, kinds, callbacks), and taken with
     * trylock by the application thread that applies a posted switch: the two never call into CUPTI
     * at the same time, and the application thread never waits (busy: the next call's exit applies
     * the switch). Exit takes it for its forced flush. */
    pthread_mutex_t cupti_mu;
    /* Exit handshake between atexit and the sender: exit_done under exit_mu, exit_cv on
     * CLOCK_MONOTONIC (set up in init); exit_deadline written by exit before exit_req. */
    pthread_mutex_t exit_mu;
    pthread_cond_t exit_cv;
    int exit_done;
    uint64_t exit_deadline;

    /* --- Activity buffers (injection.c): a pool of at most cfg.max_bufs and the queue of completed
     * ones; every field under bufs.mu, held for a few instructions by cupti, app and sender threads
     * (and across fork). */
    struct {
        pthread_mutex_t mu;
        uint8_t *free[MAX_BUFS_LIMIT];
        int nfree, nalloc;
        struct done_buf done[MAX_BUFS_LIMIT];
        int dhead, dn;
    } bufs;

    /* --- Graph nodes: a lock-free append-only table (app threads claim gn_n, the sender reads the
     * slots marked ready). It is kept, so every new connection gets the whole mapping (graphs are
     * usually captured at startup, before a late agent connects). */
    atomic_uint gn_n;

    /* --- In-flight calls (duty-cycled tracing): a window closes only once the calls that may have
     * made GPU records have returned and so have their API records. A generation bumped at each
     * window opening discards calls that entered in an earlier one (their exit callback may never
     * come once the callbacks are off). App threads count; the sender resets and waits. */
    atomic_int inflight;
    atomic_uint inflight_gen;
    atomic_int count_inflight; /* duty-cycled only: no shared counter on other launches' path (sender) */

    /* --- The GPU kinds' switch (windows.c): the sender posts (gs, gs_kinds), an app thread applies. */
    atomic_int gs;                 /* GS_* */
    uint32_t gs_kinds;             /* the record-type bits a switch applies to: the sender writes it
                                    * before posting gs, the applying thread reads it after */
    atomic_int gpu_on;             /* those kinds are enabled, as last applied */
    _Atomic uint64_t gs_at;        /* the last switch: after enabling, or before disabling */
    atomic_ullong gs_count, gs_ns, gs_max_ns; /* switches applied, application threads' time (STATS) */
    int gs_cb; /* sender: the callbacks of the calls in drain are on for a posted switch */

    /* --- API records made in callbacks (cfg.api_cb): app threads push into a bounded ring (a
     * sequence number per slot: lock-free, never waits; a full ring drops the record and counts it
     * as backpressure), the sender pops. */
    _Atomic uint64_t api_tail; /* next position to claim (app) */
    uint64_t api_head;         /* next position to read (sender) */
    atomic_int cb_api;         /* the callbacks make API records now (sender, app switch, init) */

    /* --- Collection and windows (windows.c): sender only, or init before the sender exists. ---- */
    uint32_t enabled_types; /* record-type bits actually enabled */
    uint32_t duty_types;    /* the kinds windows switch (0: not duty-cycled) */
    int cb_on;              /* the launch callbacks are on */
    int wstate;             /* W_* */
    uint64_t window_start, window_end, next_toggle;
    int window_req;        /* the agent asked for a window (SPW_CMD_WINDOW, cfg.duty_gated) */
    uint64_t window_asof;  /* the last "still open" WINDOW record's time */
    uint32_t windows;      /* duty windows opened */

    /* --- The connection and its output buffer (sender.c): sender only, or init before the sender
     * exists; fork closes fd in the child. */
    struct {
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
    } out;

    /* --- Kernel names, interned per process, sent once per connection (convert.c): sender only. */
    struct {
        struct name_ent *t;
        uint32_t cap, n;
        const char *cache_ptr[1024];
        uint32_t cache_slot[1024];
    } names;
};
extern struct spc_state spc;

/* Thread-local state of application threads lives in injection.c (the call in progress per thread:
 * its correlation id and cbid for graph nodes, its in-flight generation, its API record's enter). */

/* ------------------------------------------------------------------------------------------ */
/* What each file offers the others                                                           */

/* loader.c */
void *load_cupti(char *found, size_t fsz);
int resolve(void *h);
/* Reads CUPTI's version into spc.cupti_version; -1 (said once) when it is not one this library reads. */
int check_version(const char *found);
const char *result_str(spc_result r);

/* injection.c */
extern const uint16_t tracked_cbids[];
extern const size_t n_tracked_cbids;
void buffer_free(uint8_t *b);

/* convert.c */
void process_buffer(uint8_t *buf, size_t valid);
void measure_offset(void);

/* sender.c */
void *sender_main(void *arg);
void sender_at_exit(void);
void wake_sender(void);
void kick_sender(void);
int out_record(uint16_t type, uint16_t flags, const void *payload, size_t plen, const void *extra, size_t elen);
int try_connect(int app_thread);
int drain_buffers(void);

/* windows.c */
void filter_api_records(void);
void set_driver_callbacks(uint32_t on);
void gpu_switch_here(int on);
int gpu_switch_done(void);
void enable_collection(int app_thread);
void disable_collection(void);
uint64_t duty_step(uint64_t now);

/* detach.c */
int cupti_usable(void);
void finalize_here(void);
void request_detach(void);
void poll_detach(void);
int ensure_attached(void);

#endif
