/*
 * Collection and its windows (sender thread, and init on the application thread that runs cuInit):
 * activity kinds and callbacks go on when an agent connects (enable_collection) and off when it
 * goes (disable_collection); with cfg.duty_on_ns the windowed kinds go on and off in windows
 * (duty_step). Within a switch the GPU kinds go on last and off first, so that another thread's
 * call in between never gets a GPU record without the API record that joins it.
 */
#define _GNU_SOURCE
#include "state.h"
#include "api_filter.h"

#include <time.h>

/* Switching the GPU activity kinds (kernels, copies, sets) on an application thread. On the H200,
 * switching them while GPU work was in flight crashed the process (heap corruption: SIGSEGV, SIGABRT),
 * from the sender (6 of 8 graph-loop runs with 2 ms windows every 10 ms; 0 of 4 with only the API
 * kinds switched) and from the exit of any driver call of the application thread alike (13 of 15 eager
 * and graph runs). So the sender never switches them: it posts the switch and turns on the callbacks
 * of the calls that wait for the GPU (spc.drain), and the next application thread that leaves one
 * applies it there: 0 of 6 runs crashed (5,800 switches in the eager loop, 1,500 in the graph loop).
 * Work of other streams or threads may still be in flight then: a smaller risk that remains. */

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
void filter_api_records(void) {
    if (cfg.all_api || cfg.api_cb || !((spc.enabled_types | spc.duty_types) & K_API)) return;
    if (!spc.cupti.ActivityEnableDriverApi || !spc.cupti.ActivityEnableRuntimeApi) {
        LOG_ONCE(L_FILTER, "this CUPTI cannot select API records per call (cuptiActivityEnableDriverApi needs "
                           "CUDA 12.5+); every driver and runtime call is recorded, at a higher cost");
        return;
    }
    for (uint32_t c = 1; c < SPC_MAX_CBID; c++) {
        (void)spc.cupti.ActivityEnableDriverApi(c, (uint8_t)kept(kept_driver_cbids,
                                                         sizeof kept_driver_cbids / sizeof kept_driver_cbids[0], c));
        (void)spc.cupti.ActivityEnableRuntimeApi(c, (uint8_t)kept(kept_runtime_cbids, sizeof kept_runtime_cbids /
                                                                                  sizeof kept_runtime_cbids[0], c));
    }
}

/* The launch and capture calls (the creating call of graph nodes); with duty-cycled tracing also
 * every call whose API record is kept (api_filter.h), to know which are in progress when a window
 * closes. */
void set_driver_callbacks(uint32_t on) {
    spc.cb_on = (int)on;
    if (!spc.sub) return;
    for (size_t i = 0; i < n_tracked_cbids; i++)
        (void)spc.cupti.EnableCallback(on, spc.sub, SPC_DOMAIN_DRIVER_API, tracked_cbids[i]);
    if ((spc.duty_types & K_API) || cfg.api_cb)
        for (size_t i = 0; i < sizeof kept_driver_cbids / sizeof kept_driver_cbids[0]; i++)
            if (!spc.tracked[kept_driver_cbids[i]])
                (void)spc.cupti.EnableCallback(on, spc.sub, SPC_DOMAIN_DRIVER_API, kept_driver_cbids[i]);
    if (cfg.api_cb) /* the runtime calls whose records join torch's kernels (see kind_map) */
        for (size_t i = 0; i < sizeof kept_runtime_cbids / sizeof kept_runtime_cbids[0]; i++)
            (void)spc.cupti.EnableCallback(on, spc.sub, SPC_DOMAIN_RUNTIME_API, kept_runtime_cbids[i]);
}

/* Switches the kinds `bits`. The GPU kinds go on last and off first: another thread's call made
 * between the two would otherwise get its kernel's record without the API record that joins it
 * (seen on the mock in CI, a few records when the switching thread was preempted in between). */
static void apply_kinds(uint32_t bits, int on) {
    int cb_api = cfg.api_cb && (bits & K_API); /* records from the callbacks, which collection keeps on */
    if (cb_api) bits &= ~K_API;
    if (cb_api && on) atomic_store(&spc.cb_api, 1);
    for (int pass = 0; pass < 2; pass++) {
        int gpu_pass = on ? pass == 1 : pass == 0;
        for (size_t i = 0; i < sizeof kind_map / sizeof kind_map[0]; i++) {
            int is_gpu = (kind_map[i].type_bit & K_GPU) != 0;
            if (!(bits & kind_map[i].type_bit) || is_gpu != gpu_pass) continue;
            spc_result r = on ? spc.cupti.ActivityEnable(kind_map[i].kind) : spc.cupti.ActivityDisable(kind_map[i].kind);
            if (r != SPC_SUCCESS && on)
                LOG_ONCE(L_ENABLE, "cuptiActivityEnable(%s): %s; that kind is not collected", kind_map[i].name,
                         result_str(r));
        }
    }
    if (cb_api && !on) atomic_store(&spc.cb_api, 0);
}

/* On an application thread, in its driver API exit callback (see spc.gs). */
void gpu_switch_here(int on) {
    uint64_t t0 = mono_ns();
    if (!on) atomic_store(&spc.gs_at, t0);
    apply_kinds(spc.gs_kinds, on);
    uint64_t t1 = mono_ns(), d = t1 - t0;
    if (on) atomic_store(&spc.gs_at, t1);
    atomic_store(&spc.gpu_on, on);
    atomic_fetch_add(&spc.gs_count, 1);
    atomic_fetch_add(&spc.gs_ns, d);
    unsigned long long m = atomic_load(&spc.gs_max_ns);
    while (d > m && !atomic_compare_exchange_weak(&spc.gs_max_ns, &m, d)) {
    }
    atomic_store(&spc.gs, GS_IDLE);
    kick_sender(); /* the sender waits for it */
}

/* The calls whose exit applies a posted switch (spc.drain), which an application that reads its
 * results makes every step. Only per-call callbacks, never cuptiEnableDomain: a whole domain's
 * callbacks cost every call. */
static void set_switch_callbacks(uint32_t on) {
    if (!spc.sub) return;
    for (uint32_t c = 1; c < SPC_MAX_CBID; c++) {
        if (!spc.drain[c]) continue;
        /* Leaving a switch: keep the callbacks that collection itself has on (set_driver_callbacks). */
        if (!on && spc.cb_on && (spc.tracked[c] || (spc.duty_types & K_API) || cfg.api_cb)) continue;
        (void)spc.cupti.EnableCallback(on, spc.sub, SPC_DOMAIN_DRIVER_API, c);
    }
}

/* Whether the GPU kinds are as last posted (sender); then the callbacks go back to what collection
 * needs. */
int gpu_switch_done(void) {
    if (atomic_load(&spc.gs) != GS_IDLE) return 0;
    if (spc.gs_cb) {
        spc.gs_cb = 0;
        set_switch_callbacks(0);
        /* A switch that turned the API kinds on too (a window opening, a late agent): now keep only the
         * work calls' records. */
        if (spc.collecting && (spc.gs_kinds & K_API) && atomic_load(&spc.gpu_on)) filter_api_records();
    }
    return 1;
}

/* Posts a switch of the GPU kinds `bits` (sender); cancels a pending switch the other way instead
 * when that leaves them as wanted. 1: done, 0: an application thread has yet to apply it. */
static int gpu_switch_post(int on, uint32_t bits) {
    struct timespec step = {0, 20000};
    for (int i = 0; i < 1000 && atomic_load(&spc.gs) == GS_APPLYING; i++) nanosleep(&step, NULL);
    int other = on ? GS_WANT_OFF : GS_WANT_ON;
    (void)atomic_compare_exchange_strong(&spc.gs, &other, GS_IDLE);
    if (atomic_load(&spc.gs) == GS_IDLE && atomic_load(&spc.gpu_on) == on) {
        atomic_store(&spc.gs_at, mono_ns());
        return gpu_switch_done();
    }
    if (atomic_load(&spc.gs) == GS_IDLE) {
        if (!bits) { /* nothing to switch */
            atomic_store(&spc.gpu_on, on);
            atomic_store(&spc.gs_at, mono_ns());
            return gpu_switch_done();
        }
        spc.gs_kinds = bits;
        atomic_store(&spc.gs, on ? GS_WANT_ON : GS_WANT_OFF);
    }
    /* Every time: collection may have turned these callbacks off since the switch was posted
     * (a disconnection while a window closes). */
    set_switch_callbacks(1);
    spc.gs_cb = 1;
    return gpu_switch_done();
}

/* app_thread: called on an application thread (cuInit's injection), which may switch the GPU kinds
 * itself. */
void enable_collection(int app_thread) {
    spc.enabled_types = 0;
    spc.duty_types = 0;
    spc.wstate = W_CLOSED;
    if (ensure_attached() < 0) return; /* detached for good: nothing is enabled or granted */
    atomic_store(&spc.collecting, 1);
    /* With a final detach every kind follows the windows: nothing records after the last flush. */
    spc.duty_types =
        cfg.duty_period_ns ? cfg.kinds & cfg.duty_mask & (cfg.detach ? K_WINDOWED | K_OVERHEAD : K_WINDOWED) : 0;
    atomic_store(&spc.count_inflight, (spc.duty_types & K_API) != 0);
    spc.next_toggle = 0; /* the first window opens at once */
    uint32_t gpu = 0, want = 0;
    for (size_t i = 0; i < sizeof kind_map / sizeof kind_map[0]; i++)
        if ((cfg.kinds & kind_map[i].type_bit) && !(spc.duty_types & kind_map[i].type_bit)) want |= kind_map[i].type_bit;
    gpu = want & K_GPU;
    if (gpu && !app_thread) {
        /* An agent that comes later: every kind goes on with the GPU kinds, on an application thread,
         * so that no launch gets an API record without its GPU records (its cycle would look
         * complete); the launches before have neither, and are counted. */
        spc.enabled_types = want;
        if (!(spc.duty_types & K_API)) set_driver_callbacks(1);
        (void)gpu_switch_post(1, want);
        return;
    }
    for (size_t i = 0; i < sizeof kind_map / sizeof kind_map[0]; i++) {
        if (!(want & kind_map[i].type_bit)) continue;
        if (kind_map[i].type_bit & K_GPU) { /* switched on below */
            spc.enabled_types |= kind_map[i].type_bit;
            continue;
        }
        if (cfg.api_cb && (kind_map[i].type_bit & K_API)) { /* made in the callbacks (apply_kinds) */
            spc.enabled_types |= K_API;
            atomic_store(&spc.cb_api, 1);
            continue;
        }
        spc_result r = spc.cupti.ActivityEnable(kind_map[i].kind);
        if (r == SPC_SUCCESS)
            spc.enabled_types |= kind_map[i].type_bit;
        else
            LOG_ONCE(L_ENABLE, "cuptiActivityEnable(%s): %s; that kind is not collected", kind_map[i].name,
                     result_str(r));
    }
    filter_api_records();
    /* Duty-cycled: the launch callbacks (the creating call of captured graph nodes) follow the
     * windows too, so graphs captured outside a window have nodes without their creating call. */
    if (!(spc.duty_types & K_API)) set_driver_callbacks(1);
    if (gpu) { /* cuInit's injection, on the application thread: nothing of it is in a launch */
        spc.gs_kinds = gpu;
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
        atomic_store(&spc.inflight, 0);
        atomic_fetch_add(&spc.inflight_gen, 1);
    } else if (spc.duty_types & K_API) {
        /* The GPU kinds are off: let the calls in progress return (and write their API records),
         * at most 20 ms, then 1 ms more for the runtime call around a driver call. */
        struct timespec step = {0, 20000}, grace = {0, 1000000};
        for (int i = 0; i < 1000 && atomic_load(&spc.inflight) > 0; i++) nanosleep(&step, NULL);
        nanosleep(&grace, NULL);
    }
    if (!app_switch) apply_kinds(spc.duty_types & ~K_GPU, (int)on);
    if (spc.duty_types & K_API) {
        if (on) filter_api_records(); /* again once the kinds are on (gpu_switch_done) */
        set_driver_callbacks(on);
    }
}

/* The GPU kinds go off when an application thread next leaves a driver call (see spc.gs). */
void disable_collection(void) {
    atomic_store(&spc.collecting, 0);
    if (!cupti_usable()) { /* detached or detaching: nothing is enabled */
        spc.wstate = W_CLOSED;
        spc.enabled_types = 0;
        return;
    }
    uint32_t gpu = (spc.enabled_types | spc.duty_types) & K_GPU;
    /* First, so that a window's opening switch (which carries its API kinds) is either cancelled or
     * applied before those kinds go off below. */
    (void)gpu_switch_post(0, gpu);
    if (spc.wstate != W_CLOSED) {
        window_api(0, 0);
        spc.wstate = W_CLOSED;
    }
    set_driver_callbacks(0);
    apply_kinds(spc.enabled_types & ~K_GPU, 0);
    if (spc.gs_cb) set_switch_callbacks(1); /* the GPU kinds' switch off is still to be applied */
    spc.enabled_types = 0;
}

/* Says that the open window was still open at `at` (a WINDOW record with close 0 and openAsOf):
 * the agent holds a window's cycles until it knows the window's close came after them, and a
 * process that stops synchronising (idle, or launching without waiting) keeps its window open. */
static void window_heartbeat(uint64_t at) {
    struct spw_window w = {.open = spc.window_start, .close = 0, .openAsOf = at};
    spc.window_asof = at;
    (void)out_record(SPW_WINDOW, 0, &w, sizeof w, NULL, 0);
}

/* Opens or closes the tracing window when due (cfg.duty_*); returns the next due time. Work launched
 * while a window is open has its GPU records; the agent counts GPU figures only for cycles that
 * lie wholly inside a window (WINDOW records). */
uint64_t duty_step(uint64_t now) {
    poll_detach();
    uint64_t poll = spc.detach_pending ? now + 1000000ull : UINT64_MAX; /* see a detach through */
    if (!spc.duty_types) return poll;
    uint32_t gpu = spc.duty_types & K_GPU;
    const uint64_t wait_switch = now + 100000000ull; /* the switch wakes the sender (eventfd) before that */
    struct spw_window w = {0};
    switch (spc.wstate) {
    case W_CLOSED:
        if (cfg.max_windows && spc.windows >= cfg.max_windows) return poll;
        if (cfg.duty_gated && !spc.window_req) return poll; /* read_commands wakes the sender */
        if (now < spc.next_toggle) return poll < spc.next_toggle ? poll : spc.next_toggle;
        if (atomic_load(&spc.graphs) && !cfg.duty_graphs) { /* see spc.duty_stopped */
            if (!atomic_exchange(&spc.duty_stopped, 1))
                logmsg("no more GPU tracing windows: this process has built CUDA graphs, and switching CUPTI's "
                       "tracing while graphs replay crashed such processes; later cycles have CPU figures only");
            return poll;
        }
        if (ensure_attached() < 0) return UINT64_MAX;
        spc.windows++;
        spc.window_req = 0;
        window_api(1, gpu != 0);
        spc.wstate = W_OPENING;
        if (gpu && !gpu_switch_post(1, spc.duty_types)) return wait_switch;
        /* fall through */
    case W_OPENING:
        if (gpu && !gpu_switch_done()) return wait_switch;
        spc.window_start = gpu ? atomic_load(&spc.gs_at) : mono_ns();
        spc.window_asof = spc.window_start;
        spc.wstate = W_OPEN;
        spc.next_toggle = spc.window_start + cfg.duty_on_ns;
        w.open = spc.window_start, w.close = 0, w.openAsOf = 0;
        (void)out_record(SPW_WINDOW, 0, &w, sizeof w, NULL, 0);
        return spc.next_toggle;
    case W_OPEN:
        if (now < spc.next_toggle) {
            /* Only the sender closes a window: it is open now. */
            if (now >= spc.window_asof + WINDOW_HEARTBEAT_NS) window_heartbeat(now);
            uint64_t next = spc.window_asof + WINDOW_HEARTBEAT_NS;
            if (spc.next_toggle < next) next = spc.next_toggle;
            return poll < next ? poll : next;
        }
        spc.window_end = mono_ns();
        spc.wstate = W_CLOSING;
        if (gpu && !gpu_switch_post(0, gpu)) return wait_switch;
        /* fall through */
    default: /* W_CLOSING */
        if (gpu && !gpu_switch_done()) {
            /* The close waits for a synchronising call. Time first: while no application thread has
             * begun applying it (GS_WANT_OFF), the close's time will come after t. */
            uint64_t t = mono_ns();
            if (t >= spc.window_asof + WINDOW_HEARTBEAT_NS && atomic_load(&spc.gs) == GS_WANT_OFF)
                window_heartbeat(t);
            return wait_switch;
        }
        if (gpu) spc.window_end = atomic_load(&spc.gs_at);
        window_api(0, 0);
        spc.wstate = W_CLOSED;
        spc.next_toggle = spc.window_start + cfg.duty_period_ns;
        w.open = spc.window_start, w.close = spc.window_end, w.openAsOf = 0;
        (void)out_record(SPW_WINDOW, 0, &w, sizeof w, NULL, 0);
        if (cfg.max_windows && spc.windows >= cfg.max_windows) { /* the last window closed */
            request_detach();
            return spc.detach_pending ? now + 1000000ull : UINT64_MAX;
        }
        return spc.next_toggle;
    }
}
