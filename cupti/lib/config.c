/*
 * Configuration: the environment, read once in init (config_read) into cfg, every value checked.
 * A value that cannot be used is logged once with what is used instead; nothing here fails init.
 * Every variable is documented in ../README.md ("Environment"); the developer-only ones are read
 * in one place below ("Developer-only knobs").
 */
#define _GNU_SOURCE
#include "state.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct spc_config cfg;

void logmsg(const char *fmt, ...) {
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

/* A number in [lo, hi]; unset: def; anything else: def, and says so. */
static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v < lo || v > hi) {
        logmsg("%s=%s: want a whole number from %llu to %llu; using %llu", name, s, (unsigned long long)lo,
               (unsigned long long)hi, (unsigned long long)def);
        return def;
    }
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

/* A comma list of kinds (`none` alone: no kind); unset or empty: all but graph. */
static uint32_t parse_kinds(const char *name, const char *s) {
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
        else if (strcmp(t, "none"))
            logmsg("%s: unknown kind %s (want kernel, memcpy, memset, api, sync, overhead, all, graph or none); "
                   "ignored",
                   name, t);
    }
    return k;
}

void config_read(void) {
    const char *off = getenv("SPECPROF_CUPTI_DISABLE");
    cfg.disabled = off && strcmp(off, "0") != 0;
    if (cfg.disabled) return; /* nothing read, nothing said */
    const char *lib = getenv("SPECPROF_CUPTI_LIB");
    cfg.cupti_lib = lib && *lib ? lib : NULL;
    const char *p = getenv("SPECPROF_SOCKET");
    if (!p || !*p) p = DEFAULT_SOCKET;
    if (strlen(p) >= sizeof cfg.socket_path) {
        LOG_ONCE(L_SOCKET, "SPECPROF_SOCKET is longer than %zu bytes; using %s", sizeof cfg.socket_path - 1,
                 DEFAULT_SOCKET);
        p = DEFAULT_SOCKET;
    }
    snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", p);
    cfg.kinds = parse_kinds("SPECPROF_CUPTI_KINDS", getenv("SPECPROF_CUPTI_KINDS"));
    cfg.buf_size = (size_t)env_u64("SPECPROF_CUPTI_BUFFER_KB", 1024, 16, 65536) * 1024;
    cfg.max_bufs = (int)env_u64("SPECPROF_CUPTI_BUFFERS", 16, 2, MAX_BUFS_LIMIT);
    cfg.graph_cap = (uint32_t)env_u64("SPECPROF_CUPTI_GRAPH_NODES", 262144, 0, 1u << 24);
    cfg.out_cap = (size_t)env_u64("SPECPROF_CUPTI_SEND_BUFFER_KB", 4096, 64, 1u << 20) * 1024;
    const char *api = getenv("SPECPROF_CUPTI_API");
    cfg.all_api = api && !strcmp(api, "all");
    if (api && *api && !cfg.all_api)
        logmsg("SPECPROF_CUPTI_API=%s: want all (or unset); recording only the calls that make, wait for or "
               "capture GPU work",
               api);
    cfg.detach = env_u64("SPECPROF_CUPTI_DETACH", 0, 0, 1) != 0;
    cfg.max_windows = (uint32_t)env_u64("SPECPROF_CUPTI_WINDOWS", 0, 0, 1u << 30);
    cfg.duty_gated = env_choice("SPECPROF_CUPTI_DUTY_START", "now", "cycles", "opening windows from the start");
    cfg.graph_unsub = env_choice("SPECPROF_CUPTI_GRAPH_DETACH", "quiet", "unsubscribe", "using quiet");
    cfg.duty_graphs = env_u64("SPECPROF_CUPTI_DUTY_GRAPHS", 1, 0, 1) != 0;

    /* ---- Developer-only knobs: diagnostics and the cadences tests shorten. ---------------------- */
    cfg.debug = env_u64("SPECPROF_CUPTI_DEBUG", 0, 0, 1) != 0;
    cfg.flush_ns = env_u64("SPECPROF_CUPTI_FLUSH_MS", 100, 1, 60000) * 1000000ull;
    cfg.retry_ns = env_u64("SPECPROF_CUPTI_RETRY_MS", 500, 10, 600000) * 1000000ull;
    /* Which of the windowed kinds the windows switch (how the H200 crash was pinned to the GPU kinds). */
    const char *dk = getenv("SPECPROF_CUPTI_DUTY_KINDS");
    cfg.duty_mask = dk ? parse_kinds("SPECPROF_CUPTI_DUTY_KINDS", dk) : K_ALL | K_GRAPH;
    /* Where API records come from (see api_cb); tests run both sources. */
    const char *src = getenv("SPECPROF_CUPTI_API_SOURCE");
    int src_set = src && *src;
    if (src_set && strcmp(src, "activity")) {
        if (!strcmp(src, "callbacks"))
            cfg.api_cb = 1;
        else
            logmsg("SPECPROF_CUPTI_API_SOURCE=%s: want activity or callbacks; using CUPTI's activity records", src);
    }
    uint64_t ring = env_u64("SPECPROF_CUPTI_API_RING", 65536, 1024, 1u << 22);
    for (cfg.api_ring = 1024; cfg.api_ring < ring;) cfg.api_ring <<= 1;
    /* ---- End of the developer-only knobs. ------------------------------------------------------- */

    const char *duty = getenv("SPECPROF_CUPTI_DUTY");
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
    if (cfg.duty_on_ns && !src_set) cfg.api_cb = 1;
    if (cfg.duty_on_ns && src_set && !cfg.api_cb)
        logmsg("SPECPROF_CUPTI_API_SOURCE=activity with duty-cycled tracing: switching CUPTI's API kinds can leave "
               "it giving every later call one correlation id (their GPU work then lost, and counted)");
}
