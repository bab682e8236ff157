#!/usr/bin/env python3
"""vLLM with model runner V2 (vllm/v1/worker/gpu/model_runner.py) and EAGLE3 speculative
decoding on the stand-in GPU. See conformance.yaml for the upstream files it was written from
and testdata/conformance/README.md for the contract.

--executor uni (one GPU): the engine core process (VLLM::EngineCore) runs the worker through the
UniProcExecutor. EngineCoreProc.run_busy_loop runs step_with_batch_queue (async scheduling):
each engine step's execute_model and sample_tokens run on the main thread; sample_tokens returns
an AsyncOutput whose get_output (the wait for the sampled tokens' host copy) runs on the
WorkerAsyncOutput thread while the main thread already runs the next step.

--executor mp: one worker process of the multiproc executor (VLLM::Worker_TP0, give it with
--proctitle): WorkerProc.worker_busy_loop runs the RPCs the engine core sends (execute_model,
sample_tokens and, with --scheduling sync, take_draft_token_ids); the AsyncOutput is waited for
on the main thread (sync) or on the WorkerAsyncOutputCopy thread (async).

    python3 workload.py --cycles 16 --mode graph
    python3 workload.py --cycles 16 --executor mp --scheduling sync --proctitle VLLM::Worker_TP0

stdout: one summary JSON line.
"""

import argparse
import ctypes
import json
import os
import sys
import threading

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "..", "workloads"))

import fakecuda  # noqa: E402
import simgpu  # noqa: E402

PREFILL_TOKENS = 8


class VllmConfig(object):
    def __init__(self, a):
        self.mode = a.mode
        self.async_scheduling = a.scheduling == "async"
        self.num_speculative_tokens = a.num_speculative_tokens
        self.num_layers = a.layers
        k = a.num_speculative_tokens
        # cudagraph capture sizes: the draft steps (1), uniform decode (k+1), the prefill
        self.piecewise_sizes = sorted({1, k + 1, PREFILL_TOKENS})
        self.full_sizes = [k + 1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=16, help="engine steps")
    p.add_argument("--mode", choices=("graph", "eager"), default="graph",
                   help="graph: CUDA graphs (FULL_AND_PIECEWISE); eager: enforce_eager")
    p.add_argument("--executor", choices=("uni", "mp"), default="uni",
                   help="uni: UniProcExecutor in the engine core; mp: a multiproc worker")
    p.add_argument("--scheduling", choices=("sync", "async"), default="async",
                   help="sync: --no-async-scheduling (only with --executor mp here)")
    p.add_argument("--layers", type=int, default=2, help="target model layers")
    p.add_argument("--num-speculative-tokens", type=int, default=3)
    p.add_argument("--proctitle", default="VLLM::EngineCore")
    a = p.parse_args(argv)
    if a.cycles < 1 or a.layers < 1 or a.num_speculative_tokens < 1:
        p.error("--cycles, --layers and --num-speculative-tokens must be >= 1")
    if a.executor == "uni" and a.scheduling == "sync":
        p.error("--scheduling sync needs --executor mp (the UniProcExecutor's synchronous path "
                "with model runner V2 is not part of this workload)")
    return a


def set_proctitle(title):
    """As setproctitle does: comm (prctl PR_SET_NAME) and the argv area of /proc/PID/cmdline."""
    raw = title.encode()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(raw[:15]), 0, 0, 0)
    with open("/proc/self/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])
    size = arg_end - arg_start
    if size > 1:
        ctypes.memmove(arg_start, raw[:size - 1].ljust(size, b"\0"), size)


def main(argv=None):
    a = parse_args(argv)
    set_proctitle(a.proctitle)
    with fakecuda.tag("other"):
        simgpu.GPU = simgpu.Gpu()
        config = VllmConfig(a)
        if a.executor == "uni":
            from vllm.v1.engine.core import EngineCoreProc
            engine = EngineCoreProc.run_engine_core(config, a.cycles, PREFILL_TOKENS)
            outputs = engine.scheduler.finished
        else:
            from vllm.v1.core.sched.scheduler import Scheduler
            from vllm.v1.executor.multiproc_executor import WorkerProc
            scheduler = Scheduler(a.cycles, a.num_speculative_tokens, PREFILL_TOKENS)
            rpcs = []
            for _ in range(a.cycles):
                rpcs.append(("execute_model", (scheduler.schedule(),), {}, 0))
                rpcs.append(("sample_tokens", (None,), {}, 0))
                if not config.async_scheduling:
                    rpcs.append(("take_draft_token_ids", (), {}, 0))
            worker = WorkerProc.worker_main(config, rpcs)
            outputs = sum(1 for r in worker.worker_response_mq.responses if r[1] is not None)
    summary = {
        "cycles": simgpu.TRUTH.cycle,
        "outputs": outputs,
        "executor": a.executor,
        "scheduling": a.scheduling,
        "mode": a.mode,
        "pid": os.getpid(),
        "tid": threading.get_native_id(),
        "python": "%d.%d.%d" % sys.version_info[:3],
        "calls": fakecuda.call_counts(),
    }
    sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
