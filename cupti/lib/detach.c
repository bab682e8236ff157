/*
 * Detach (cfg.detach): once nothing more is to be traced (the last of cfg.max_windows windows
 * closed, or no agent listens), CUPTI itself is detached for good (cuptiFinalize), because a
 * subscribed CUPTI costs the application on every CUDA call even with no activity kind enabled.
 * The detach is final: on the H200 (CUDA 13.0) a process that replays CUDA graphs failed its next
 * graph launches after CUPTI was attached again. CUPTI requires cuptiFinalize to run in an API exit
 * callback, so one application thread waits for it (a context synchronisation and CUPTI's
 * teardown): that wait is measured (STATS). A process that built CUDA graphs is never finalized
 * (see spc.graphs): every callback goes off instead (quiet_cupti).
 *
 * The sender requests and sees the detach through (spc.detach_pending, detach_off); an application
 * thread takes it in on_callback (spc.cs); exit cancels one not yet taken (spc.detach_mu).
 */
#define _GNU_SOURCE
#include "state.h"

#include <time.h>

static const char refused_msg[] = "not finalizing CUPTI: this process has built CUDA graphs, whose launches fail after "
                                  "cuptiFinalize; every CUPTI callback turned off instead";

/* CUPTI may be called: attached, and no detach asked for (sender thread). */
int cupti_usable(void) { return !spc.detach_pending && atomic_load(&spc.cs) == CS_ATTACHED; }

/* Runs on the application thread that took the detach request, in its API exit callback. */
void finalize_here(void) {
    if (atomic_load(&spc.graphs)) { /* a graph was built after the request: refuse (see spc.graphs) */
        atomic_store(&spc.detach_refused, 1);
        atomic_store(&spc.cs, CS_ATTACHED);
    } else {
        uint64_t t0 = mono_ns();
        spc_result r = spc.cupti.Finalize();
        uint64_t d = mono_ns() - t0;
        if (r != SPC_SUCCESS) {
            LOG_ONCE(L_DETACH, "cuptiFinalize: %s; CUPTI stays attached", result_str(r));
            atomic_store(&spc.cs, CS_ATTACHED);
        } else {
            atomic_store(&spc.detach_stall_ns, d);
            atomic_store(&spc.detaches, 1);
            atomic_store(&spc.cs, CS_DETACHED);
        }
    }
    kick_sender(); /* the sender sees it at once (it may be polling for it) */
}

/* The detach of a process that built CUDA graphs (sender, cupti_mu held, nothing enabled): no
 * cuptiFinalize (see spc.graphs), but every callback off, so that CUPTI's callbacks no longer run in
 * the application's CUDA calls; with cfg.graph_unsub the subscription goes as well. Final, as a
 * detach: from here on nothing calls CUPTI (CS_DETACHED). */
static void quiet_cupti(void) {
    (void)spc.cupti.ActivityFlushAll(SPC_FLUSH_FORCED);
    drain_buffers();
    static const uint32_t domains[] = {SPC_DOMAIN_DRIVER_API, SPC_DOMAIN_RUNTIME_API, SPC_DOMAIN_RESOURCE};
    int ok = 1;
    for (size_t i = 0; i < sizeof domains / sizeof domains[0]; i++)
        if (spc.cupti.EnableDomain(0, spc.sub, domains[i]) != SPC_SUCCESS) ok = 0;
    atomic_store(&spc.cb_api, 0);
    spc.cb_on = 0;
    spc.gs_cb = 0;
    int unsub = ok && cfg.graph_unsub && spc.cupti.Unsubscribe(spc.sub) == SPC_SUCCESS;
    if (!ok) LOG_ONCE(L_DETACH, "cuptiEnableDomain failed while turning CUPTI's callbacks off; CUPTI stays attached");
    else logmsg("%s%s", refused_msg, unsub ? ", and unsubscribed" : "");
    atomic_store(&spc.detach_refused, 1);
    if (!ok) return;
    if (unsub) spc.sub = NULL;
    atomic_store(&spc.detach_quiet, unsub ? 2 : 1);
    atomic_store(&spc.cs, CS_DETACHED);
}

/* Asks for a detach once nothing is enabled (sender): CUPTI's buffers are flushed and converted
 * first, then the API domains' callbacks wait for the next application call to return. */
void request_detach(void) {
    if (!cfg.detach || spc.detach_off || !cupti_usable() || atomic_load(&spc.exit_req)) return;
    if (!gpu_switch_done() || atomic_load(&spc.gpu_on)) return; /* retried once the GPU kinds are off */
    if (!spc.cupti.Finalize || !spc.cupti.EnableDomain) {
        LOG_ONCE(L_DETACH, "this CUPTI lacks cuptiFinalize or cuptiEnableDomain; CUPTI stays attached");
        spc.detach_off = 1;
        return;
    }
    if (atomic_load(&spc.graphs)) {
        quiet_cupti();
        spc.detach_off = 1;
        return;
    }
    (void)spc.cupti.ActivityFlushAll(SPC_FLUSH_FORCED);
    drain_buffers();
    if (spc.cupti.EnableDomain(1, spc.sub, SPC_DOMAIN_DRIVER_API) != SPC_SUCCESS ||
        spc.cupti.EnableDomain(1, spc.sub, SPC_DOMAIN_RUNTIME_API) != SPC_SUCCESS) {
        LOG_ONCE(L_DETACH, "cuptiEnableDomain failed; CUPTI stays attached");
        (void)spc.cupti.EnableDomain(0, spc.sub, SPC_DOMAIN_DRIVER_API);
        (void)spc.cupti.EnableDomain(0, spc.sub, SPC_DOMAIN_RUNTIME_API);
        if (spc.collecting && !spc.duty_types) set_driver_callbacks(1);
        spc.detach_off = 1;
        return;
    }
    pthread_mutex_lock(&spc.detach_mu);
    int want = CS_ATTACHED;
    if (!spc.no_detach && atomic_compare_exchange_strong(&spc.cs, &want, CS_DETACH_REQ)) spc.detach_pending = 1;
    pthread_mutex_unlock(&spc.detach_mu);
    DEBUG("detach requested");
}

/* Sees a requested detach through (sender). */
void poll_detach(void) {
    if (!spc.detach_pending) return;
    int s = atomic_load(&spc.cs);
    if (s == CS_DETACHED) {
        spc.detach_pending = 0;
        spc.sub = NULL;
        DEBUG("detached");
    } else if (s == CS_ATTACHED) { /* refused, cuptiFinalize failed or exit cancelled: still subscribed */
        spc.detach_pending = 0;
        spc.detach_off = 1;
        (void)spc.cupti.EnableDomain(0, spc.sub, SPC_DOMAIN_DRIVER_API);
        (void)spc.cupti.EnableDomain(0, spc.sub, SPC_DOMAIN_RUNTIME_API);
        if (atomic_load(&spc.detach_refused) && !atomic_load(&spc.exit_req)) quiet_cupti(); /* graphs came after the request */
    }
}

/* Makes CUPTI usable (sender, or init before the sender exists): cancels a pending detach, or
 * waits for one in progress. -1: CUPTI is detached, for good. */
int ensure_attached(void) {
    if (spc.detach_pending) {
        int want = CS_DETACH_REQ;
        if (atomic_compare_exchange_strong(&spc.cs, &want, CS_ATTACHED)) {
            spc.detach_pending = 0; /* no thread took it: still subscribed, as before the request */
            (void)spc.cupti.EnableDomain(0, spc.sub, SPC_DOMAIN_DRIVER_API);
            (void)spc.cupti.EnableDomain(0, spc.sub, SPC_DOMAIN_RUNTIME_API);
            return 0;
        }
        struct timespec step = {0, 50000};
        for (int i = 0; i < 2000 && atomic_load(&spc.cs) == CS_FINALIZING; i++) nanosleep(&step, NULL);
        poll_detach();
    }
    return atomic_load(&spc.cs) == CS_ATTACHED && !spc.detach_pending ? 0 : -1;
}
