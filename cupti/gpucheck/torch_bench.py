"""Launch-rate microbenchmark for libspecprof_cupti.so's overhead on a real GPU (run.sh).

    python3 torch_bench.py eager|graph ITERATIONS

eager: 20 tiny elementwise kernels per iteration, each its own cuLaunchKernel (the worst case
for CUPTI's per-kernel cost); graph: the same 20 kernels captured once, one cuGraphLaunch per
iteration. Prints one JSON line.
"""
import json
import sys
import time

import torch


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    x = torch.zeros(1024, device="cuda")

    def step():
        for _ in range(20):
            x.add_(1.0)

    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.synchronize()
    g = None
    if mode == "graph":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        if g is None:
            step()
        else:
            g.replay()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"mode": mode, "iterations": n, "kernels": 20 * n, "wall_s": round(dt, 4),
                      "kernels_per_s": round(20 * n / dt)}))


if __name__ == "__main__":
    main()
