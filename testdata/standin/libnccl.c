/*
 * libnccl.c — specprof's stand-in for NVIDIA's libnccl.so.2 (API of NCCL 2.28, version 22803).
 *
 * Communicators are local objects (no rendezvous, no data movement between ranks). Each
 * collective launches one kernel, named like NCCL's, through the stand-in libcuda's exported
 * cuLaunchKernelEx (resolved with dlopen/dlsym, as the real NCCL calls the driver), on the calling
 * thread, so a uprobe on cuLaunchKernelEx sees it right after the collective's entry. The kernel
 * lasts SPECPROF_SIM_NCCL_BASE_NS (default 8000) + bytes * 1000 / SPECPROF_SIM_NCCL_BYTES_PER_US
 * (default 100000) ns. Inside ncclGroupStart/End the launches wait for the outermost ncclGroupEnd;
 * the Send/Recv operations of one group on one communicator and stream share one
 * ncclDevKernel_SendRecv launch, like NCCL's fused p2p kernel. Each operation appends a
 * {"kind":"coll"} line to the simulator's truth file (simgpu_truth_line).
 */
#define _GNU_SOURCE
#define SIMGPU_CUDA_NO_API_MACROS
#include "cuda.h"
#include "nccl.h"
#include "simgpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default"), noinline))
/* Forces a frame (push %rbp; mov %rsp,%rbp) even in leaf functions gcc would leave frameless. */
#define FRAME() __asm__ volatile("" : : "r"(__builtin_frame_address(0)))

/* ------------------------------------------------------------------------------------------ */
/* The driver, resolved at run time                                                           */

static struct {
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*set_duration)(CUfunction, uint64_t);
    void (*truth_line)(const char *);
    const char *(*get_tag)(void);
    uint64_t (*last_corr)(void);
    uint64_t (*stream_free_at)(CUstream);
    void (*get_config)(simgpu_config *);
    uint64_t lat;
    int ok;
    uint64_t base_ns;
    uint64_t bytes_per_us;
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t env_u64(const char *name, uint64_t def, uint64_t min) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || !end || *end) return def;
    return x < min ? min : (uint64_t)x;
}

static void cu_load(void) {
    cu.base_ns = env_u64("SPECPROF_SIM_NCCL_BASE_NS", 8000, 0);
    cu.bytes_per_us = env_u64("SPECPROF_SIM_NCCL_BYTES_PER_US", 100000, 1);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "specprof stand-in libnccl: cannot load libcuda.so.1: %s\n", dlerror());
        return;
    }
    *(void **)&cu.cuModuleLoadData = dlsym(h, "cuModuleLoadData");
    *(void **)&cu.cuModuleGetFunction = dlsym(h, "cuModuleGetFunction");
    *(void **)&cu.cuLaunchKernelEx = dlsym(h, "cuLaunchKernelEx");
    *(void **)&cu.cuCtxGetDevice = dlsym(h, "cuCtxGetDevice");
    *(void **)&cu.set_duration = dlsym(h, "simgpu_set_function_duration");
    *(void **)&cu.truth_line = dlsym(h, "simgpu_truth_line");
    *(void **)&cu.get_tag = dlsym(h, "simgpu_get_tag");
    *(void **)&cu.last_corr = dlsym(h, "simgpu_last_correlation_id");
    *(void **)&cu.stream_free_at = dlsym(h, "simgpu_stream_free_at");
    *(void **)&cu.get_config = dlsym(h, "simgpu_get_config");
    if (cu.get_config) {
        simgpu_config sc;
        memset(&sc, 0, sizeof sc);
        cu.get_config(&sc);
        cu.lat = sc.launch_latency_ns;
    }
    cu.ok = cu.cuModuleLoadData && cu.cuModuleGetFunction && cu.cuLaunchKernelEx && cu.cuCtxGetDevice &&
            cu.set_duration && cu.truth_line && cu.get_tag && cu.last_corr;
    if (!cu.ok) fprintf(stderr, "specprof stand-in libnccl: libcuda.so.1 is not the specprof stand-in\n");
}

static int cu_ready(void) {
    pthread_once(&cu_once, cu_load);
    return cu.ok;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------ */
/* Communicators                                                                              */

#define COMM_MAGIC 0x6e63636cu

struct rdv;

struct ncclComm {
    uint32_t magic;
    int nranks;
    int rank;
    int device;
    struct rdv *rdv; /* ranks > 1: the shared rendezvous (see rendezvous) */
    uint64_t seq;    /* collectives launched on this communicator */
};

/* ------------------------------------------------------------------------------------------ */
/* Ranks of one communicator in several processes: like NCCL, a collective's kernel runs until
 * every rank's kernel has started, so the first ranks' kernels last longer by the wait for the
 * last one (the straggler). The ranks meet in a shared-memory segment named after the unique
 * id; each publishes when its kernel would start, waits for the others, and stretches its
 * kernel by the difference. The host waits here (real NCCL's host does not): the simulated GPU
 * has no cross-process clock of its own. Ranks that do not share the id never meet: after one
 * timeout the communicator stops trying (said once on stderr).                               */

#define RDV_SLOTS 64
#define RDV_RANKS 16

struct rdv {
    _Atomic uint64_t pub[RDV_SLOTS][RDV_RANKS];   /* seq + 1 once the rank published */
    _Atomic uint64_t ready[RDV_SLOTS][RDV_RANKS]; /* when its kernel would start */
};

/* Segment names to remove at exit (the mappings of ranks still running stay valid). */
static char rdv_names[8][64];
static int rdv_nnames;

static void rdv_cleanup(void) {
    for (int i = 0; i < rdv_nnames; i++) shm_unlink(rdv_names[i]);
}

static struct rdv *rdv_open(const ncclUniqueId *id) {
    uint64_t k[2];
    memcpy(k, id->internal, sizeof k);
    char name[64];
    snprintf(name, sizeof name, "/specprof-sim-nccl-%016llx%016llx", (unsigned long long)k[0], (unsigned long long)k[1]);
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0) return NULL;
    if (ftruncate(fd, sizeof(struct rdv)) != 0) {
        close(fd);
        return NULL;
    }
    void *m = mmap(NULL, sizeof(struct rdv), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    pthread_mutex_lock(&mu);
    if (rdv_nnames < 8) {
        if (rdv_nnames == 0) atexit(rdv_cleanup);
        snprintf(rdv_names[rdv_nnames++], sizeof rdv_names[0], "%s", name);
    }
    pthread_mutex_unlock(&mu);
    return m == MAP_FAILED ? NULL : m;
}

/* How much longer this rank's collective kernel on stream runs: the last rank's start minus
 * this one's (0 for the last rank, or without peers). */
static uint64_t rendezvous(struct ncclComm *comm, CUstream stream) {
    pthread_mutex_lock(&mu);
    struct rdv *r = comm->rdv;
    uint64_t seq = comm->seq++;
    int rank = comm->rank, n = comm->nranks;
    pthread_mutex_unlock(&mu);
    if (!r || !cu.stream_free_at) return 0;
    uint64_t mine = now_ns() + cu.lat;
    uint64_t f = cu.stream_free_at(stream);
    if (f > mine) mine = f;
    unsigned slot = (unsigned)(seq % RDV_SLOTS);
    atomic_store(&r->ready[slot][rank], mine);
    atomic_store(&r->pub[slot][rank], seq + 1);
    uint64_t last = mine, deadline = now_ns() + 2000000000ull;
    for (int q = 0; q < n; q++) {
        while (atomic_load(&r->pub[slot][q]) != seq + 1) {
            if (now_ns() > deadline) {
                fprintf(stderr, "specprof stand-in libnccl: rank %d: the other ranks never reached collective %llu "
                                "(do they share the unique id?); ranks no longer wait for each other\n",
                        rank, (unsigned long long)seq);
                pthread_mutex_lock(&mu);
                comm->rdv = NULL;
                pthread_mutex_unlock(&mu);
                return 0;
            }
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        uint64_t t = atomic_load(&r->ready[slot][q]);
        if (t > last) last = t;
    }
    return last - mine;
}

static struct ncclComm **comms;
static size_t ncomms, comms_cap;

static int comm_add(struct ncclComm *c) {
    if (ncomms == comms_cap) {
        size_t nc = comms_cap ? comms_cap * 2 : 16;
        struct ncclComm **n = realloc(comms, nc * sizeof *n);
        if (!n) return -1;
        comms = n;
        comms_cap = nc;
    }
    comms[ncomms++] = c;
    return 0;
}

/* Copies the communicator's fields when comm is live (under mu). */
static int comm_get(const struct ncclComm *comm, struct ncclComm *out) {
    int ok = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ncomms; i++) {
        if (comms[i] == comm) {
            *out = *comm;
            ok = 1;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

static int comm_remove(struct ncclComm *comm) {
    int ok = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ncomms; i++) {
        if (comms[i] == comm) {
            comms[i] = comms[--ncomms];
            ok = 1;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (ok) {
        comm->magic = 0;
        free(comm);
    }
    return ok;
}

static int current_device(void) {
    CUdevice d = 0;
    if (cu_ready() && cu.cuCtxGetDevice(&d) == CUDA_SUCCESS) return d;
    return 0;
}

static ncclResult_t comm_new(ncclComm_t *out, int nranks, int rank, int device, const ncclUniqueId *id) {
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->magic = COMM_MAGIC;
    c->nranks = nranks;
    c->rank = rank;
    c->device = device;
    if (id && nranks > 1 && nranks <= RDV_RANKS) c->rdv = rdv_open(id);
    pthread_mutex_lock(&mu);
    int rc = comm_add(c);
    pthread_mutex_unlock(&mu);
    if (rc < 0) {
        free(c);
        return ncclSystemError;
    }
    *out = c;
    return ncclSuccess;
}

/* ------------------------------------------------------------------------------------------ */
/* Kernels                                                                                    */

static const char *const dtype_names[] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16"};
static const size_t dtype_sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char *const op_names[] = {"Sum", "Prod", "Max", "Min", "Avg"};

/* One function per (name, duration): one module per duration, so every handle keeps its own. */
struct fentry {
    char *name;
    uint64_t duration;
    CUfunction f;
    struct fentry *next;
};
struct mentry {
    uint64_t duration;
    CUmodule m;
    struct mentry *next;
};
#define FBUCKETS 256
static struct fentry *fcache[FBUCKETS];
static struct mentry *mcache;

static size_t fhash(const char *s, uint64_t d) {
    uint64_t h = 1469598103934665603ull ^ d;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h % FBUCKETS);
}

static CUresult get_function(const char *name, uint64_t duration, CUfunction *out) {
    pthread_mutex_lock(&mu);
    size_t b = fhash(name, duration);
    for (struct fentry *e = fcache[b]; e; e = e->next) {
        if (e->duration == duration && strcmp(e->name, name) == 0) {
            *out = e->f;
            pthread_mutex_unlock(&mu);
            return CUDA_SUCCESS;
        }
    }
    struct mentry *m;
    for (m = mcache; m; m = m->next)
        if (m->duration == duration) break;
    CUresult rc = CUDA_SUCCESS;
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m) rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc == CUDA_SUCCESS) rc = cu.cuModuleLoadData(&m->m, "specprof stand-in NCCL device code");
        if (rc != CUDA_SUCCESS) {
            free(m);
            pthread_mutex_unlock(&mu);
            return rc;
        }
        m->duration = duration;
        m->next = mcache;
        mcache = m;
    }
    CUfunction f = NULL;
    rc = cu.cuModuleGetFunction(&f, m->m, name);
    if (rc == CUDA_SUCCESS) rc = cu.set_duration(f, duration);
    if (rc == CUDA_SUCCESS) {
        struct fentry *e = calloc(1, sizeof *e);
        char *nm = e ? strdup(name) : NULL;
        if (nm) {
            e->name = nm;
            e->duration = duration;
            e->f = f;
            e->next = fcache[b];
            fcache[b] = e;
        } else {
            free(e);
        }
        *out = f;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Operations                                                                                 */

enum opkind { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST, OP_REDUCE, OP_SEND, OP_RECV };
static const char *const opkind_names[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                                           "Reduce",    "Send",      "Recv"};

struct op {
    enum opkind kind;
    size_t count;
    int dtype;
    int redop; /* -1 when none */
    int peer, root;
    struct ncclComm *comm;
    int nranks, rank;
    cudaStream_t stream;
    uint64_t bytes;
    uint64_t enter;
    int grouped;
    uint32_t tid;
    char tag[64];
    uint64_t kernel_corr;
    uint64_t kernel_duration;
    char kernel[96];
};

static __thread int t_group_depth;
static __thread struct op *t_ops;
static __thread size_t t_nops, t_ops_cap;
static __thread uint32_t t_tid;

static uint32_t my_tid(void) {
    if (!t_tid) t_tid = (uint32_t)syscall(SYS_gettid);
    return t_tid;
}

static void json_str(char *dst, size_t cap, const char *s) {
    size_t n = 0;
    if (cap < 3) return;
    dst[n++] = '"';
    for (; s && *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            dst[n++] = '\\';
            dst[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(dst + n, cap - n, "\\u%04x", c);
        } else {
            dst[n++] = (char)c;
        }
    }
    dst[n++] = '"';
    dst[n] = 0;
}

static void truth_coll(const struct op *o) {
    char tag[160], line[1024];
    json_str(tag, sizeof tag, o->tag);
    snprintf(line, sizeof line,
             "{\"kind\":\"coll\",\"op\":\"%s\",\"redop\":\"%s\",\"count\":%zu,\"dtype\":\"%s\",\"bytes\":%llu,"
             "\"comm\":%llu,\"nranks\":%d,\"rank\":%d,\"stream\":%llu,\"peer\":%d,\"root\":%d,\"kernel\":\"%s\","
             "\"kernel_corr\":%llu,\"kernel_duration\":%llu,\"enter\":%llu,\"grouped\":%s,\"pid\":%u,\"tid\":%u,"
             "\"tag\":%s}",
             opkind_names[o->kind], o->redop >= 0 ? op_names[o->redop] : "", o->count, dtype_names[o->dtype],
             (unsigned long long)o->bytes, (unsigned long long)(uintptr_t)o->comm, o->nranks, o->rank,
             (unsigned long long)(uintptr_t)o->stream, o->peer, o->root, o->kernel,
             (unsigned long long)o->kernel_corr, (unsigned long long)o->kernel_duration,
             (unsigned long long)o->enter, o->grouped ? "true" : "false", (unsigned)getpid(), o->tid, tag);
    cu.truth_line(line);
}

/* The kernel's name as CUPTI reports NCCL's: mangled C++ (NCCL 2.28's kernels take one
 * ncclDevKernelArgsStorage<4096> parameter), e.g.
 * _Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE. */
static void kernel_name(const struct op *o, char *buf, size_t cap) {
    char id[96];
    switch (o->kind) {
    case OP_ALLREDUCE:
    case OP_REDUCESCATTER:
    case OP_REDUCE:
        snprintf(id, sizeof id, "ncclDevKernel_%s_%s_%s_RING_LL", opkind_names[o->kind], op_names[o->redop],
                 dtype_names[o->dtype]);
        break;
    case OP_ALLGATHER:
    case OP_BROADCAST:
        snprintf(id, sizeof id, "ncclDevKernel_%s_RING_LL", opkind_names[o->kind]);
        break;
    default:
        snprintf(id, sizeof id, "ncclDevKernel_SendRecv");
        break;
    }
    snprintf(buf, cap, "_Z%zu%s24ncclDevKernelArgsStorageILm4096EE", strlen(id), id);
}

/* Launches one kernel for ops[0..n) (one collective, or a fused group of p2p operations) and
 * writes their truth lines. */
static ncclResult_t launch_ops(struct op *ops, size_t n) {
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += ops[i].bytes;
    char name[96];
    kernel_name(&ops[0], name, sizeof name);
    uint64_t duration = cu.base_ns + bytes * 1000ull / cu.bytes_per_us;
    /* Rounded to 1 us: one function per (name, duration), so waits make few distinct ones. */
    duration += (rendezvous((struct ncclComm *)ops[0].comm, (CUstream)ops[0].stream) + 500) / 1000 * 1000;
    CUfunction f;
    CUresult rc = get_function(name, duration, &f);
    if (rc != CUDA_SUCCESS) return ncclUnhandledCudaError;
    cu.set_duration(f, duration);
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = (unsigned)(ops[0].nranks > 1 ? 2 * ops[0].nranks : 2); /* channels */
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 640;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = 0;
    cfg.hStream = (CUstream)ops[0].stream;
    void *args[] = {NULL};
    rc = cu.cuLaunchKernelEx(&cfg, f, args, NULL);
    if (rc != CUDA_SUCCESS) return ncclUnhandledCudaError;
    uint64_t corr = cu.last_corr();
    for (size_t i = 0; i < n; i++) {
        ops[i].kernel_corr = corr;
        ops[i].kernel_duration = duration;
        snprintf(ops[i].kernel, sizeof ops[i].kernel, "%s", name);
        truth_coll(&ops[i]);
    }
    return ncclSuccess;
}

static ncclResult_t enqueue(enum opkind kind, const void *buf, size_t count, ncclDataType_t dtype, int redop, int peer,
                            int root, ncclComm_t comm, cudaStream_t stream, uint64_t enter) {
    if (!cu_ready()) return ncclSystemError;
    struct ncclComm c;
    if (!comm || !comm_get(comm, &c)) return ncclInvalidArgument;
    if ((int)dtype < 0 || (int)dtype >= ncclNumTypes) return ncclInvalidArgument;
    if (redop != -1 && (redop < 0 || redop >= ncclNumOps)) return ncclInvalidArgument;
    if (count > 0 && !buf) return ncclInvalidArgument;
    if ((kind == OP_SEND || kind == OP_RECV) && (peer < 0 || peer >= c.nranks)) return ncclInvalidArgument;
    if ((kind == OP_BROADCAST || kind == OP_REDUCE) && (root < 0 || root >= c.nranks)) return ncclInvalidArgument;
    struct op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.count = count;
    o.dtype = (int)dtype;
    o.redop = redop;
    o.peer = peer;
    o.root = root;
    o.comm = comm;
    o.nranks = c.nranks;
    o.rank = c.rank;
    o.stream = stream;
    o.enter = enter;
    o.tid = my_tid();
    snprintf(o.tag, sizeof o.tag, "%s", cu.get_tag());
    uint64_t bytes = (uint64_t)count * dtype_sizes[dtype];
    if (kind == OP_ALLGATHER || kind == OP_REDUCESCATTER) bytes *= (uint64_t)c.nranks;
    o.bytes = bytes;
    if (t_group_depth > 0) {
        if (t_nops == t_ops_cap) {
            size_t nc = t_ops_cap ? t_ops_cap * 2 : 16;
            struct op *no = realloc(t_ops, nc * sizeof *no);
            if (!no) return ncclSystemError;
            t_ops = no;
            t_ops_cap = nc;
        }
        o.grouped = 1;
        t_ops[t_nops++] = o;
        return ncclSuccess;
    }
    return launch_ops(&o, 1);
}

static ncclResult_t group_flush(void) {
    ncclResult_t res = ncclSuccess;
    size_t n = t_nops;
    char *done = calloc(n ? n : 1, 1);
    if (!done) {
        t_nops = 0;
        return ncclSystemError;
    }
    for (size_t i = 0; i < n; i++) {
        if (done[i]) continue;
        struct op *o = &t_ops[i];
        ncclResult_t r;
        if (o->kind == OP_SEND || o->kind == OP_RECV) {
            /* gather this group's p2p operations on the same communicator and stream */
            struct op *batch = malloc((n - i) * sizeof *batch);
            size_t nb = 0;
            if (!batch) {
                res = ncclSystemError;
                break;
            }
            for (size_t j = i; j < n; j++) {
                struct op *p = &t_ops[j];
                if (!done[j] && (p->kind == OP_SEND || p->kind == OP_RECV) && p->comm == o->comm &&
                    p->stream == o->stream) {
                    batch[nb++] = *p;
                    done[j] = 1;
                }
            }
            r = launch_ops(batch, nb);
            free(batch);
        } else {
            done[i] = 1;
            r = launch_ops(o, 1);
        }
        if (r != ncclSuccess && res == ncclSuccess) res = r;
    }
    free(done);
    t_nops = 0;
    return res;
}

/* ------------------------------------------------------------------------------------------ */
/* Exported API                                                                               */

EXPORT ncclResult_t ncclGetVersion(int *version) {
    FRAME();
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    FRAME();
    if (!uniqueId) return ncclInvalidArgument;
    memset(uniqueId, 0, sizeof *uniqueId);
    uint64_t v[2] = {now_ns(), ((uint64_t)getpid() << 32) | my_tid()};
    memcpy(uniqueId->internal, v, sizeof v);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    FRAME();
    (void)commId;
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    return comm_new(comm, nranks, rank, current_device(), &commId);
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
    FRAME();
    if (!comm || ndev < 1) return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        ncclResult_t r = comm_new(&comm[i], ndev, i, devlist ? devlist[i] : i, NULL);
        if (r != ncclSuccess) {
            for (int j = 0; j < i; j++) comm_remove(comm[j]);
            return r;
        }
    }
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    FRAME();
    if (!comm) return ncclSuccess; /* like NCCL */
    return comm_remove(comm) ? ncclSuccess : ncclInvalidArgument;
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
    FRAME();
    if (!comm) return ncclSuccess;
    return comm_remove(comm) ? ncclSuccess : ncclInvalidArgument;
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    FRAME();
    struct ncclComm c;
    if (!count || !comm || !comm_get(comm, &c)) return ncclInvalidArgument;
    *count = c.nranks;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    FRAME();
    struct ncclComm c;
    if (!rank || !comm || !comm_get(comm, &c)) return ncclInvalidArgument;
    *rank = c.rank;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    FRAME();
    struct ncclComm c;
    if (!device || !comm || !comm_get(comm, &c)) return ncclInvalidArgument;
    *device = c.device;
    return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t result) {
    FRAME();
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    FRAME();
    uint64_t enter = now_ns();
    if (count && !recvbuff) return ncclInvalidArgument;
    return enqueue(OP_ALLREDUCE, sendbuff, count, datatype, (int)op, -1, -1, comm, stream, enter);
}

EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
    FRAME();
    uint64_t enter = now_ns();
    if (sendcount && !recvbuff) return ncclInvalidArgument;
    return enqueue(OP_ALLGATHER, sendbuff, sendcount, datatype, -1, -1, -1, comm, stream, enter);
}

EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    FRAME();
    uint64_t enter = now_ns();
    if (recvcount && !recvbuff) return ncclInvalidArgument;
    return enqueue(OP_REDUCESCATTER, sendbuff, recvcount, datatype, (int)op, -1, -1, comm, stream, enter);
}

EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
    FRAME();
    uint64_t enter = now_ns();
    if (count && !recvbuff) return ncclInvalidArgument;
    /* sendbuff matters on the root only */
    return enqueue(OP_BROADCAST, sendbuff ? sendbuff : recvbuff, count, datatype, -1, -1, root, comm, stream, enter);
}

EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    FRAME();
    uint64_t enter = now_ns();
    /* recvbuff matters on the root only */
    return enqueue(OP_REDUCE, sendbuff, count, datatype, (int)op, -1, root, comm, stream, enter);
}

EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
    FRAME();
    uint64_t enter = now_ns();
    return enqueue(OP_SEND, sendbuff, count, datatype, -1, peer, -1, comm, stream, enter);
}

EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
    FRAME();
    uint64_t enter = now_ns();
    return enqueue(OP_RECV, recvbuff, count, datatype, -1, peer, -1, comm, stream, enter);
}

EXPORT ncclResult_t ncclGroupStart(void) {
    FRAME();
    t_group_depth++;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void) {
    FRAME();
    if (t_group_depth <= 0) return ncclInvalidUsage;
    if (--t_group_depth > 0) return ncclSuccess;
    if (t_nops == 0) return ncclSuccess;
    if (!cu_ready()) {
        t_nops = 0;
        return ncclSystemError;
    }
    return group_flush();
}
