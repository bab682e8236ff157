#!/usr/bin/env python3
"""A torch process that exits in the ways that stress the injected CUPTI library's exit paths
(issue "Never harm the server", item 6; bench/gpu/exitpaths.sh runs it).

It runs --iters steps of small elementwise kernels (a launch-bound eager loop), prints a checksum
of the result (the same with and without specprof), then exits one of these ways:

  inflight  a last burst of --burst launches, no synchronisation, then a normal interpreter exit:
            kernel records are still in flight when the library's exit path runs
  ctxreset  synchronise, then cuDevicePrimaryCtxReset on every device: CUDA's own teardown comes
            before the library's
  osexit    a last burst, then os._exit(0): no atexit handler runs at all
  raise     a last burst, then an uncaught exception (exit status 1, expected)
"""

import argparse
import ctypes
import os
import sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--how", choices=("inflight", "ctxreset", "osexit", "raise"), default="inflight")
    p.add_argument("--iters", type=int, default=3000)
    p.add_argument("--burst", type=int, default=20000)
    a = p.parse_args()
    print("exitload pid %d" % os.getpid(), flush=True)
    x = torch.arange(4096, device="cuda", dtype=torch.float32)
    for _ in range(a.iters):
        x = x * 1.0001 + 1.0
    print("checksum %.6e" % x.sum().item(), flush=True)
    if a.how == "ctxreset":
        torch.cuda.synchronize()
        cuda = ctypes.CDLL("libcuda.so.1")
        n = ctypes.c_int(0)
        cuda.cuDeviceGetCount(ctypes.byref(n))
        for d in range(n.value):
            dev = ctypes.c_int(0)
            cuda.cuDeviceGet(ctypes.byref(dev), d)
            rc = cuda.cuDevicePrimaryCtxReset(dev)
            print("ctxreset device %d: %d" % (d, rc), flush=True)
        return
    y = x
    for _ in range(a.burst):
        y = y * 0.5 + 0.25
    if a.how == "osexit":
        os._exit(0)
    if a.how == "raise":
        raise RuntimeError("exitload: raised on purpose")


if __name__ == "__main__":
    main()
