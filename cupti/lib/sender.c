/*
 * The sender: the library's own thread (specprof-cupti), the only one that touches the socket and
 * converts records. It connects to the agent without blocking (retrying every cfg.retry_ns while
 * nobody listens), sends HELLO, asks CUPTI for completed buffers every cfg.flush_ns, drains the
 * callbacks' API ring and the graph-node table, steps the duty windows, and sends STATS every
 * second. Sends never block (MSG_DONTWAIT | MSG_NOSIGNAL): when the agent stops reading the sender
 * waits CONGESTION_WAIT_MS once, then drops and counts (droppedBackpressure) until a send makes
 * progress. A dead agent closes the connection and collection goes off (windows.c). At exit it
 * gets at most EXIT_BUDGET_NS to deliver what CUPTI flushed and the final STATS.
 */
#define _GNU_SOURCE
#include "state.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Wakes the sender if it sleeps in poll (any thread; a non-blocking eventfd: never waits). */
void wake_sender(void) {
    if (spc.efd >= 0 && atomic_load(&spc.sender_waiting)) {
        uint64_t one = 1;
        ssize_t w = write(spc.efd, &one, sizeof one); /* non-blocking eventfd: never waits */
        (void)w;
    }
}

/* Wakes the sender whether or not it sleeps now: it is about to wait for what the caller did (a
 * GPU switch applied, a detach seen through, exit). */
void kick_sender(void) {
    if (spc.efd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(spc.efd, &one, sizeof one);
        (void)w;
    }
}

/* Sender: whether half the ring or more is filled. */
static int api_ring_half(void) {
    return spc.api_ring && atomic_load_explicit(&spc.api_tail, memory_order_relaxed) - spc.api_head >= cfg.api_ring / 2;
}

/* Sender: the next record of the ring, 0 if none. */
static int api_ring_pop(struct spw_api *w) {
    if (!spc.api_ring) return 0;
    struct api_slot *sl = &spc.api_ring[spc.api_head & (cfg.api_ring - 1)];
    if (atomic_load_explicit(&sl->seq, memory_order_acquire) != spc.api_head + 1) return 0;
    *w = sl->rec;
    atomic_store_explicit(&sl->seq, spc.api_head + cfg.api_ring, memory_order_release);
    spc.api_head++;
    return 1;
}

static int is_data_record(uint16_t type) { return type != SPW_HELLO && type != SPW_STATS; }

/* Counts the records between from and to (record boundaries) whose bytes are all in [from,to). */
static uint64_t count_records(size_t *from, size_t to) {
    uint64_t n = 0;
    while (*from + sizeof(struct spw_header) <= to) {
        struct spw_header h;
        memcpy(&h, spc.out.b + *from, sizeof h);
        if (*from + h.len > to) break;
        if (is_data_record(h.type)) n++;
        *from += h.len;
    }
    return n;
}

static void disconnect(const char *why);

/* Writes what it can without blocking. Returns -1 when the connection broke. */
static int out_send(void) {
    while (spc.out.fd >= 0 && spc.out.head < spc.out.tail) {
        ssize_t n = send(spc.out.fd, spc.out.b + spc.out.head, spc.out.tail - spc.out.head, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            spc.out.head += (size_t)n;
            spc.out.congested = 0;
            atomic_fetch_add(&spc.st.bytes_sent, (unsigned long long)n);
            atomic_fetch_add(&spc.st.delivered, count_records(&spc.out.cursor, spc.out.head));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        disconnect(n == 0 ? "connection closed" : strerror(errno));
        return -1;
    }
    if (spc.out.head == spc.out.tail) spc.out.head = spc.out.tail = spc.out.cursor = 0;
    return 0;
}

/* Room for n more bytes at spc.out.tail, or NULL (counted by the caller as backpressure). Waits at most
 * CONGESTION_WAIT_MS once per congestion episode: a briefly slow agent loses nothing, a stuck one
 * costs the sender (never the application) one short wait. */
static uint8_t *out_reserve(size_t n) {
    if (spc.out.fd < 0) return NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (cfg.out_cap - spc.out.tail >= n) return spc.out.b + spc.out.tail;
        if (spc.out.cursor > 0) { /* compact, keeping the partly sent record for the delivery count */
            memmove(spc.out.b, spc.out.b + spc.out.cursor, spc.out.tail - spc.out.cursor);
            spc.out.tail -= spc.out.cursor;
            spc.out.head -= spc.out.cursor;
            spc.out.cursor = 0;
            if (cfg.out_cap - spc.out.tail >= n) return spc.out.b + spc.out.tail;
        }
        if (out_send() < 0) return NULL;
        if (cfg.out_cap - spc.out.tail >= n || spc.out.head > 0) continue;
        if (spc.out.congested) return NULL;
        struct pollfd p = {.fd = spc.out.fd, .events = POLLOUT};
        if (poll(&p, 1, CONGESTION_WAIT_MS) <= 0) {
            spc.out.congested = 1;
            return NULL;
        }
        if (out_send() < 0) return NULL;
    }
    return NULL;
}

/* Appends one record (header + payload + extra bytes, zero-padded to 8). */
int out_record(uint16_t type, uint16_t flags, const void *payload, size_t plen, const void *extra,
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
    spc.out.tail += len;
    return 0;
}

/* Converts the completed buffers, at most max of them (-1: all). */
static int drain_buffers_n(int max) {
    int n = 0;
    /* Reading records calls CUPTI: not while it detaches or is detached (queued until attached). */
    if (!cupti_usable()) return 0;
    for (; max < 0 || n < max;) {
        struct done_buf d;
        pthread_mutex_lock(&spc.bufs.mu);
        if (spc.bufs.dn == 0) {
            pthread_mutex_unlock(&spc.bufs.mu);
            return n;
        }
        d = spc.bufs.done[spc.bufs.dhead];
        spc.bufs.dhead = (spc.bufs.dhead + 1) % MAX_BUFS_LIMIT;
        spc.bufs.dn--;
        pthread_mutex_unlock(&spc.bufs.mu);
        process_buffer(d.buf, d.valid);
        n++;
    }
    return n;
}

int drain_buffers(void) { return drain_buffers_n(-1); }

static int buffers_done(void) {
    pthread_mutex_lock(&spc.bufs.mu);
    int n = spc.bufs.dn;
    pthread_mutex_unlock(&spc.bufs.mu);
    return n;
}

/* The callbacks' API records (cfg.api_cb) up to position upto (UINT64_MAX: all) to the agent, or
 * counted as lost without one. The sender drains them at CUPTI's flush cadence (and when half the
 * ring is full), as CUPTI delivers its own: the agent then gets them in batches, mostly after their
 * launches' eBPF events (it copes with either order). */
static void drain_api_ring_to(uint64_t upto) {
    struct spw_api w;
    while (spc.api_head < upto && api_ring_pop(&w)) {
        if (spc.out.fd < 0 || spc.out.hello_pending)
            atomic_fetch_add(&spc.st.dropped_no_agent, 1);
        else if (out_record(SPW_API, 0, &w, sizeof w, NULL, 0) < 0)
            atomic_fetch_add(&spc.st.dropped_backpressure, 1);
    }
}

static void drain_api_ring(void) { drain_api_ring_to(UINT64_MAX); }

static void send_graph_nodes(void) {
    if (!spc.gn || spc.out.fd < 0 || spc.out.hello_pending) return;
    unsigned n = atomic_load(&spc.gn_n);
    if (n > cfg.graph_cap) n = cfg.graph_cap;
    while (spc.out.gn_cursor < n && atomic_load_explicit(&spc.gn[spc.out.gn_cursor].ready, memory_order_acquire)) {
        if (out_record(SPW_GRAPH_NODE, 0, &spc.gn[spc.out.gn_cursor].rec, sizeof(struct spw_graph_node), NULL, 0) < 0)
            return; /* retried on the next round */
        spc.out.gn_cursor++;
    }
}

/* Adds what CUPTI dropped since the last read to spc.st.dropped_cupti (sender thread, under cupti_mu).
 * buffer_completed reads the count too, but only when a buffer comes back: records dropped because
 * no buffer could be had (the pool exhausted, a failed allocation, CUPTI's own limits) are often the
 * last ones before the process ends, with no buffer completed after them, so every STATS reads the
 * global queue's count first (NULL context: CUPTI resets it on each read, so nothing counts twice). */
static void read_dropped(void) {
    size_t dropped = 0;
    if (!spc.cupti.ActivityGetNumDroppedRecords || !cupti_usable()) return;
    if (spc.cupti.ActivityGetNumDroppedRecords(NULL, 0, &dropped) == SPC_SUCCESS && dropped)
        atomic_fetch_add(&spc.st.dropped_cupti, dropped);
}

static void send_stats(uint16_t flags) {
    read_dropped();
    struct spw_stats w = {
        .recordsDelivered = atomic_load(&spc.st.delivered),
        .droppedCUPTI = atomic_load(&spc.st.dropped_cupti),
        .droppedNoAgent = atomic_load(&spc.st.dropped_no_agent),
        .droppedBackpressure = atomic_load(&spc.st.dropped_backpressure),
        .droppedDisconnect = atomic_load(&spc.st.dropped_disconnect),
        .droppedGraphNodes = atomic_load(&spc.st.dropped_graph),
        .buffersCompleted = atomic_load(&spc.st.buffers_completed),
        .buffersRefused = atomic_load(&spc.st.buffers_refused),
        .bytesSent = atomic_load(&spc.st.bytes_sent),
        .recordsUnknown = atomic_load(&spc.st.unknown),
        .connects = atomic_load(&spc.st.connects),
        .namesDropped = atomic_load(&spc.st.names_dropped),
        .detaches = atomic_load(&spc.detaches),
        .detachStallNs = atomic_load(&spc.detach_stall_ns),
        .detachRefused = atomic_load(&spc.detach_refused),
        .detachQuiet = atomic_load(&spc.detach_quiet),
        .gpuSwitches = atomic_load(&spc.gs_count),
        .gpuSwitchNs = atomic_load(&spc.gs_ns),
        .gpuSwitchMaxNs = atomic_load(&spc.gs_max_ns),
        .dutyStopped = atomic_load(&spc.duty_stopped),
    };
    (void)out_record(SPW_STATS, flags, &w, sizeof w, NULL, 0);
}

/* Connects without blocking (a unix socket connects or fails at once). 0 on success. */
int try_connect(int app_thread) {
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
    spc.out.fd = fd;
    spc.out.head = spc.out.tail = spc.out.cursor = 0;
    spc.out.congested = 0;
    spc.out.hello_pending = 1;
    spc.out.epoch++;
    spc.out.gn_cursor = 0;
    atomic_fetch_add(&spc.st.connects, 1);
    if (spc.clock == SPW_CLOCK_OFFSET) measure_offset();
    enable_collection(app_thread);
    return 0;
}

static void send_hello(void) {
    if (!spc.out.driver_version) {
        /* libcuda may be loaded RTLD_LOCAL (torch, cudart): fall back to its own handle. */
        int (*get)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
        void *cuda = get ? NULL : dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (cuda) get = (int (*)(int *))dlsym(cuda, "cuDriverGetVersion");
        if (!get || get(&spc.out.driver_version) != 0) spc.out.driver_version = -1;
        if (cuda) dlclose(cuda); /* NOLOAD handle: only drops the reference it took */
    }
    struct spw_hello h = {
        .wireVersion = SPW_WIRE_VERSION,
        .pid = (uint32_t)getpid(),
        .cuptiVersion = spc.cupti_version,
        .driverVersion = spc.out.driver_version > 0 ? spc.out.driver_version : 0,
        .clockSource = (uint32_t)spc.clock,
        /* Duty-cycled: the windowed kinds and WINDOW records too; the agent knows from the HELLO
         * that records exist only inside windows, before the first window's record comes. */
        .types = spc.enabled_types | spc.duty_types | (1u << SPW_HELLO) | (1u << SPW_STATS) | (1u << SPW_NAME) |
                 (1u << SPW_GRAPH_NODE) | (spc.duty_types ? 1u << SPW_WINDOW : 0),
        .clockOffset = spc.clock == SPW_CLOCK_OFFSET ? atomic_load(&spc.offset) : 0,
        .connectTime = mono_ns(),
    };
    memcpy(h.magic, SPW_MAGIC, sizeof h.magic);
    spc.out.hello_pending = 0;
    if (out_record(SPW_HELLO, 0, &h, sizeof h, NULL, 0) < 0) disconnect("cannot queue HELLO");
    DEBUG("connected to %s (connection %u)", cfg.socket_path, spc.out.epoch);
}

static void disconnect(const char *why) {
    if (spc.out.fd < 0) return;
    DEBUG("agent connection lost (%s); collection off until it comes back", why);
    close(spc.out.fd);
    spc.out.fd = -1;
    atomic_fetch_add(&spc.st.dropped_disconnect, count_records(&spc.out.cursor, spc.out.tail));
    spc.out.head = spc.out.tail = spc.out.cursor = 0;
    if (atomic_load(&spc.shutdown) || atomic_load(&spc.exit_req)) return; /* no CUPTI calls while exiting */
    disable_collection();
    if (!cupti_usable()) return;
    /* Take back every buffer CUPTI holds; its records are counted as dropped (no agent). */
    (void)spc.cupti.ActivityFlushAll(SPC_FLUSH_FORCED);
    drain_buffers();
    request_detach(); /* no agent: detach for good (cfg.detach) */
}

/* Reads the agent's commands. Returns 1 when it asked for a flush. */
static int read_commands(void) {
    int flush = 0;
    char b[64];
    for (;;) {
        ssize_t n = recv(spc.out.fd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++) {
                if (b[i] == SPW_CMD_FLUSH) flush = 1;
                if (b[i] == SPW_CMD_WINDOW && cfg.duty_gated) spc.window_req = 1;
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
    while (spc.out.fd >= 0 && spc.out.head < spc.out.tail) {
        uint64_t now = mono_ns();
        if (now >= deadline) break;
        struct pollfd p = {.fd = spc.out.fd, .events = POLLOUT};
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
    send_until(spc.exit_deadline - 10000000ull);
    if (spc.out.fd >= 0 && !spc.out.hello_pending) send_stats(SPW_FLAG_FINAL);
    send_until(spc.exit_deadline);
}

void *sender_main(void *arg) {
    (void)arg;
    uint64_t now = mono_ns(), next_retry = now + cfg.retry_ns, next_flush = now + cfg.flush_ns,
             next_stats = now + STATS_PERIOD_NS, next_duty = UINT64_MAX;
    int ack_pending = 0; /* the agent asked for a flush: answer after the next one */
    for (;;) {
        pthread_mutex_lock(&spc.cupti_mu);
        if (atomic_load(&spc.exit_req)) {
            if (atomic_load(&spc.active)) sender_exit_flush();
            pthread_mutex_unlock(&spc.cupti_mu);
            pthread_mutex_lock(&spc.exit_mu);
            spc.exit_done = 1;
            pthread_cond_broadcast(&spc.exit_cv);
            pthread_mutex_unlock(&spc.exit_mu);
            return NULL;
        }
        now = mono_ns();
        if (!atomic_load(&spc.active)) { /* switched off (layout mismatch): drain and idle */
            if (spc.out.fd >= 0) disconnect("collection disabled");
            drain_buffers();
            next_retry = UINT64_MAX;
        } else if (spc.out.fd < 0 && now >= next_retry) {
            if (try_connect(0) == 0) {
                next_flush = now + cfg.flush_ns;
                next_stats = now + STATS_PERIOD_NS;
            }
            next_retry = now + cfg.retry_ns;
        }
        if (spc.out.fd >= 0 && spc.out.hello_pending) send_hello();

        int flush_req = 0;
        if (spc.out.fd >= 0) {
            int flushed = now >= next_flush;
            if (flushed) {
                if (cupti_usable()) (void)spc.cupti.ActivityFlushAll(0); /* completed records only */
                next_flush = now + cfg.flush_ns;
            }
            /* Only the records made before the switches seen below: a record made after a window
             * opened must reach the agent after that window's WINDOW record, or the agent takes its
             * launch for one made outside the windows. */
            uint64_t api_upto = atomic_load(&spc.api_tail);
            int bufs = buffers_done();
            next_duty = duty_step(now);
            if (spc.gs_cb) (void)gpu_switch_done(); /* a switch posted outside the windows */
            if (flushed || api_ring_half()) drain_api_ring_to(api_upto);
            drain_buffers_n(bufs);
            send_graph_nodes();
            if (ack_pending && flushed) { /* everything CUPTI completed before the request is sent */
                send_stats(SPW_FLAG_FLUSH_ACK);
                ack_pending = 0;
            }
            if (now >= next_stats) {
                if (spc.clock == SPW_CLOCK_OFFSET) measure_offset();
                send_stats(0);
                next_stats = now + STATS_PERIOD_NS;
            }
            (void)out_send();
        } else {
            ack_pending = 0;
            poll_detach();
            if (spc.gs_cb) (void)gpu_switch_done(); /* the GPU kinds' switch off, after a disconnect */
            if (!atomic_load(&spc.collecting)) request_detach(); /* no agent: detach (cfg.detach) */
            drain_api_ring();
            drain_buffers();
        }

        /* Sleep until the next deadline, a completed buffer, a command or writability. */
        uint64_t until = spc.out.fd >= 0 ? (next_flush < next_stats ? next_flush : next_stats) : next_retry;
        if (spc.out.fd >= 0 && next_duty < until) until = next_duty;
        if (spc.detach_pending && now + 1000000ull < until) until = now + 1000000ull;
        now = mono_ns();
        int ms = until == UINT64_MAX ? 1000 : until > now ? (int)((until - now + 999999) / 1000000) : 0;
        if (ms > 1000) ms = 1000;
        struct pollfd p[2] = {{.fd = spc.efd, .events = POLLIN}, {.fd = spc.out.fd, .events = POLLIN}};
        if (spc.out.fd >= 0 && spc.out.head < spc.out.tail && !spc.out.congested) p[1].events |= POLLOUT;
        pthread_mutex_unlock(&spc.cupti_mu);
        atomic_store(&spc.sender_waiting, 1);
        int pr = 0;
        pthread_mutex_lock(&spc.bufs.mu);
        int pending = spc.bufs.dn;
        pthread_mutex_unlock(&spc.bufs.mu);
        if (!pending && !atomic_load(&spc.exit_req)) pr = poll(p, spc.out.fd >= 0 ? 2 : 1, ms);
        atomic_store(&spc.sender_waiting, 0);
        if (pr > 0 && (p[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(spc.efd, &v, sizeof v);
            (void)r;
        }
        if (pr > 0 && spc.out.fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            pthread_mutex_lock(&spc.cupti_mu); /* a disconnection switches collection off */
            flush_req = read_commands();
            pthread_mutex_unlock(&spc.cupti_mu);
        }
        if (pr > 0 && spc.out.fd >= 0 && (p[1].revents & POLLOUT)) spc.out.congested = 0;
        /* The agent asks for a flush at the end of a session and while it waits on a process that
         * went idle (agent/gpu.go flushQuiet): made at once by the next pass, in the order that keeps
         * records after the WINDOW records of the switches made before them. */
        if (flush_req && spc.out.fd >= 0) {
            ack_pending = 1;
            next_flush = 0;
        }
    }
}

/* The atexit handler (exit): one forced flush, then at most EXIT_BUDGET_NS for the sender. */
void sender_at_exit(void) {
    if (!atomic_load(&spc.active) || atomic_load(&spc.forked)) return;
    /* No detach from now on: cancel one not yet taken, wait (briefly) for one in progress. */
    pthread_mutex_lock(&spc.detach_mu);
    spc.no_detach = 1;
    int want = CS_DETACH_REQ;
    (void)atomic_compare_exchange_strong(&spc.cs, &want, CS_ATTACHED);
    pthread_mutex_unlock(&spc.detach_mu);
    struct timespec step = {0, 100000};
    for (int i = 0; i < 1000 && atomic_load(&spc.cs) == CS_FINALIZING; i++) nanosleep(&step, NULL);
    if (atomic_load(&spc.collecting) && atomic_load(&spc.cs) == CS_ATTACHED) {
        pthread_mutex_lock(&spc.cupti_mu); /* the sender holds it for a flush or a switch at most */
        (void)spc.cupti.ActivityFlushAll(SPC_FLUSH_FORCED);
        pthread_mutex_unlock(&spc.cupti_mu);
    }
    pthread_mutex_lock(&spc.exit_mu);
    spc.exit_deadline = mono_ns() + EXIT_BUDGET_NS;
    atomic_store(&spc.exit_req, 1);
    kick_sender();
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += (long)(EXIT_BUDGET_NS + 20000000ull); /* the sender's budget plus a margin */
    dl.tv_sec += dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    while (!spc.exit_done)
        if (pthread_cond_timedwait(&spc.exit_cv, &spc.exit_mu, &dl) == ETIMEDOUT) break;
    pthread_mutex_unlock(&spc.exit_mu);
    atomic_store(&spc.shutdown, 1);
}
