/*
 * libcuda.c — specprof's stand-in for NVIDIA's libcuda.so.1: the real exported names and ABI of
 * the CUDA driver API calls specprof traces, driving a SIMULATED GPU (per-stream FIFO timelines,
 * known kernel durations, graph capture and replay, blocking synchronization, host-memory backed
 * device memory) and writing exact ground truth as JSON lines. See simgpu.h for the extension
 * API, the environment knobs and the truth-file schema.
 *
 * Every exported function starts with `push %rbp` (checked by `make check`), like the real driver.
 */
#define _GNU_SOURCE
#define SIMGPU_CUDA_NO_API_MACROS
#include "cuda.h"
#include "simgpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default"), noinline))
/* Forces a frame (push %rbp; mov %rsp,%rbp) even in leaf functions gcc would leave frameless. */
#define FRAME() __asm__ volatile("" : : "r"(__builtin_frame_address(0)))
#define MAX_DEVICES 16
#define MAX_OBSERVERS 8
#define TAG_LEN 64

/* ------------------------------------------------------------------------------------------ */
/* Configuration                                                                              */

static struct {
    int devices;
    uint64_t kernel_ns;
    uint64_t lat;
    uint64_t gap;
    uint64_t qgap;
    uint64_t copy_bpus;
    int legacy_barrier;
} cfg;

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* the simulator state */
static pthread_mutex_t t_mu = PTHREAD_MUTEX_INITIALIZER; /* the truth buffer */

static atomic_ullong g_corr;
static atomic_int g_initialized;
static uint32_t g_pid;

static __thread char t_tag[TAG_LEN];
static __thread uint32_t t_tid;
static __thread uint64_t t_last_corr;
/* The runtime call this thread is in (the stand-in libcudart's, simgpu_runtime_enter): driver calls
 * made in it are its parts, and the GPU work they make carries its correlation id, as with CUPTI. */
static __thread struct {
    uint64_t corr, enter, stream;
    const char *api;
} t_rt;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
    struct timespec ts;
    ts.tv_sec = (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static uint32_t my_tid(void) {
    if (t_tid == 0) t_tid = (uint32_t)syscall(SYS_gettid);
    return t_tid;
}

static uint64_t env_u64(const char *name, uint64_t def, uint64_t min) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || !end || *end) {
        fprintf(stderr, "specprof simgpu: ignoring %s=%s (not a number)\n", name, v);
        return def;
    }
    if (x < min) x = min;
    return (uint64_t)x;
}

/* ------------------------------------------------------------------------------------------ */
/* Truth file                                                                                 */

#define TBUF_CAP (1u << 20)
static int truth_fd = -1;
static char *tbuf;
static size_t tlen;

static void truth_flush_locked(void) {
    size_t off = 0;
    while (truth_fd >= 0 && off < tlen) {
        ssize_t w = write(truth_fd, tbuf + off, tlen - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            break;
        }
        off += (size_t)w;
    }
    tlen = 0;
}

static void truth_append(const char *line, size_t n) {
    if (truth_fd < 0) return;
    pthread_mutex_lock(&t_mu);
    if (tlen + n > TBUF_CAP) truth_flush_locked();
    if (n <= TBUF_CAP) {
        memcpy(tbuf + tlen, line, n);
        tlen += n;
    }
    pthread_mutex_unlock(&t_mu);
}

static void truth_atexit(void) {
    pthread_mutex_lock(&t_mu);
    truth_flush_locked();
    pthread_mutex_unlock(&t_mu);
}

static void fork_prepare(void) {
    pthread_mutex_lock(&g_mu);
    pthread_mutex_lock(&t_mu);
    truth_flush_locked();
}
static void fork_parent(void) {
    pthread_mutex_unlock(&t_mu);
    pthread_mutex_unlock(&g_mu);
}
static void fork_child(void) {
    tlen = 0;
    t_tid = 0;
    g_pid = (uint32_t)getpid();
    pthread_mutex_unlock(&t_mu);
    pthread_mutex_unlock(&g_mu);
}

static void cfg_init(void) {
    cfg.devices = (int)env_u64("SPECPROF_SIM_DEVICES", 1, 0);
    if (cfg.devices > MAX_DEVICES) cfg.devices = MAX_DEVICES;
    cfg.kernel_ns = env_u64("SPECPROF_SIM_KERNEL_NS", 10000, 0);
    cfg.lat = env_u64("SPECPROF_SIM_LAUNCH_LATENCY_NS", 4000, 0);
    cfg.gap = env_u64("SPECPROF_SIM_GRAPH_NODE_GAP_NS", 1000, 0);
    cfg.qgap = env_u64("SPECPROF_SIM_QUEUE_GAP_NS", 0, 0);
    cfg.copy_bpus = env_u64("SPECPROF_SIM_COPY_BYTES_PER_US", 20000, 1);
    cfg.legacy_barrier = env_u64("SPECPROF_SIM_LEGACY_BARRIER", 0, 0) != 0;
    g_pid = (uint32_t)getpid();
    const char *p = getenv("SPECPROF_SIM_TRUTH");
    if (p && *p) {
        tbuf = malloc(TBUF_CAP);
        int fd = tbuf ? open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
        if (fd < 0) {
            fprintf(stderr, "specprof simgpu: cannot open truth file %s: %s\n", p, strerror(errno));
        } else {
            truth_fd = fd;
            atexit(truth_atexit);
        }
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void cfg_ensure(void) { pthread_once(&cfg_once, cfg_init); }

__attribute__((destructor)) static void simgpu_fini(void) {
    if (truth_fd >= 0) truth_atexit();
}

/* A small JSON line builder. */
typedef struct {
    char b[8192];
    size_t n;
} sbuf;

static void sb_fmt(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *s, const char *fmt, ...) {
    size_t room = sizeof s->b - s->n;
    if (room <= 1) return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(s->b + s->n, room, fmt, ap);
    va_end(ap);
    if (r < 0) return;
    s->n += ((size_t)r < room) ? (size_t)r : room - 1;
}

/* Appends a quoted, escaped JSON string (at most ~3000 bytes of it). */
static void sb_str(sbuf *s, const char *t) {
    static const char hex[] = "0123456789abcdef";
    if (!t) t = "";
    size_t lim = s->n + 3000;
    if (lim > sizeof s->b - 16) lim = sizeof s->b - 16;
    if (s->n >= lim) return;
    s->b[s->n++] = '"';
    for (; *t && s->n < lim; t++) {
        unsigned char c = (unsigned char)*t;
        if (c == '"' || c == '\\') {
            s->b[s->n++] = '\\';
            s->b[s->n++] = (char)c;
        } else if (c < 0x20) {
            s->b[s->n++] = '\\';
            s->b[s->n++] = 'u';
            s->b[s->n++] = '0';
            s->b[s->n++] = '0';
            s->b[s->n++] = hex[c >> 4];
            s->b[s->n++] = hex[c & 15];
        } else {
            s->b[s->n++] = (char)c;
        }
    }
    s->b[s->n++] = '"';
    s->b[s->n] = 0;
}

static void sb_emit(sbuf *s) {
    if (s->n > sizeof s->b - 3) s->n = sizeof s->b - 3;
    s->b[s->n++] = '}';
    s->b[s->n++] = '\n';
    truth_append(s->b, s->n);
}

/* ------------------------------------------------------------------------------------------ */
/* Observers                                                                                  */

static simgpu_observer g_obs[MAX_OBSERVERS];
static atomic_int g_nobs;

/* ------------------------------------------------------------------------------------------ */
/* Handle registry: every live handle we gave out, with its type, so unknown handles are      */
/* rejected instead of dereferenced.                                                          */

enum htype { H_CTX = 1, H_MOD, H_FUNC, H_STREAM, H_EVENT, H_GRAPH, H_GEXEC };
struct hent {
    uintptr_t key; /* 0 = empty, 1 = tombstone */
    int type;
};
static struct hent *htab;
static size_t hcap, hused;

static size_t hhash(uintptr_t k) { return (size_t)((k >> 4) * 0x9E3779B97F4A7C15ull); }

static int reg_put_raw(uintptr_t k, int type) {
    size_t m = hcap - 1;
    for (size_t i = hhash(k) & m;; i = (i + 1) & m) {
        if (htab[i].key == 0 || htab[i].key == 1) {
            if (htab[i].key == 0) hused++;
            htab[i].key = k;
            htab[i].type = type;
            return 0;
        }
    }
}

static int reg_add(const void *p, int type) {
    if (hused + 1 > hcap / 2) {
        size_t live = 0;
        for (size_t i = 0; i < hcap; i++) live += htab[i].key > 1;
        size_t ncap = 64;
        while (ncap < (live + 1) * 4) ncap <<= 1;
        struct hent *old = htab;
        size_t ocap = hcap;
        struct hent *nt = calloc(ncap, sizeof *nt);
        if (!nt) return -1;
        htab = nt;
        hcap = ncap;
        hused = 0;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].key > 1) reg_put_raw(old[i].key, old[i].type);
        free(old);
    }
    return reg_put_raw((uintptr_t)p, type);
}

static struct hent *reg_find(const void *p) {
    uintptr_t k = (uintptr_t)p;
    if (!htab || k <= 1) return NULL;
    size_t m = hcap - 1;
    for (size_t i = hhash(k) & m;; i = (i + 1) & m) {
        if (htab[i].key == 0) return NULL;
        if (htab[i].key == k) return &htab[i];
    }
}

static int reg_has(const void *p, int type) {
    struct hent *e = reg_find(p);
    return e && e->type == type;
}

static void reg_del(const void *p) {
    struct hent *e = reg_find(p);
    if (e) e->key = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Simulator objects                                                                          */

enum skind { S_CREATED = 0, S_LEGACY = 1, S_PER_THREAD = 2 };

struct graph;
struct ctx;

struct stream {
    struct ctx *ctx;
    uint64_t handle; /* value reported in GPU records: 0 for legacy, else the struct address */
    uint32_t id;
    int kind;
    unsigned flags;
    int priority;
    uint64_t free_at;
    int capturing;
    int cap_mode;
    uint32_t cap_tid;
    struct graph *cap_graph;
    struct stream *next; /* ctx's list */
};

struct ctx {
    int device;
    int primary;
    int alive;
    unsigned flags;
    int refcount;
    struct stream *legacy;
    struct stream *streams; /* every stream of the context, legacy and per-thread included */
    uint64_t destroyed_free_at;
};

struct mod;
struct func {
    struct mod *mod;
    const char *name; /* never freed: GPU records may point at it */
    uint64_t duration;
    struct func *next;
};
struct mod {
    struct ctx *ctx;
    struct func *funcs;
};

struct event {
    struct ctx *ctx;
    unsigned flags;
    int recorded;
    uint64_t time;
};

struct node {
    uint32_t node_id;
    const char *name;
    uint64_t duration;
    uint32_t grid[3], block[3], shmem;
    char capture_tag[TAG_LEN];
};

struct graph {
    uint64_t id;
    struct node *nodes;
    size_t n, cap;
};

struct gexec {
    uint64_t id;
    uint64_t graph_id;
    struct node *nodes;
    size_t n;
};

struct alloc {
    uintptr_t base;
    size_t size;
};

static struct ctx *g_primary[MAX_DEVICES];
static uint32_t g_next_stream_id;
static uint64_t g_next_graph_id, g_next_exec_id;
static struct alloc *g_allocs;
static size_t g_nallocs, g_allocs_cap;

static __thread struct ctx *t_ctx;
struct ptstream {
    struct ctx *ctx;
    struct stream *s;
    struct ptstream *next;
};
static __thread struct ptstream *t_pts;

static struct stream *stream_new(struct ctx *c, int kind, unsigned flags, int prio) {
    struct stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->ctx = c;
    s->kind = kind;
    s->flags = flags;
    s->priority = prio;
    s->id = ++g_next_stream_id;
    s->handle = kind == S_LEGACY ? 0 : (uint64_t)(uintptr_t)s;
    s->next = c->streams;
    c->streams = s;
    return s;
}

static struct ctx *ctx_new(int dev, int primary, unsigned flags) {
    struct ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->device = dev;
    c->primary = primary;
    c->alive = 1;
    c->flags = flags;
    c->legacy = stream_new(c, S_LEGACY, 0, 0);
    if (!c->legacy || reg_add(c, H_CTX) < 0) {
        free(c->legacy);
        free(c);
        return NULL;
    }
    return c;
}

static struct ctx *cur_ctx(void) {
    struct ctx *c = t_ctx;
    return (c && c->alive) ? c : NULL;
}

static struct stream *per_thread_stream(struct ctx *c) {
    for (struct ptstream *p = t_pts; p; p = p->next)
        if (p->ctx == c) return p->s;
    struct ptstream *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->s = stream_new(c, S_PER_THREAD, 0, 0);
    if (!p->s) {
        free(p);
        return NULL;
    }
    p->ctx = c;
    p->next = t_pts;
    t_pts = p;
    return p->s;
}

/* Resolves a stream argument. ptsz: the per-thread-default-stream variant (stream 0 = per-thread). */
static CUresult resolve_stream(CUstream h, int ptsz, struct stream **out) {
    uintptr_t v = (uintptr_t)h;
    if (v == 0) v = ptsz ? 2 : 1;
    if (v == 1 || v == 2) {
        struct ctx *c = cur_ctx();
        if (!c) return CUDA_ERROR_INVALID_CONTEXT;
        struct stream *s = v == 1 ? c->legacy : per_thread_stream(c);
        if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
        *out = s;
        return CUDA_SUCCESS;
    }
    if (!reg_has(h, H_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
    struct stream *s = (struct stream *)h;
    if (!s->ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
    *out = s;
    return CUDA_SUCCESS;
}

/* Earliest time new work on s may start (its FIFO; plus legacy-stream barriers when enabled). */
static uint64_t stream_ready(struct stream *s) {
    uint64_t t = s->free_at;
    if (!cfg.legacy_barrier) return t;
    if (s->kind == S_LEGACY) {
        for (struct stream *o = s->ctx->streams; o; o = o->next)
            if (o != s && !(o->flags & CU_STREAM_NON_BLOCKING) && o->free_at > t) t = o->free_at;
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
        if (s->ctx->legacy->free_at > t) t = s->ctx->legacy->free_at;
    }
    return t;
}

/* Work queued behind other work starts cfg.qgap after it ends (the GPU's hand-over, which CUDA
 * events count); work submitted to an idle stream starts cfg.lat after its submission. */
static void schedule(struct stream *s, uint64_t now, uint64_t dur, uint64_t *start, uint64_t *end) {
    uint64_t st = now + cfg.lat;
    uint64_t r = stream_ready(s);
    if (r && r + cfg.qgap > st) st = r + cfg.qgap;
    *start = st;
    *end = st + dur;
    s->free_at = *end;
}

static uint64_t copy_duration(size_t bytes) {
    uint64_t d = (uint64_t)bytes * 1000ull / cfg.copy_bpus;
    return d < 1000 ? 1000 : d;
}

/* Device memory: [base, base+size) ranges sorted by base. */
static ssize_t alloc_index(uintptr_t p) {
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_allocs[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return -1;
    struct alloc *a = &g_allocs[lo - 1];
    if (p >= a->base && p < a->base + a->size) return (ssize_t)(lo - 1);
    return -1;
}

static int alloc_range_ok(CUdeviceptr p, size_t n) {
    ssize_t i = alloc_index((uintptr_t)p);
    if (i < 0) return 0;
    struct alloc *a = &g_allocs[i];
    return n <= a->size - ((uintptr_t)p - a->base);
}

static int alloc_insert(uintptr_t base, size_t size) {
    if (g_nallocs == g_allocs_cap) {
        size_t nc = g_allocs_cap ? g_allocs_cap * 2 : 64;
        struct alloc *na = realloc(g_allocs, nc * sizeof *na);
        if (!na) return -1;
        g_allocs = na;
        g_allocs_cap = nc;
    }
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_allocs[mid].base < base)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&g_allocs[lo + 1], &g_allocs[lo], (g_nallocs - lo) * sizeof *g_allocs);
    g_allocs[lo].base = base;
    g_allocs[lo].size = size;
    g_nallocs++;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Per-call bookkeeping: correlation id, timestamps, the GPU operations the call produced.    */

enum pkind { P_KERNEL = SIMGPU_OP_KERNEL, P_MEMCPY = SIMGPU_OP_MEMCPY, P_MEMSET = SIMGPU_OP_MEMSET, P_NODE = 10 };

struct pend {
    int kind;
    simgpu_gpu_rec r;   /* kernels, copies, memsets */
    uint64_t duration;  /* graph nodes */
    char capture_tag[TAG_LEN];
};

struct call {
    const char *api;
    uint64_t corr;
    uint64_t enter;
    uint64_t stream;
    size_t n, cap;
    struct pend *ops;
    struct pend inl[4];
};

#define API_BEGIN(NAME, STREAM)      \
    struct call C;                   \
    call_begin(&C, NAME, (uint64_t)(uintptr_t)(STREAM))
#define API_RETURN(EXPR) return call_end(&C, (EXPR))

static void call_begin(struct call *c, const char *api, uint64_t stream) {
    c->enter = now_ns();
    cfg_ensure();
    c->corr = atomic_fetch_add(&g_corr, 1) + 1;
    t_last_corr = c->corr;
    c->api = api;
    c->stream = stream;
    c->n = 0;
    c->cap = sizeof c->inl / sizeof c->inl[0];
    c->ops = c->inl;
    int nobs = atomic_load(&g_nobs);
    if (nobs > 0) {
        simgpu_api_rec r = {.corr = c->corr,
                            .api = api,
                            .pid = g_pid,
                            .tid = my_tid(),
                            .enter = c->enter,
                            .stream = stream,
                            .tag = t_tag,
                            .parent = t_rt.corr};
        for (int i = 0; i < nobs; i++)
            if (g_obs[i].api_enter) g_obs[i].api_enter(&r);
    }
}

/* A new pending GPU operation of the call (NULL when out of memory: the record is dropped). */
static struct pend *call_op(struct call *c, int kind) {
    if (c->n == c->cap) {
        size_t nc = c->cap * 2;
        struct pend *np = malloc(nc * sizeof *np);
        if (!np) return NULL;
        memcpy(np, c->ops, c->n * sizeof *np);
        if (c->ops != c->inl) free(c->ops);
        c->ops = np;
        c->cap = nc;
    }
    struct pend *p = &c->ops[c->n++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->r.kind = (simgpu_op_kind)kind;
    p->r.corr = t_rt.corr ? t_rt.corr : c->corr;
    p->r.api = t_rt.corr ? t_rt.api : c->api;
    p->r.pid = g_pid;
    p->r.tid = my_tid();
    p->r.tag = t_tag;
    return p;
}

static void op_fill_stream(struct pend *p, struct stream *s) {
    p->r.stream = s->handle;
    p->r.stream_id = s->id;
    p->r.device = s->ctx->device;
    p->r.context = (uint64_t)(uintptr_t)s->ctx;
}

static void emit_gpu(struct pend *p) {
    simgpu_gpu_rec *r = &p->r;
    sbuf s;
    s.n = 0;
    s.b[0] = 0;
    if (p->kind == P_KERNEL) {
        sb_fmt(&s, "{\"kind\":\"kernel\",\"corr\":%llu,\"api\":", (unsigned long long)r->corr);
        sb_str(&s, r->api);
        sb_fmt(&s, ",\"name\":");
        sb_str(&s, r->name);
        sb_fmt(&s,
               ",\"stream\":%llu,\"stream_id\":%u,\"device\":%d,\"context\":%llu,\"submit\":%llu,\"start\":%llu,"
               "\"end\":%llu,\"graph_id\":%llu,\"graph_exec_id\":%llu,\"node_id\":%u,\"grid\":[%u,%u,%u],"
               "\"block\":[%u,%u,%u],\"shared_mem\":%u,\"pid\":%u,\"tid\":%u,\"tag\":",
               (unsigned long long)r->stream, r->stream_id, r->device, (unsigned long long)r->context,
               (unsigned long long)r->submit, (unsigned long long)r->start, (unsigned long long)r->end,
               (unsigned long long)r->graph_id, (unsigned long long)r->graph_exec_id, r->node_id, r->grid[0],
               r->grid[1], r->grid[2], r->block[0], r->block[1], r->block[2], r->shared_mem, r->pid, r->tid);
        sb_str(&s, r->tag);
        sb_fmt(&s, ",\"capture_tag\":");
        sb_str(&s, r->capture_tag);
    } else {
        sb_fmt(&s, "{\"kind\":\"%s\",\"corr\":%llu,\"api\":", p->kind == P_MEMCPY ? "memcpy" : "memset",
               (unsigned long long)r->corr);
        sb_str(&s, r->api);
        sb_fmt(&s, ",\"bytes\":%llu,", (unsigned long long)r->bytes);
        if (p->kind == P_MEMCPY)
            sb_fmt(&s, "\"copy_kind\":\"%s\",", r->copy_kind);
        else
            sb_fmt(&s, "\"value\":%u,", r->value);
        sb_fmt(&s,
               "\"stream\":%llu,\"stream_id\":%u,\"device\":%d,\"context\":%llu,\"submit\":%llu,\"start\":%llu,"
               "\"end\":%llu,\"pid\":%u,\"tid\":%u,\"tag\":",
               (unsigned long long)r->stream, r->stream_id, r->device, (unsigned long long)r->context,
               (unsigned long long)r->submit, (unsigned long long)r->start, (unsigned long long)r->end, r->pid,
               r->tid);
        sb_str(&s, r->tag);
    }
    sb_emit(&s);
    int nobs = atomic_load(&g_nobs);
    for (int i = 0; i < nobs; i++)
        if (g_obs[i].gpu_op) g_obs[i].gpu_op(r);
}

static void emit_node(struct pend *p) {
    simgpu_gpu_rec *r = &p->r;
    sbuf s;
    s.n = 0;
    s.b[0] = 0;
    sb_fmt(&s, "{\"kind\":\"graph_node\",\"corr\":%llu,\"api\":", (unsigned long long)r->corr);
    sb_str(&s, r->api);
    sb_fmt(&s, ",\"graph_id\":%llu,\"node_id\":%u,\"name\":", (unsigned long long)r->graph_id, r->node_id);
    sb_str(&s, r->name);
    sb_fmt(&s,
           ",\"duration\":%llu,\"stream\":%llu,\"stream_id\":%u,\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],"
           "\"shared_mem\":%u,\"pid\":%u,\"tid\":%u,\"tag\":",
           (unsigned long long)p->duration, (unsigned long long)r->stream, r->stream_id, r->grid[0], r->grid[1],
           r->grid[2], r->block[0], r->block[1], r->block[2], r->shared_mem, r->pid, r->tid);
    sb_str(&s, r->tag);
    sb_emit(&s);
    int nobs = atomic_load(&g_nobs);
    if (nobs > 0) {
        simgpu_graph_node_rec g = {.graph_id = r->graph_id,
                                   .node_id = r->node_id,
                                   .corr = r->corr,
                                   .api = r->api,
                                   .name = r->name,
                                   .duration = p->duration,
                                   .pid = r->pid,
                                   .tid = r->tid,
                                   .tag = r->tag};
        for (int i = 0; i < nobs; i++)
            if (g_obs[i].graph_node) g_obs[i].graph_node(&g);
    }
}

/* Emits the call's pending GPU operations (call outside g_mu). */
static void call_flush_ops(struct call *c) {
    for (size_t i = 0; i < c->n; i++) {
        struct pend *p = &c->ops[i];
        if (p->kind == P_NODE)
            emit_node(p);
        else
            emit_gpu(p);
    }
    c->n = 0;
}

static CUresult call_end(struct call *c, CUresult rc) {
    call_flush_ops(c);
    if (c->ops != c->inl) free(c->ops);
    uint64_t exit_ns = now_ns();
    if (truth_fd >= 0) {
        sbuf s;
        s.n = 0;
        s.b[0] = 0;
        sb_fmt(&s, "{\"kind\":\"api\",\"corr\":%llu,\"api\":", (unsigned long long)c->corr);
        sb_str(&s, c->api);
        sb_fmt(&s, ",\"pid\":%u,\"tid\":%u,\"enter\":%llu,\"exit\":%llu,\"stream\":%llu,\"result\":%d,\"parent\":%llu,\"tag\":",
               g_pid, my_tid(), (unsigned long long)c->enter, (unsigned long long)exit_ns, (unsigned long long)c->stream,
               (int)rc, (unsigned long long)t_rt.corr);
        sb_str(&s, t_tag);
        sb_emit(&s);
    }
    int nobs = atomic_load(&g_nobs);
    if (nobs > 0) {
        simgpu_api_rec r = {.corr = c->corr,
                            .api = c->api,
                            .pid = g_pid,
                            .tid = my_tid(),
                            .enter = c->enter,
                            .exit = exit_ns,
                            .stream = c->stream,
                            .result = (int)rc,
                            .tag = t_tag,
                            .parent = t_rt.corr};
        for (int i = 0; i < nobs; i++)
            if (g_obs[i].api_exit) g_obs[i].api_exit(&r);
    }
    return rc;
}

#define LOCK() pthread_mutex_lock(&g_mu)
#define UNLOCK() pthread_mutex_unlock(&g_mu)
#define INITED() (atomic_load(&g_initialized) != 0)

/* ------------------------------------------------------------------------------------------ */
/* Injection (CUDA_INJECTION64_PATH)                                                          */

static atomic_int inj_state; /* 0 not yet, 1 running, 2 done */
static pthread_mutex_t inj_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t inj_cv = PTHREAD_COND_INITIALIZER;
static __thread int t_in_injection;

static void run_injection(void) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&inj_state, &expected, 1)) {
        const char *path = getenv("CUDA_INJECTION64_PATH");
        if (path && *path) {
            t_in_injection = 1;
            void *h = dlopen(path, RTLD_NOW);
            if (!h) {
                fprintf(stderr, "specprof simgpu: CUDA_INJECTION64_PATH: dlopen(%s) failed: %s\n", path, dlerror());
            } else {
                int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
                if (!init)
                    fprintf(stderr, "specprof simgpu: CUDA_INJECTION64_PATH: %s has no InitializeInjection: %s\n",
                            path, dlerror());
                else
                    (void)init();
            }
            t_in_injection = 0;
        }
        pthread_mutex_lock(&inj_mu);
        atomic_store(&inj_state, 2);
        pthread_cond_broadcast(&inj_cv);
        pthread_mutex_unlock(&inj_mu);
    } else if (expected == 1 && !t_in_injection) {
        pthread_mutex_lock(&inj_mu);
        while (atomic_load(&inj_state) != 2) pthread_cond_wait(&inj_cv, &inj_mu);
        pthread_mutex_unlock(&inj_mu);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Initialization, version, errors                                                            */

EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
    API_BEGIN("cuInit", 0);
    CUresult rc = CUDA_SUCCESS;
    if (Flags != 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (cfg.devices <= 0)
        rc = CUDA_ERROR_NO_DEVICE;
    else {
        atomic_store(&g_initialized, 1);
        run_injection();
    }
    API_RETURN(rc);
}

EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
    API_BEGIN("cuDriverGetVersion", 0);
    if (!driverVersion) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *driverVersion = 13000;
    API_RETURN(CUDA_SUCCESS);
}

static const struct {
    int code;
    const char *name;
    const char *str;
} g_errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {5, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {909, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult error, const char **pStr, int want_name) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++) {
        if (g_errors[i].code == (int)error) {
            *pStr = want_name ? g_errors[i].name : g_errors[i].str;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
    API_BEGIN("cuGetErrorString", 0);
    API_RETURN(error_lookup(error, pStr, 0));
}

EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
    API_BEGIN("cuGetErrorName", 0);
    API_RETURN(error_lookup(error, pStr, 1));
}

static void *g_self;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;

static void self_init(void) {
    Dl_info info;
    if (dladdr((void *)&cuInit, &info) && info.dli_fname) g_self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

/* This library's own handle, for dlsym (not RTLD_DEFAULT: another libcuda could come first). */
static void *self_handle(void) {
    pthread_once(&self_once, self_init);
    return g_self;
}

static CUresult proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    void *self = self_handle();
    size_t len = strnlen(symbol, 256);
    if (!self || len == 0 || len >= 200) {
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    const char *base = symbol;
    if (strcmp(symbol, "cuGraphInstantiate") == 0 && cudaVersion >= 12000) base = "cuGraphInstantiateWithFlags";
    static const char *pt_suffixes[] = {"_v3_ptds", "_v3_ptsz", "_v2_ptds", "_v2_ptsz", "_ptds", "_ptsz"};
    static const char *suffixes[] = {"_v3", "_v2", ""};
    char name[256];
    void *p = NULL;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        for (size_t i = 0; !p && i < sizeof pt_suffixes / sizeof pt_suffixes[0]; i++) {
            snprintf(name, sizeof name, "%s%s", base, pt_suffixes[i]);
            p = dlsym(self, name);
        }
    }
    int old_ctx_sync = strcmp(symbol, "cuCtxSynchronize") == 0 && cudaVersion < 13000;
    for (size_t i = old_ctx_sync ? 2 : 0; !p && i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(name, sizeof name, "%s%s", base, suffixes[i]);
        p = dlsym(self, name);
    }
    if (!p) {
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = p;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    API_BEGIN("cuGetProcAddress", 0);
    API_RETURN(proc_address(symbol, pfn, cudaVersion, flags, NULL));
}

EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus) {
    API_BEGIN("cuGetProcAddress_v2", 0);
    API_RETURN(proc_address(symbol, pfn, cudaVersion, flags, symbolStatus));
}

/* ------------------------------------------------------------------------------------------ */
/* Devices                                                                                    */

static CUresult check_dev(CUdevice dev) {
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= cfg.devices) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    API_BEGIN("cuDeviceGet", 0);
    if (!device) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_dev(ordinal);
    if (rc == CUDA_SUCCESS) *device = ordinal;
    API_RETURN(rc);
}

EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
    API_BEGIN("cuDeviceGetCount", 0);
    if (!count) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    *count = cfg.devices;
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
    API_BEGIN("cuDeviceGetName", 0);
    if (!name || len <= 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_dev(dev);
    if (rc == CUDA_SUCCESS) snprintf(name, (size_t)len, "%s", "specprof simulated GPU");
    API_RETURN(rc);
}

static int device_attribute(int attrib, int dev, int *ok) {
    *ok = 1;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + dev;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return dev;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    default:
        if (attrib > 0 && attrib < 256) return 0; /* known to the real driver or not: plausible 0 */
        *ok = 0;
        return 0;
    }
}

EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    API_BEGIN("cuDeviceGetAttribute", 0);
    if (!pi) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS) API_RETURN(rc);
    int ok;
    int v = device_attribute((int)attrib, dev, &ok);
    if (!ok) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *pi = v;
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    API_BEGIN("cuDeviceTotalMem_v2", 0);
    if (!bytes) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_dev(dev);
    if (rc == CUDA_SUCCESS) *bytes = (size_t)150754820096ull; /* what an H200 reports */
    API_RETURN(rc);
}

/* ------------------------------------------------------------------------------------------ */
/* Contexts                                                                                   */

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    API_BEGIN("cuDevicePrimaryCtxRetain", 0);
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS) API_RETURN(rc);
    LOCK();
    if (!g_primary[dev]) g_primary[dev] = ctx_new(dev, 1, 0);
    struct ctx *c = g_primary[dev];
    if (c) c->refcount++;
    UNLOCK();
    if (!c) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    *pctx = (CUcontext)c;
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    API_BEGIN("cuDevicePrimaryCtxRelease_v2", 0);
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS) API_RETURN(rc);
    LOCK();
    struct ctx *c = g_primary[dev];
    if (!c || c->refcount <= 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        c->refcount--; /* the primary context stays alive (the simulator never resets it) */
    UNLOCK();
    API_RETURN(rc);
}

EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    API_BEGIN("cuCtxCreate_v2", 0);
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS) API_RETURN(rc);
    LOCK();
    struct ctx *c = ctx_new(dev, 0, flags);
    UNLOCK();
    if (!c) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    t_ctx = c;
    *pctx = (CUcontext)c;
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
    API_BEGIN("cuCtxDestroy_v2", 0);
    if (!ctx) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    CUresult rc = CUDA_SUCCESS;
    LOCK();
    if (!reg_has(ctx, H_CTX))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else {
        struct ctx *c = (struct ctx *)ctx;
        if (c->primary)
            rc = CUDA_ERROR_INVALID_CONTEXT;
        else {
            c->alive = 0; /* its streams and events now fail with CUDA_ERROR_INVALID_CONTEXT */
            reg_del(c);
        }
    }
    UNLOCK();
    if (rc == CUDA_SUCCESS && t_ctx == (struct ctx *)ctx) t_ctx = NULL;
    API_RETURN(rc);
}

EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    API_BEGIN("cuCtxSetCurrent", 0);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (!ctx) {
        t_ctx = NULL;
        API_RETURN(CUDA_SUCCESS);
    }
    LOCK();
    int ok = reg_has(ctx, H_CTX);
    UNLOCK();
    if (!ok) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    t_ctx = (struct ctx *)ctx;
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
    API_BEGIN("cuCtxGetCurrent", 0);
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    *pctx = (CUcontext)cur_ctx();
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    API_BEGIN("cuCtxGetDevice", 0);
    if (!device) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    struct ctx *c = cur_ctx();
    if (!c) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    *device = c->device;
    API_RETURN(CUDA_SUCCESS);
}

/* ctx: a context handle, or anything else for the current one. */
static CUresult ctx_sync(CUcontext ctx) {
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct ctx *c = NULL;
    if (ctx && reg_has(ctx, H_CTX))
        c = (struct ctx *)ctx;
    else
        c = cur_ctx();
    if (!c || !c->alive) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    uint64_t target = c->destroyed_free_at;
    for (struct stream *s = c->streams; s; s = s->next)
        if (s->free_at > target) target = s->free_at;
    UNLOCK();
    sleep_until(target);
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuCtxSynchronize(void) {
    API_BEGIN("cuCtxSynchronize", 0);
    API_RETURN(ctx_sync(NULL));
}

EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
    API_BEGIN("cuCtxSynchronize_v2", 0);
    API_RETURN(ctx_sync(ctx));
}

/* ------------------------------------------------------------------------------------------ */
/* Modules and functions                                                                      */

static CUresult module_new(CUmodule *module) {
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct ctx *c = cur_ctx();
    if (!c) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct mod *m = calloc(1, sizeof *m);
    if (!m || reg_add(m, H_MOD) < 0) {
        free(m);
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->ctx = c;
    UNLOCK();
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname) {
    API_BEGIN("cuModuleLoad", 0);
    if (!module || !fname) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (access(fname, R_OK) != 0) API_RETURN(CUDA_ERROR_FILE_NOT_FOUND);
    API_RETURN(module_new(module));
}

EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
    API_BEGIN("cuModuleLoadData", 0);
    if (!module || !image) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    API_RETURN(module_new(module));
}

EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
    API_BEGIN("cuModuleUnload", 0);
    if (!hmod) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    if (!reg_has(hmod, H_MOD)) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    struct mod *m = (struct mod *)hmod;
    for (struct func *f = m->funcs, *nx; f; f = nx) {
        nx = f->next;
        reg_del(f);
        free(f); /* f->name is kept: records may point at it */
    }
    reg_del(m);
    free(m);
    UNLOCK();
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    API_BEGIN("cuModuleGetFunction", 0);
    if (!hfunc || !hmod || !name) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    if (!reg_has(hmod, H_MOD)) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    struct mod *m = (struct mod *)hmod;
    struct func *f;
    for (f = m->funcs; f; f = f->next)
        if (strcmp(f->name, name) == 0) break;
    if (!f) {
        f = calloc(1, sizeof *f);
        char *nm = f ? strndup(name, 4096) : NULL;
        if (!nm || reg_add(f, H_FUNC) < 0) {
            free(nm);
            free(f);
            UNLOCK();
            API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        }
        f->name = nm;
        f->mod = m;
        f->duration = cfg.kernel_ns;
        f->next = m->funcs;
        m->funcs = f;
    }
    UNLOCK();
    *hfunc = (CUfunction)f;
    API_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                     */

EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    API_BEGIN("cuMemAlloc_v2", 0);
    if (!dptr || bytesize == 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    if (!cur_ctx()) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    void *p = NULL;
    if (posix_memalign(&p, 256, bytesize) != 0 || !p || alloc_insert((uintptr_t)p, bytesize) < 0) {
        free(p);
        UNLOCK();
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    UNLOCK();
    *dptr = (CUdeviceptr)(uintptr_t)p;
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
    API_BEGIN("cuMemFree_v2", 0);
    if (!dptr) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    ssize_t i = alloc_index((uintptr_t)dptr);
    if (i < 0 || g_allocs[i].base != (uintptr_t)dptr) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    memmove(&g_allocs[i], &g_allocs[i + 1], (g_nallocs - (size_t)i - 1) * sizeof *g_allocs);
    g_nallocs--;
    UNLOCK();
    free((void *)(uintptr_t)dptr);
    API_RETURN(CUDA_SUCCESS);
}

enum copy_dir { HTOD, DTOH, DTOD, MEMSET };

/* A copy or memset as a GPU operation. host: the host side (DTOD: the source device pointer);
 * esz: a memset's element size (n counts elements); h/ptsz: the stream argument and its variant;
 * blocking: the caller waits for the operation's end. The bytes move at call time.
 * All host memory of the stand-in is pageable (it has no pinned allocator): as on the real
 * driver, a device-to-host copy into pageable memory returns only once the copy, and everything
 * queued before it on its stream, is done, async or not; a host-to-device one returns once the
 * source is staged (at once here); device-side copies and sets never wait. */
static CUresult copy_op(struct call *C, enum copy_dir dir, void *host, CUdeviceptr dev, size_t n, unsigned value,
                        size_t esz, CUstream h, int ptsz, int blocking) {
    if (!dev || (dir != MEMSET && !host)) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    size_t bytes = dir == MEMSET ? n * esz : n;
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(h, ptsz, &s);
    if (rc == CUDA_SUCCESS && !alloc_range_ok(dev, bytes)) rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && dir == DTOD && !alloc_range_ok((CUdeviceptr)(uintptr_t)host, bytes))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && s->capturing) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc != CUDA_SUCCESS || bytes == 0) {
        UNLOCK();
        return rc;
    }
    void *dp = (void *)(uintptr_t)dev;
    if (dir == HTOD)
        memcpy(dp, host, n);
    else if (dir == DTOH)
        memcpy(host, dp, n);
    else if (dir == DTOD)
        memmove(dp, host, n);
    else if (esz == 1)
        memset(dp, (int)(value & 0xff), n);
    else
        for (size_t i = 0; i < n; i++) memcpy((char *)dp + i * esz, &value, esz); /* little endian */
    uint64_t now = now_ns(), start, end;
    schedule(s, now, copy_duration(bytes), &start, &end);
    struct pend *p = call_op(C, dir == MEMSET ? P_MEMSET : P_MEMCPY);
    if (p) {
        op_fill_stream(p, s);
        p->r.submit = now;
        p->r.start = start;
        p->r.end = end;
        p->r.bytes = bytes;
        p->r.copy_kind = dir == HTOD ? "HtoD" : dir == DTOH ? "DtoH" : dir == DTOD ? "DtoD" : NULL;
        p->r.value = value;
    }
    UNLOCK();
    call_flush_ops(C);
    if (blocking || dir == DTOH) sleep_until(end);
    return CUDA_SUCCESS;
}

/* cuMemcpy(Async): unified addressing, the direction from which side is a device allocation. */
static CUresult copy_any(struct call *C, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, int ptsz) {
    LOCK();
    int dd = alloc_index((uintptr_t)dst) >= 0, sd = alloc_index((uintptr_t)src) >= 0;
    UNLOCK();
    if (dd && sd) return copy_op(C, DTOD, (void *)(uintptr_t)src, dst, n, 0, 1, h, ptsz, 0);
    if (dd) return copy_op(C, HTOD, (void *)(uintptr_t)src, dst, n, 0, 1, h, ptsz, 0);
    if (sd) return copy_op(C, DTOH, (void *)(uintptr_t)dst, src, n, 0, 1, h, ptsz, 0);
    return CUDA_ERROR_INVALID_VALUE; /* host to host: not a GPU operation */
}

EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    API_BEGIN("cuMemcpyHtoD_v2", 0);
    API_RETURN(copy_op(&C, HTOD, (void *)srcHost, dstDevice, ByteCount, 0, 1, 0, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                             CUstream hStream) {
    API_BEGIN("cuMemcpyHtoDAsync_v2", hStream);
    API_RETURN(copy_op(&C, HTOD, (void *)srcHost, dstDevice, ByteCount, 0, 1, hStream, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                                  CUstream hStream) {
    API_BEGIN("cuMemcpyHtoDAsync_v2_ptsz", hStream);
    API_RETURN(copy_op(&C, HTOD, (void *)srcHost, dstDevice, ByteCount, 0, 1, hStream, 1, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    API_BEGIN("cuMemcpyDtoH", 0);
    API_RETURN(copy_op(&C, DTOH, dstHost, srcDevice, ByteCount, 0, 1, 0, 0, 1));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    API_BEGIN("cuMemcpyDtoH_v2", 0);
    API_RETURN(copy_op(&C, DTOH, dstHost, srcDevice, ByteCount, 0, 1, 0, 0, 1));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    API_BEGIN("cuMemcpyDtoH_v2_ptds", 0);
    API_RETURN(copy_op(&C, DTOH, dstHost, srcDevice, ByteCount, 0, 1, 0, 1, 1));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    API_BEGIN("cuMemcpyDtoHAsync", hStream);
    API_RETURN(copy_op(&C, DTOH, dstHost, srcDevice, ByteCount, 0, 1, hStream, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                             CUstream hStream) {
    API_BEGIN("cuMemcpyDtoHAsync_v2", hStream);
    API_RETURN(copy_op(&C, DTOH, dstHost, srcDevice, ByteCount, 0, 1, hStream, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                                  CUstream hStream) {
    API_BEGIN("cuMemcpyDtoHAsync_v2_ptsz", hStream);
    API_RETURN(copy_op(&C, DTOH, dstHost, srcDevice, ByteCount, 0, 1, hStream, 1, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
    API_BEGIN("cuMemcpyDtoD_v2", 0);
    API_RETURN(copy_op(&C, DTOD, (void *)(uintptr_t)srcDevice, dstDevice, ByteCount, 0, 1, 0, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                             CUstream hStream) {
    API_BEGIN("cuMemcpyDtoDAsync_v2", hStream);
    API_RETURN(copy_op(&C, DTOD, (void *)(uintptr_t)srcDevice, dstDevice, ByteCount, 0, 1, hStream, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                                  CUstream hStream) {
    API_BEGIN("cuMemcpyDtoDAsync_v2_ptsz", hStream);
    API_RETURN(copy_op(&C, DTOD, (void *)(uintptr_t)srcDevice, dstDevice, ByteCount, 0, 1, hStream, 1, 0));
}

EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
    API_BEGIN("cuMemcpy", 0);
    API_RETURN(copy_any(&C, dst, src, ByteCount, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
    API_BEGIN("cuMemcpyAsync", hStream);
    API_RETURN(copy_any(&C, dst, src, ByteCount, hStream, 0));
}

EXPORT CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
    API_BEGIN("cuMemcpyAsync_ptsz", hStream);
    API_RETURN(copy_any(&C, dst, src, ByteCount, hStream, 1));
}

EXPORT CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
    API_BEGIN("cuMemsetD8_v2", 0);
    API_RETURN(copy_op(&C, MEMSET, NULL, dstDevice, N, uc, 1, 0, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    API_BEGIN("cuMemsetD8Async", hStream);
    API_RETURN(copy_op(&C, MEMSET, NULL, dstDevice, N, uc, 1, hStream, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    API_BEGIN("cuMemsetD8Async_ptsz", hStream);
    API_RETURN(copy_op(&C, MEMSET, NULL, dstDevice, N, uc, 1, hStream, 1, 0));
}

EXPORT CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
    API_BEGIN("cuMemsetD32Async", hStream);
    API_RETURN(copy_op(&C, MEMSET, NULL, dstDevice, N, ui, 4, hStream, 0, 0));
}

EXPORT CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
    API_BEGIN("cuMemsetD32Async_ptsz", hStream);
    API_RETURN(copy_op(&C, MEMSET, NULL, dstDevice, N, ui, 4, hStream, 1, 0));
}

/* ------------------------------------------------------------------------------------------ */
/* Streams                                                                                    */

static CUresult stream_create(CUstream *ph, unsigned flags, int prio) {
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct ctx *c = cur_ctx();
    if (!c) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct stream *s = stream_new(c, S_CREATED, flags, prio);
    if (!s || reg_add(s, H_STREAM) < 0) {
        if (s) {
            c->streams = s->next;
            free(s);
        }
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    API_BEGIN("cuStreamCreate", 0);
    API_RETURN(stream_create(phStream, Flags, 0));
}

EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    API_BEGIN("cuStreamCreateWithPriority", 0);
    if (priority > 0) priority = 0;
    if (priority < -5) priority = -5;
    API_RETURN(stream_create(phStream, flags, priority));
}

EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
    API_BEGIN("cuStreamDestroy_v2", hStream);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    if (!reg_has(hStream, H_STREAM)) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    struct stream *s = (struct stream *)hStream;
    struct ctx *c = s->ctx;
    for (struct stream **pp = &c->streams; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    if (s->free_at > c->destroyed_free_at) c->destroyed_free_at = s->free_at;
    if (s->cap_graph) {
        free(s->cap_graph->nodes);
        free(s->cap_graph);
    }
    reg_del(s);
    free(s);
    UNLOCK();
    API_RETURN(CUDA_SUCCESS);
}

static CUresult stream_sync(CUstream h, int ptsz) {
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(h, ptsz, &s);
    if (rc == CUDA_SUCCESS && s->capturing) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    uint64_t target = rc == CUDA_SUCCESS ? stream_ready(s) : 0;
    UNLOCK();
    if (rc == CUDA_SUCCESS) sleep_until(target);
    return rc;
}

EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
    API_BEGIN("cuStreamSynchronize", hStream);
    API_RETURN(stream_sync(hStream, 0));
}

EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
    API_BEGIN("cuStreamSynchronize_ptsz", hStream);
    API_RETURN(stream_sync(hStream, 1));
}

EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
    API_BEGIN("cuStreamQuery", hStream);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(hStream, 0, &s);
    if (rc == CUDA_SUCCESS && s->capturing) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc == CUDA_SUCCESS && now_ns() < stream_ready(s)) rc = CUDA_ERROR_NOT_READY;
    UNLOCK();
    API_RETURN(rc);
}

EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    API_BEGIN("cuStreamWaitEvent", hStream);
    (void)Flags;
    if (!hEvent) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(hStream, 0, &s);
    if (rc == CUDA_SUCCESS && !reg_has(hEvent, H_EVENT)) rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS && !s->capturing) {
        struct event *e = (struct event *)hEvent;
        if (e->recorded && e->time > s->free_at) s->free_at = e->time;
    }
    UNLOCK();
    API_RETURN(rc);
}

/* ------------------------------------------------------------------------------------------ */
/* Events                                                                                     */

EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    API_BEGIN("cuEventCreate", 0);
    if (!phEvent || (Flags & ~7u)) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    struct ctx *c = cur_ctx();
    if (!c) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    struct event *e = calloc(1, sizeof *e);
    if (!e || reg_add(e, H_EVENT) < 0) {
        free(e);
        UNLOCK();
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    e->ctx = c;
    e->flags = Flags;
    UNLOCK();
    *phEvent = (CUevent)e;
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
    API_BEGIN("cuEventDestroy_v2", 0);
    if (!hEvent) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    if (!reg_has(hEvent, H_EVENT)) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    reg_del(hEvent);
    free(hEvent);
    UNLOCK();
    API_RETURN(CUDA_SUCCESS);
}

/* The event completes when the stream's earlier work is done, and no earlier than one launch
 * latency after the record call. */
static CUresult event_record(CUevent hEvent, CUstream h, int ptsz) {
    if (!hEvent) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(h, ptsz, &s);
    if (rc == CUDA_SUCCESS && !reg_has(hEvent, H_EVENT)) rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS && !s->capturing) {
        struct event *e = (struct event *)hEvent;
        uint64_t t = now_ns() + cfg.lat;
        uint64_t r = stream_ready(s);
        e->time = r > t ? r : t;
        e->recorded = 1;
    }
    UNLOCK();
    return rc;
}

EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    API_BEGIN("cuEventRecord", hStream);
    API_RETURN(event_record(hEvent, hStream, 0));
}

EXPORT CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
    API_BEGIN("cuEventRecord_ptsz", hStream);
    API_RETURN(event_record(hEvent, hStream, 1));
}

EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
    API_BEGIN("cuEventRecordWithFlags", hStream);
    if (flags & ~1u) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    API_RETURN(event_record(hEvent, hStream, 0));
}

/* Looks up an event; *time is 0 when never recorded. */
static CUresult event_time(CUevent hEvent, uint64_t *time, unsigned *flags) {
    if (!hEvent) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    if (!reg_has(hEvent, H_EVENT)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    struct event *e = (struct event *)hEvent;
    *time = e->recorded ? e->time : 0;
    if (flags) *flags = e->flags;
    UNLOCK();
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    API_BEGIN("cuEventSynchronize", 0);
    uint64_t t;
    CUresult rc = event_time(hEvent, &t, NULL);
    if (rc == CUDA_SUCCESS) sleep_until(t);
    API_RETURN(rc);
}

EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
    API_BEGIN("cuEventQuery", 0);
    uint64_t t;
    CUresult rc = event_time(hEvent, &t, NULL);
    if (rc == CUDA_SUCCESS && now_ns() < t) rc = CUDA_ERROR_NOT_READY;
    API_RETURN(rc);
}

EXPORT CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    API_BEGIN("cuEventElapsedTime", 0);
    if (!pMilliseconds) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    uint64_t t0, t1;
    unsigned f0, f1;
    CUresult rc = event_time(hStart, &t0, &f0);
    if (rc == CUDA_SUCCESS) rc = event_time(hEnd, &t1, &f1);
    if (rc != CUDA_SUCCESS) API_RETURN(rc);
    if ((f0 | f1) & CU_EVENT_DISABLE_TIMING) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (t0 == 0 || t1 == 0) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    uint64_t now = now_ns();
    if (now < t0 || now < t1) API_RETURN(CUDA_ERROR_NOT_READY);
    *pMilliseconds = (float)(((double)(int64_t)(t1 - t0)) / 1e6);
    API_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------------------------ */
/* Launches, capture, graphs                                                                  */

static CUresult launch(struct call *C, CUfunction hf, const unsigned grid[3], const unsigned block[3], unsigned shmem,
                       CUstream h, int ptsz) {
    if (!hf) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2]) return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    if (!reg_has(hf, H_FUNC)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    struct func *f = (struct func *)hf;
    struct stream *s;
    CUresult rc = resolve_stream(h, ptsz, &s);
    if (rc != CUDA_SUCCESS) {
        UNLOCK();
        return rc;
    }
    if (s->capturing) {
        struct graph *g = s->cap_graph;
        if (g->n == g->cap) {
            size_t nc = g->cap ? g->cap * 2 : 16;
            struct node *nn = realloc(g->nodes, nc * sizeof *nn);
            if (!nn) {
                UNLOCK();
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            g->nodes = nn;
            g->cap = nc;
        }
        struct node *nd = &g->nodes[g->n++];
        memset(nd, 0, sizeof *nd);
        nd->node_id = (uint32_t)g->n;
        nd->name = f->name;
        nd->duration = f->duration;
        memcpy(nd->grid, grid, sizeof nd->grid);
        memcpy(nd->block, block, sizeof nd->block);
        nd->shmem = shmem;
        memcpy(nd->capture_tag, t_tag, TAG_LEN);
        struct pend *p = call_op(C, P_NODE);
        if (p) {
            op_fill_stream(p, s);
            p->r.name = f->name;
            p->r.graph_id = g->id;
            p->r.node_id = nd->node_id;
            memcpy(p->r.grid, grid, sizeof p->r.grid);
            memcpy(p->r.block, block, sizeof p->r.block);
            p->r.shared_mem = shmem;
            p->duration = f->duration;
        }
    } else {
        uint64_t now = now_ns(), start, end;
        schedule(s, now, f->duration, &start, &end);
        struct pend *p = call_op(C, P_KERNEL);
        if (p) {
            op_fill_stream(p, s);
            p->r.name = f->name;
            p->r.submit = now;
            p->r.start = start;
            p->r.end = end;
            memcpy(p->r.grid, grid, sizeof p->r.grid);
            memcpy(p->r.block, block, sizeof p->r.block);
            p->r.shared_mem = shmem;
        }
    }
    UNLOCK();
    call_flush_ops(C);
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra) {
    API_BEGIN("cuLaunchKernel", hStream);
    (void)kernelParams;
    (void)extra;
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
    API_RETURN(launch(&C, f, grid, block, sharedMemBytes, hStream, 0));
}

EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                            unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                            void **kernelParams, void **extra) {
    API_BEGIN("cuLaunchKernel_ptsz", hStream);
    (void)kernelParams;
    (void)extra;
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
    API_RETURN(launch(&C, f, grid, block, sharedMemBytes, hStream, 1));
}

static CUresult launch_ex(struct call *C, const CUlaunchConfig *config, CUfunction f, int ptsz) {
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    if (config->numAttrs && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch(C, f, grid, block, config->sharedMemBytes, config->hStream, ptsz);
}

EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                         void **extra) {
    API_BEGIN("cuLaunchKernelEx", config ? config->hStream : NULL);
    (void)kernelParams;
    (void)extra;
    API_RETURN(launch_ex(&C, config, f, 0));
}

EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                              void **extra) {
    API_BEGIN("cuLaunchKernelEx_ptsz", config ? config->hStream : NULL);
    (void)kernelParams;
    (void)extra;
    API_RETURN(launch_ex(&C, config, f, 1));
}

static CUresult begin_capture(CUstream h, int mode, int ptsz) {
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(h, ptsz, &s);
    if (rc == CUDA_SUCCESS && s->kind == S_LEGACY) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc == CUDA_SUCCESS && s->capturing) rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc == CUDA_SUCCESS) {
        struct graph *g = calloc(1, sizeof *g);
        if (!g)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else {
            g->id = ++g_next_graph_id;
            s->cap_graph = g;
            s->capturing = 1;
            s->cap_mode = mode;
            s->cap_tid = my_tid();
        }
    }
    UNLOCK();
    return rc;
}

EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
    API_BEGIN("cuStreamBeginCapture", hStream);
    API_RETURN(begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 0));
}

EXPORT CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream) {
    API_BEGIN("cuStreamBeginCapture_ptsz", hStream);
    API_RETURN(begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 1));
}

EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
    API_BEGIN("cuStreamBeginCapture_v2", hStream);
    API_RETURN(begin_capture(hStream, (int)mode, 0));
}

EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
    API_BEGIN("cuStreamBeginCapture_v2_ptsz", hStream);
    API_RETURN(begin_capture(hStream, (int)mode, 1));
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, int ptsz) {
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(h, ptsz, &s);
    if (rc == CUDA_SUCCESS && !s->capturing) rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc == CUDA_SUCCESS && s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED && s->cap_tid != my_tid())
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (rc == CUDA_SUCCESS && reg_add(s->cap_graph, H_GRAPH) < 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        *phGraph = (CUgraph)s->cap_graph;
        s->cap_graph = NULL;
        s->capturing = 0;
    }
    UNLOCK();
    return rc;
}

EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    API_BEGIN("cuStreamEndCapture", hStream);
    API_RETURN(end_capture(hStream, phGraph, 0));
}

EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    API_BEGIN("cuStreamEndCapture_ptsz", hStream);
    API_RETURN(end_capture(hStream, phGraph, 1));
}

EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    API_BEGIN("cuStreamIsCapturing", hStream);
    if (!captureStatus) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    struct stream *s;
    CUresult rc = resolve_stream(hStream, 0, &s);
    if (rc == CUDA_SUCCESS) *captureStatus = s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    UNLOCK();
    API_RETURN(rc);
}

static CUresult instantiate(CUgraphExec *phExec, CUgraph hGraph) {
    if (!phExec || !hGraph) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    if (!reg_has(hGraph, H_GRAPH)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    struct graph *g = (struct graph *)hGraph;
    struct gexec *x = calloc(1, sizeof *x);
    struct node *nodes = g->n ? malloc(g->n * sizeof *nodes) : NULL;
    if (!x || (g->n && !nodes) || reg_add(x, H_GEXEC) < 0) {
        free(x);
        free(nodes);
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (g->n) memcpy(nodes, g->nodes, g->n * sizeof *nodes);
    x->id = ++g_next_exec_id;
    x->graph_id = g->id;
    x->nodes = nodes;
    x->n = g->n;
    UNLOCK();
    *phExec = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                           char *logBuffer, size_t bufferSize) {
    API_BEGIN("cuGraphInstantiate", 0);
    if (phErrorNode) *phErrorNode = NULL;
    if (logBuffer && bufferSize) logBuffer[0] = 0;
    API_RETURN(instantiate(phGraphExec, hGraph));
}

EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                              char *logBuffer, size_t bufferSize) {
    API_BEGIN("cuGraphInstantiate_v2", 0);
    if (phErrorNode) *phErrorNode = NULL;
    if (logBuffer && bufferSize) logBuffer[0] = 0;
    API_RETURN(instantiate(phGraphExec, hGraph));
}

EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags) {
    API_BEGIN("cuGraphInstantiateWithFlags", 0);
    (void)flags;
    API_RETURN(instantiate(phGraphExec, hGraph));
}

static CUresult graph_launch(struct call *C, CUgraphExec hExec, CUstream h, int ptsz) {
    if (!hExec) return CUDA_ERROR_INVALID_VALUE;
    if (!INITED()) return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    if (!reg_has(hExec, H_GEXEC)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    struct gexec *x = (struct gexec *)hExec;
    struct stream *s;
    CUresult rc = resolve_stream(h, ptsz, &s);
    if (rc == CUDA_SUCCESS && s->capturing) rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc != CUDA_SUCCESS) {
        UNLOCK();
        return rc;
    }
    uint64_t now = now_ns();
    uint64_t t = now + cfg.lat;
    uint64_t r = stream_ready(s);
    if (r && r + cfg.qgap > t) t = r + cfg.qgap;
    for (size_t i = 0; i < x->n; i++) {
        struct node *nd = &x->nodes[i];
        if (i > 0) t += cfg.gap;
        uint64_t start = t, end = t + nd->duration;
        t = end;
        s->free_at = end;
        struct pend *p = call_op(C, P_KERNEL);
        if (!p) continue;
        op_fill_stream(p, s);
        p->r.name = nd->name;
        p->r.submit = now;
        p->r.start = start;
        p->r.end = end;
        p->r.graph_id = x->graph_id;
        p->r.graph_exec_id = x->id;
        p->r.node_id = nd->node_id;
        memcpy(p->r.grid, nd->grid, sizeof p->r.grid);
        memcpy(p->r.block, nd->block, sizeof p->r.block);
        p->r.shared_mem = nd->shmem;
        memcpy(p->capture_tag, nd->capture_tag, TAG_LEN);
    }
    UNLOCK();
    /* capture_tag points into the pending array, which no longer moves */
    for (size_t i = 0; i < C->n; i++) C->ops[i].r.capture_tag = C->ops[i].capture_tag;
    call_flush_ops(C);
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    API_BEGIN("cuGraphLaunch", hStream);
    API_RETURN(graph_launch(&C, hGraphExec, hStream, 0));
}

EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    API_BEGIN("cuGraphLaunch_ptsz", hStream);
    API_RETURN(graph_launch(&C, hGraphExec, hStream, 1));
}

EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    API_BEGIN("cuGraphExecDestroy", 0);
    if (!hGraphExec) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    if (!reg_has(hGraphExec, H_GEXEC)) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    struct gexec *x = (struct gexec *)hGraphExec;
    reg_del(x);
    free(x->nodes);
    free(x);
    UNLOCK();
    API_RETURN(CUDA_SUCCESS);
}

EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    API_BEGIN("cuGraphDestroy", 0);
    if (!hGraph) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!INITED()) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    LOCK();
    if (!reg_has(hGraph, H_GRAPH)) {
        UNLOCK();
        API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    struct graph *g = (struct graph *)hGraph;
    reg_del(g);
    free(g->nodes);
    free(g);
    UNLOCK();
    API_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------------------------ */
/* Extension API (simgpu.h)                                                                   */

EXPORT int simgpu_register_observer(const simgpu_observer *obs) {
    FRAME();
    if (!obs) return -1;
    cfg_ensure();
    LOCK();
    int n = atomic_load(&g_nobs);
    if (n >= MAX_OBSERVERS) {
        UNLOCK();
        return -1;
    }
    g_obs[n] = *obs;
    atomic_store(&g_nobs, n + 1);
    UNLOCK();
    return 0;
}

EXPORT uint64_t simgpu_runtime_enter(const char *api, CUstream stream) {
    FRAME();
    cfg_ensure();
    if (t_rt.corr || !api) return 0; /* runtime calls do not nest */
    t_rt.enter = now_ns();
    t_rt.corr = atomic_fetch_add(&g_corr, 1) + 1;
    t_rt.api = api;
    t_rt.stream = (uint64_t)(uintptr_t)stream;
    t_last_corr = t_rt.corr;
    int nobs = atomic_load(&g_nobs);
    if (nobs > 0) {
        simgpu_api_rec r = {.corr = t_rt.corr,
                            .api = api,
                            .pid = g_pid,
                            .tid = my_tid(),
                            .enter = t_rt.enter,
                            .stream = t_rt.stream,
                            .tag = t_tag};
        for (int i = 0; i < nobs; i++)
            if (g_obs[i].runtime_enter) g_obs[i].runtime_enter(&r);
    }
    return t_rt.corr;
}

EXPORT void simgpu_runtime_exit(uint64_t corr, int result) {
    FRAME();
    if (!corr || corr != t_rt.corr) return;
    uint64_t exit_ns = now_ns();
    if (truth_fd >= 0) {
        sbuf s;
        s.n = 0;
        s.b[0] = 0;
        sb_fmt(&s, "{\"kind\":\"rtapi\",\"corr\":%llu,\"api\":", (unsigned long long)corr);
        sb_str(&s, t_rt.api);
        sb_fmt(&s, ",\"pid\":%u,\"tid\":%u,\"enter\":%llu,\"exit\":%llu,\"stream\":%llu,\"result\":%d,\"tag\":", g_pid,
               my_tid(), (unsigned long long)t_rt.enter, (unsigned long long)exit_ns, (unsigned long long)t_rt.stream,
               result);
        sb_str(&s, t_tag);
        sb_emit(&s);
    }
    simgpu_api_rec r = {.corr = corr,
                        .api = t_rt.api,
                        .pid = g_pid,
                        .tid = my_tid(),
                        .enter = t_rt.enter,
                        .exit = exit_ns,
                        .stream = t_rt.stream,
                        .result = result,
                        .tag = t_tag};
    t_rt.corr = 0;
    int nobs = atomic_load(&g_nobs);
    for (int i = 0; i < nobs; i++)
        if (g_obs[i].runtime_exit) g_obs[i].runtime_exit(&r);
}

EXPORT void simgpu_set_tag(const char *tag) {
    FRAME();
    if (!tag) {
        t_tag[0] = 0;
        return;
    }
    size_t n = strnlen(tag, TAG_LEN - 1);
    memcpy(t_tag, tag, n);
    t_tag[n] = 0;
}

EXPORT const char *simgpu_get_tag(void) {
    FRAME();
    return t_tag;
}

EXPORT CUresult simgpu_set_function_duration(CUfunction f, uint64_t ns) {
    FRAME();
    CUresult rc = CUDA_SUCCESS;
    LOCK();
    if (reg_has(f, H_FUNC))
        ((struct func *)f)->duration = ns;
    else
        rc = CUDA_ERROR_INVALID_HANDLE;
    UNLOCK();
    return rc;
}

EXPORT uint64_t simgpu_get_function_duration(CUfunction f) {
    FRAME();
    uint64_t d = 0;
    LOCK();
    if (reg_has(f, H_FUNC)) d = ((struct func *)f)->duration;
    UNLOCK();
    return d;
}

EXPORT uint64_t simgpu_last_correlation_id(void) {
    FRAME();
    return t_last_corr;
}

EXPORT uint64_t simgpu_stream_free_at(CUstream h) {
    FRAME();
    uint64_t t = 0;
    cfg_ensure();
    LOCK();
    struct stream *s;
    if (resolve_stream(h, 0, &s) == CUDA_SUCCESS) t = stream_ready(s);
    UNLOCK();
    return t;
}

EXPORT void simgpu_get_config(simgpu_config *out) {
    FRAME();
    if (!out) return;
    cfg_ensure();
    out->devices = cfg.devices;
    out->kernel_ns = cfg.kernel_ns;
    out->launch_latency_ns = cfg.lat;
    out->graph_node_gap_ns = cfg.gap;
    out->queue_gap_ns = cfg.qgap;
    out->copy_bytes_per_us = cfg.copy_bpus;
    out->legacy_barrier = cfg.legacy_barrier;
}

EXPORT void simgpu_truth_line(const char *json) {
    FRAME();
    if (!json) return;
    cfg_ensure();
    if (truth_fd < 0) return;
    size_t n = strlen(json);
    char *line = malloc(n + 2);
    if (!line) return;
    for (size_t i = 0; i < n; i++) line[i] = (json[i] == '\n' || json[i] == '\r') ? ' ' : json[i];
    line[n] = '\n';
    truth_append(line, n + 1);
    free(line);
}

EXPORT void simgpu_flush_truth(void) {
    FRAME();
    cfg_ensure();
    truth_atexit();
}
