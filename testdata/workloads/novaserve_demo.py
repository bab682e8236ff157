#!/usr/bin/env python3
"""novaserve: a made-up speculative-decoding engine that no specprof preset knows.

Its step function (novaserve/worker/step_worker.py StepWorker.execute_step) calls a draft
proposer, a target runner and an acceptor, and launches a bookkeeping kernel itself; the
engine loop around it sleeps in a pure-Python scheduler tick. With the stand-ins of
testdata/standin it runs on the simulated GPU. Every call is tagged (fakecuda.truth_tag) with
the phase and cycle that rules suggested from its call tree (`specprof rules suggest`) give
it: the callee's class.method, lower case; start-up calls are `other`.

    LD_LIBRARY_PATH=/tmp/sbuild SPECPROF_SIM_TRUTH=/tmp/t.jsonl python3 novaserve_demo.py --steps 300

stdout: one summary JSON line {"steps": N, "cycles": N+1, "pid": ..., "tid": ...}.
"""

import argparse
import json
import os
import sys
import threading

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import fakecuda  # noqa: E402
from fakecuda import tag, truth_tag  # noqa: E402
from novaserve.engine.core import EngineCore  # noqa: E402
from novaserve.model.net import TinyNet  # noqa: E402
from novaserve.sample.acceptor import TokenAcceptor  # noqa: E402
from novaserve.spec.proposer import DraftProposer  # noqa: E402
from novaserve.worker.runner import TargetRunner  # noqa: E402
from novaserve.worker.step_worker import StepWorker  # noqa: E402

# role -> (kernel, duration in units of --kernel-us)
KERNELS = {
    "init": ("nova_init_weights", 0.25), "embed": ("nova_embed", 1.0), "qkv": ("nova_gemm_qkv", 3.0),
    "attn": ("nova_attention", 2.0), "o_proj": ("nova_gemm_o", 3.0), "gate_up": ("nova_gemm_gate_up", 3.0),
    "act": ("nova_act", 1.0), "down": ("nova_gemm_down", 3.0), "lm_head": ("nova_gemm_lm_head", 3.0),
    "topk": ("nova_topk", 0.25), "verify": ("nova_greedy_match", 0.25), "bookkeeping": ("nova_bookkeeping", 0.25),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="steps after the warm-up step")
    p.add_argument("--draft-steps", type=int, default=3, help="draft forwards per step")
    p.add_argument("--layers", type=int, default=4, help="target net layers (the draft net has 1)")
    p.add_argument("--kernel-us", type=float, default=20.0, help="base kernel duration on the simulated GPU")
    p.add_argument("--tick-ms", type=float, default=10.0, help="the scheduler tick's sleep per step")
    a = p.parse_args()
    with tag(truth_tag("other")):
        gpu = fakecuda.Cuda()
        k = {}
        gpu.load_module([sym for sym, _ in KERNELS.values()])
        for role, (sym, mult) in KERNELS.items():
            k[role] = gpu.function(sym, duration_us=mult * a.kernel_us)
        stream = fakecuda.LEGACY_STREAM
        dptr = gpu.alloc(8)
        gpu.htod(dptr, b"\0" * 8)
        target = TinyNet(gpu, k, a.layers)
        draft = TinyNet(gpu, k, 1)
        worker = StepWorker(gpu, k, DraftProposer(gpu, k, draft, a.draft_steps), TargetRunner(target),
                            TokenAcceptor(gpu, k, dptr), stream)
        engine = EngineCore(worker, target, stream, a.tick_ms / 1000.0)
    engine.warmup()
    engine.run(a.steps)
    with tag(truth_tag("other")):
        gpu.sync(stream)
    print(json.dumps({"steps": a.steps, "cycles": a.steps + 1, "pid": os.getpid(), "tid": threading.get_native_id()}))


if __name__ == "__main__":
    main()
