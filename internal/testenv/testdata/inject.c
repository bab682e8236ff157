/*
 * inject.c — a CUDA_INJECTION64_PATH library for standin_test.go. InitializeInjection registers
 * a simgpu observer that writes one line per API exit and per GPU operation to
 * $SIMGPU_TEST_INJECT_OUT ("init" first).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simgpu.h"

static int out_fd = -1;

static void out(const char *s) {
    if (out_fd >= 0) {
        ssize_t r = write(out_fd, s, strlen(s));
        (void)r;
    }
}

static void on_api_exit(const simgpu_api_rec *r) {
    char b[256];
    snprintf(b, sizeof b, "api %llu %s %d\n", (unsigned long long)r->corr, r->api, r->result);
    out(b);
}

static void on_gpu(const simgpu_gpu_rec *r) {
    char b[512];
    snprintf(b, sizeof b, "gpu %llu %s %llu %llu %s\n", (unsigned long long)r->corr, r->name ? r->name : "-",
             (unsigned long long)r->start, (unsigned long long)r->end, r->tag);
    out(b);
}

int InitializeInjection(void) {
    const char *p = getenv("SIMGPU_TEST_INJECT_OUT");
    if (p) out_fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    out("init\n");
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*reg)(const simgpu_observer *) = h ? (int (*)(const simgpu_observer *))dlsym(h, "simgpu_register_observer") : NULL;
    if (!reg) {
        out("no simgpu_register_observer\n");
        return 1;
    }
    simgpu_observer o;
    memset(&o, 0, sizeof o);
    o.api_exit = on_api_exit;
    o.gpu_op = on_gpu;
    if (reg(&o) != 0) out("register failed\n");
    /* the driver may be called from InitializeInjection (like CUPTI does) */
    void *(*ver)(int *) = NULL;
    *(void **)&ver = dlsym(h, "cuDriverGetVersion");
    int v = 0;
    if (ver) ver(&v);
    return 0;
}
