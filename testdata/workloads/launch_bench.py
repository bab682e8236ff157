"""Per-launch cost benchmark driven by specprof's `make bench` (agent/bench_test.go).

The process loads libcuda (stand-in or real; `--backend torch` uses torch elementwise ops, one
cuLaunchKernel each), then waits for commands on stdin, one per line:
  measure DEPTH   time launches issued DEPTH Python frames below EAGLEWorker.verify
                  (sglang/srt/speculative/bench_worker.py), print {"depth":D,"ns":[per-call ns of
                  each batch]} as one JSON line
  quit
The harness attaches probes between commands, so every configuration (no probe, an empty probe,
specprof) is measured in the same process, interleaved.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.setrecursionlimit(10000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["sim", "torch"], default="sim")
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--per-batch", type=int, default=400)
    args = ap.parse_args()

    if args.backend == "torch":
        import torch  # noqa: the real driver, through torch
        x = torch.zeros(16, device="cuda")

        def launch():
            x.add_(1)

        def drain():
            torch.cuda.synchronize()
    else:
        import fakecuda
        cu = fakecuda.Cuda()
        fn = cu.function("bench_kernel", duration_us=0.001)
        raw = cu._cuLaunchKernel
        stream = cu.stream()

        def launch():
            raw(fn, 1, 1, 1, 32, 1, 1, 0, stream, None, None)

        def drain():
            cu.sync(stream)

    from sglang.srt.speculative.bench_worker import EAGLEWorker
    w = EAGLEWorker(launch, drain)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] == "measure":
            depth = int(parts[1])
            res = w.verify(depth, args.batches, args.per_batch)
            print(json.dumps({"depth": depth, "ns": res}), flush=True)


if __name__ == "__main__":
    main()
