#!/usr/bin/env python3
"""Conformance workload: SGLang main (spec v2 EAGLEWorkerV2 under the overlap scheduler,
Scheduler.event_loop_overlap), written from the upstream files listed in conformance.yaml.

    python3 workload.py --cycles N --mode graph|eager [--proctitle T]

N is the number of steps of the cycle function (EAGLEWorkerV2.forward_batch_generation): one
prefill, then N-1 decode cycles. Standard library only; CPython 3.10-3.13."""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "..", "workloads"))

import fakecuda  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=8)
    p.add_argument("--mode", choices=["graph", "eager"], default="graph")
    p.add_argument("--proctitle", default="")
    a = p.parse_args(argv)
    if a.cycles < 1:
        p.error("--cycles must be >= 1 (the first step is the prefill)")
    if a.proctitle:
        from proctitle import set_proctitle
        set_proctitle(a.proctitle)
    with fakecuda.tag("other"):
        from simkernels import Kernels, SimGpu
        from sglang.srt.managers.scheduler import run_scheduler_process
        from sglang.srt.server_args import ServerArgs
        cuda = fakecuda.Cuda()
        kernels = Kernels(cuda, 2.0)
        gpu = SimGpu(cuda, kernels, cuda.stream(), cuda.stream())
        gpu.schedule_stream = cuda.stream()
        gpu.copy_stream = cuda.stream()
        sa = ServerArgs(disable_cuda_graph=(a.mode == "eager"), num_cycles=a.cycles)
        s = run_scheduler_process(sa, gpu)
    sys.stdout.write("cycles %d decode %d\n" % (s.forward_ct, s.forward_ct_decode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
