/*
 * launcher.c — a plain C CUDA driver program for the injection tests (TestLauncherSIGPIPEAndFork):
 * SIGPIPE keeps its default action (Python ignores it, so the workload cannot test this), and
 * the program forks a child mid-run that exits at once through exit(), running atexit handlers.
 *   launcher ITERATIONS FORK_AT SLEEP_US
 */
#include "cuda.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                  \
    do {                                                             \
        CUresult rc_ = (call);                                       \
        if (rc_ != CUDA_SUCCESS) {                                   \
            fprintf(stderr, "%s failed: %d\n", #call, (int)rc_);     \
            return 2;                                                \
        }                                                            \
    } while (0)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: launcher ITERATIONS FORK_AT SLEEP_US\n");
        return 2;
    }
    int iters = atoi(argv[1]), fork_at = atoi(argv[2]), sleep_us = atoi(argv[3]);
    signal(SIGPIPE, SIG_DFL);
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, ".version 6.4\n.target sm_52\n.visible .entry launcher_kernel() { ret; }\n"));
    CHECK(cuModuleGetFunction(&f, mod, "launcher_kernel"));
    for (int i = 0; i < iters; i++) {
        CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        if (i == fork_at) {
            double t0 = now_ms();
            pid_t pid = fork();
            if (pid == 0) exit(0); /* atexit handlers run in the child */
            int status = 0;
            waitpid(pid, &status, 0);
            printf("child exited %d after %.1f ms\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1, now_ms() - t0);
            fflush(stdout);
        }
        if (i % 100 == 99) CHECK(cuStreamSynchronize(NULL));
        if (sleep_us > 0) usleep((useconds_t)sleep_us);
    }
    CHECK(cuStreamSynchronize(NULL));
    printf("done %d\n", iters);
    return 0;
}
