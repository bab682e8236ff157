/*
 * Loading CUPTI: find a libcupti (cfg.cupti_lib first, then one already mapped, the CUDA install,
 * the nvidia-cuda-cupti wheel, the loader path), dlopen it, resolve the entry points into
 * spc.cupti, and accept only the versions whose record layouts cupti_min.h describes. Runs once,
 * in init, on the thread that called cuInit.
 */
#define _GNU_SOURCE
#include "state.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Supported cuptiGetVersion ranges: see cupti_min.h for the record versions each one emits. */
#define API_MIN_12 18u     /* CUDA 11.8 and 12.0 */
#define API_MAX_12 28u     /* CUDA 12.9 */
#define API_MIN_13 130000u /* CUDA 13.0.x */
#define API_MAX_13 130099u

const char *result_str(spc_result r) {
    const char *s = NULL;
    if (spc.cupti.GetResultString && spc.cupti.GetResultString(r, &s) == SPC_SUCCESS && s) return s;
    return "unknown CUPTI error";
}

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

void *load_cupti(char *found, size_t fsz) {
    void *h;
    const char *env = cfg.cupti_lib;
    if (env) {
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

int resolve(void *h) {
#define SYM(field, name, required)                                           \
    do {                                                                     \
        *(void **)&spc.cupti.field = dlsym(h, name);                                 \
        if (!spc.cupti.field && (required)) {                                        \
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

int check_version(const char *found) {
    spc_result r = spc.cupti.GetVersion(&spc.cupti_version);
    if (r != SPC_SUCCESS) {
        LOG_ONCE(L_VERSION, "cuptiGetVersion (%s): %s; collection disabled", found, result_str(r));
        return -1;
    }
    if (!version_supported(spc.cupti_version)) {
        LOG_ONCE(L_VERSION,
                 "CUPTI API version %u (%s) is not supported (supported: %u-%u = CUDA 11.8-12.9, %u-%u = "
                 "CUDA 13.0); collection disabled rather than mis-decoding its records",
                 spc.cupti_version, found, API_MIN_12, API_MAX_12, API_MIN_13, API_MAX_13);
        return -1;
    }
    return 0;
}
