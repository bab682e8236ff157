#!/usr/bin/env python3
"""An SGLang-shaped speculative-decoding server loop (EAGLE, spec v1) on a simulated GPU.

Drives libcuda.so.1 / libnccl.so.2 (specprof's stand-ins through LD_LIBRARY_PATH, or the real
ones) from Python frames whose files and qualified names match real SGLang, and labels every
driver call with the phase specprof must report for it (stand-in ground truth,
SPECPROF_SIM_TRUTH). See README.md in this directory.

    LD_LIBRARY_PATH=/tmp/sbuild SPECPROF_SIM_TRUTH=/tmp/t.jsonl \\
        python3 testdata/workloads/sglang_demo.py --cycles 20 --mode graph

stdout: the SGLang `Decode batch` log lines, then one summary JSON line.
"""

import argparse
import ctypes
import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep testdata free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import fakecuda  # noqa: E402
from fakecuda import tag  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="SGLang EAGLE (spec v1) decode loop on a simulated GPU.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--cycles", type=int, default=200, help="speculative cycles (decode steps)")
    p.add_argument("--draft-steps", type=int, default=3,
                   help="speculative_num_steps K (K+1 verify tokens per request)")
    p.add_argument("--mode", choices=("graph", "eager"), default="graph",
                   help="graph: CUDA graphs captured at startup and replayed; eager: every "
                        "kernel launched from Python (--disable-cuda-graph)")
    p.add_argument("--layers", type=int, default=4, help="target model layers")
    p.add_argument("--draft-layers", type=int, default=1, help="draft model layers")
    p.add_argument("--kernel-us", type=float, default=20.0,
                   help="base kernel duration b in µs: small helpers 0.25b, elementwise/norm b, "
                        "attention 2b, GEMMs 3b (simulated GPU only)")
    p.add_argument("--hidden", type=int, default=4096, help="hidden size (all-reduce bytes = "
                   "hidden * tokens * 2)")
    p.add_argument("--allreduce", action="store_true",
                   help="one ncclAllReduce (bf16, 1-rank communicator) per target layer")
    p.add_argument("--stack-depth", type=int, default=0,
                   help="extra pure-Python frames (model_runner.nested_module_call) between "
                        "the phase functions and every driver/NCCL call")
    p.add_argument("--extra-thread", action="store_true",
                   help="a second thread running its own smaller EAGLEWorker loop on its own "
                        "stream (layers/2, draft steps K-1)")
    p.add_argument("--log-interval", type=int, default=50,
                   help="cycles between `Decode batch` lines (--decode-log-interval)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated accept lengths")
    p.add_argument("--accept-prob", type=float, default=0.7,
                   help="probability that each draft token is accepted (until the first miss)")
    p.add_argument("--batch-size", type=int, default=1, help="running requests")
    p.add_argument("--draft-sync", action="store_true",
                   help="_draft_preprocess_decode also does torch.sum(seq_lens).item() "
                        "(a reduction kernel and a blocking copy)")
    p.add_argument("--stream", choices=("legacy", "created"), default="legacy",
                   help="main thread's compute stream: the legacy default stream (torch's "
                        "default; the accept copy is cuMemcpyDtoH_v2) or a created one (the "
                        "accept copy is cuMemcpyDtoHAsync_v2 + cuStreamSynchronize)")
    p.add_argument("--proctitle", metavar="NAME",
                   help="process title, e.g. sglang::scheduler_TP0 (argv area and comm)")
    p.add_argument("--wait-start", metavar="PATH",
                   help="after initialisation (libraries loaded, graphs captured) wait until "
                        "PATH exists ('-': until stdin is closed) before the first cycle")
    p.add_argument("--sleep-before-cuda", type=float, default=0.0, metavar="S",
                   help="seconds to sleep before loading libcuda")
    p.add_argument("--sleep-after-cuinit", type=float, default=0.0, metavar="S",
                   help="seconds to sleep after cuInit, before any other CUDA call (an injected "
                        "library then acts on its own first, e.g. detaches with nobody listening)")
    p.add_argument("--warmup-s", type=float, default=0.0, metavar="S",
                   help="seconds of CUDA work before the first cycle, outside any cycle: kernels "
                        "and stream synchronisations, as model loading and warm-up make")
    p.add_argument("--sleep-at-exit", type=float, default=0.0, metavar="S",
                   help="after the summary line, sleep S seconds before exiting (an idle process "
                        "that keeps its CUDA context)")
    p.add_argument("--pause-at-cycle", type=int, default=0, metavar="N",
                   help="with --pause-file: after N decode steps, wait (outside any cycle) until "
                        "PATH exists (fault-injection tests stop or kill the profiler meanwhile)")
    p.add_argument("--pause-file", metavar="PATH", help="see --pause-at-cycle")
    p.add_argument("--tp-rank", type=int, default=0, help="TP rank (log prefix)")
    p.add_argument("--tp-size", type=int, default=1,
                   help="tensor-parallel ranks: rank 0 (this process) starts ranks 1..N-1 as processes "
                        "titled sglang::scheduler_TP<r>, like SGLang's launcher; their communicator has N ranks")
    p.add_argument("--side-stream", action="store_true",
                   help="verify also launches a long kernel on a second stream, overlapping the main "
                        "stream's kernels")
    p.add_argument("--straggle-us", type=float, default=0.0, metavar="US",
                   help="the last rank's GPU arrives US microseconds late at every all-reduce (a kernel "
                        "of that length before it)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    p.add_argument("--runtime-launch", action="store_true",
                   help="launch kernels with cudaLaunchKernel of the stand-in libcudart.so.13 (which "
                        "calls cuLaunchKernel), as PyTorch does; needs --mode eager")
    p.add_argument("--self-check", action="store_true",
                   help="at every call, apply the sglang preset to the Python stack and compare "
                        "with the tag (presetcheck.py); exit 3 on any mismatch")
    a = p.parse_args(argv)
    if a.cycles < 0 or a.draft_steps < 1 or a.layers < 1 or a.draft_layers < 1:
        p.error("--cycles must be >= 0, --draft-steps/--layers/--draft-layers >= 1")
    if a.runtime_launch and a.mode != "eager":
        p.error("--runtime-launch needs --mode eager (graph capture launches through the driver)")
    if a.log_interval < 1 or a.batch_size < 1 or a.stack_depth < 0:
        p.error("--log-interval and --batch-size must be >= 1, --stack-depth >= 0")
    return a


def set_proctitle(title):
    """Like setproctitle: comm via prctl(PR_SET_NAME) (15 bytes kept) and the argv area that
    /proc/PID/cmdline shows, overwritten in place. Best effort."""
    raw = title.encode()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(raw[:15]), 0, 0, 0)  # PR_SET_NAME
    except Exception as e:  # pragma: no cover
        sys.stderr.write("sglang_demo: prctl(PR_SET_NAME): %s\n" % e)
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        arg_start, arg_end = int(fields[45]), int(fields[46])  # stat fields 48, 49
        size = arg_end - arg_start
        if size > 1:
            buf = raw[:size - 1].ljust(size, b"\0")
            ctypes.memmove(arg_start, buf, size)
    except Exception as e:  # pragma: no cover
        sys.stderr.write("sglang_demo: rewriting argv: %s\n" % e)


def wait_start(spec):
    sys.stderr.write("sglang_demo: ready, pid %d, waiting for %s\n"
                     % (os.getpid(), "stdin EOF" if spec == "-" else spec))
    sys.stderr.flush()
    if spec == "-":
        while sys.stdin.read(65536):
            pass
        return
    while not os.path.exists(spec):
        time.sleep(0.01)


def make_server_args(a, layers, draft_steps, seed):
    from sglang.srt.server_args import ServerArgs
    return ServerArgs(
        tp_rank=a.tp_rank,
        disable_cuda_graph=(a.mode == "eager"),
        speculative_num_steps=draft_steps,
        decode_log_interval=a.log_interval,
        num_hidden_layers=layers,
        draft_num_hidden_layers=a.draft_layers,
        hidden_size=a.hidden,
        batch_size=a.batch_size,
        num_cycles=a.cycles,
        seed=seed,
        accept_prob=a.accept_prob,
        draft_sync=a.draft_sync,
        pause_at_cycle=a.pause_at_cycle,
        pause_file=a.pause_file,
    )


def warmup(cuda, kernels, stream, seconds):
    """--warmup-s: CUDA work that is no decode cycle (no cycle function on the stack)."""
    fn, ex = next(iter(kernels.table.values()))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            cuda.launch(fn, stream, ex)
        cuda.sync(stream)


def make_gpu(cuda, kernels, a, stream, draft_steps):
    """One thread's simulated-GPU context (+ TP group when --allreduce)."""
    from simkernels import SimGpu
    from sglang.srt.distributed.device_communicators.pynccl import PyNcclCommunicator
    from sglang.srt.distributed.parallel_state import GroupCoordinator
    nccl = fakecuda.Nccl(cuda, nranks=a.tp_size, rank=a.tp_rank) if a.allreduce else None
    if nccl is not None and a.straggle_us > 0 and a.tp_rank == a.tp_size - 1:
        nccl.straggle_fn = cuda.function("rank_straggle_kernel", a.straggle_us)
    gpu = SimGpu(cuda, kernels, stream, cuda.stream(), nccl=nccl, hidden=a.hidden,
                 max_tokens=a.batch_size * (draft_steps + 1))
    tp_group = GroupCoordinator(PyNcclCommunicator(gpu)) if nccl is not None else None
    return gpu, tp_group


class ExtraWorker(object):
    """--extra-thread: a second Python thread with its own, smaller EAGLEWorker, stream, CUDA
    graphs and communicator, running cycles concurrently with the scheduler thread."""

    def __init__(self, a, cuda, kernels):
        self.a = a
        self.cuda = cuda
        self.kernels = kernels
        self.layers = max(1, a.layers // 2)
        self.draft_steps = max(1, a.draft_steps - 1)
        self.ready = threading.Event()
        self.go = threading.Event()
        self.error = None
        self.tid = None
        self.cycles = 0
        self.tokens = 0
        self.wall_s = 0.0
        self.thread = threading.Thread(target=self.run, name="extra-worker")
        self.thread.daemon = True

    def run(self):
        try:
            with tag("other"):
                self._run()
        except BaseException as e:  # reported by the main thread
            self.error = e
            self.ready.set()

    def _run(self):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.tp_worker import TpModelWorker
        from sglang.srt.speculative.eagle_worker import EAGLEWorker
        a = self.a
        self.tid = threading.get_native_id()
        self.cuda.set_current()
        gpu, tp_group = make_gpu(self.cuda, self.kernels, a, self.cuda.stream(), self.draft_steps)
        sa = make_server_args(a, self.layers, self.draft_steps, a.seed + 1)
        target = TpModelWorker(sa, gpu, sa.num_hidden_layers, tp_group=tp_group)
        worker = EAGLEWorker(sa, gpu, target_worker=target)
        batch = ScheduleBatch.init_new(sa.batch_size, sa.prompt_len)
        self.ready.set()
        self.go.wait()
        t0 = time.perf_counter()
        for _ in range(a.cycles):
            result = worker.forward_batch_generation(batch)
            self.cycles += 1
            self.tokens += result.num_accepted_tokens + batch.batch_size()
        self.wall_s = time.perf_counter() - t0

    def start_and_wait_ready(self):
        self.thread.start()
        while not self.ready.wait(0.1):
            if not self.thread.is_alive():
                break
        if self.error is not None:
            raise self.error

    def summary(self):
        n = self.cycles * self.a.batch_size
        return {
            "tid": self.tid,
            "cycles": self.cycles,
            "tokens": self.tokens,
            "accept_len_mean": round(self.tokens / float(n), 4) if n else 0.0,
            "draft_steps": self.draft_steps,
            "layers": self.layers,
            "wall_s": round(self.wall_s, 4),
        }


def main(argv=None):
    a = parse_args(argv)
    if a.proctitle:
        set_proctitle(a.proctitle)
    children = []
    if a.tp_size > 1 and a.tp_rank == 0:
        # Ranks 1..N-1: the same command with their rank and title, started before this rank
        # initializes CUDA (as SGLang's launcher does).
        import subprocess
        os.environ["SPECPROF_DEMO_NCCL_UID"] = os.urandom(16).hex()
        base = list(argv if argv is not None else sys.argv[1:])
        for r in range(1, a.tp_size):
            children.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + base +
                                             ["--tp-rank", str(r), "--proctitle", "sglang::scheduler_TP%d" % r]))
    with tag("other"):
        rc = _main(a)
    for c in children:
        rc = rc or c.wait()
    return rc


def _main(a):
    if a.sleep_before_cuda > 0:
        time.sleep(a.sleep_before_cuda)

    from simkernels import Kernels
    from sglang.srt.model_executor.model_runner import set_stack_depth
    from sglang.srt.managers.scheduler import run_scheduler_process

    if a.self_check:
        import presetcheck
        presetcheck.install()
    cuda = fakecuda.Cuda(device=a.device, runtime=a.runtime_launch)
    if a.sleep_after_cuinit > 0:
        time.sleep(a.sleep_after_cuinit)
    kernels = Kernels(cuda, a.kernel_us)
    set_stack_depth(cuda, a.stack_depth)

    stream = fakecuda.LEGACY_STREAM if a.stream == "legacy" else cuda.stream()
    if a.warmup_s > 0:
        warmup(cuda, kernels, stream, a.warmup_s)
    gpu, tp_group = make_gpu(cuda, kernels, a, stream, a.draft_steps)
    if a.side_stream:
        gpu.side_stream = cuda.stream()
    server_args = make_server_args(a, a.layers, a.draft_steps, a.seed)

    extra = ExtraWorker(a, cuda, kernels) if a.extra_thread else None
    t = {}

    def on_ready(scheduler):
        if extra is not None:
            extra.start_and_wait_ready()
        if a.wait_start:
            wait_start(a.wait_start)
        if extra is not None:
            extra.go.set()
        t["t0"] = time.perf_counter()

    scheduler = run_scheduler_process(server_args, gpu, tp_group, on_ready=on_ready)
    wall = time.perf_counter() - t["t0"]
    if extra is not None:
        extra.thread.join()
        if extra.error is not None:
            raise extra.error

    worker = scheduler.draft_worker
    tokens = sum(n + 1 for row in worker.accept_table[:worker.verify_ct] for n in row)
    n = worker.verify_ct * a.batch_size
    accept_len = tokens / float(n) if n else 0.0
    summary = {
        "cycles": scheduler.forward_ct_decode,
        "tokens": tokens,
        "accept_len_mean": round(accept_len, 4),
        "accept_rate": round(accept_len / (a.draft_steps + 1), 4),
        "mode": a.mode,
        "draft_steps": a.draft_steps,
        "layers": a.layers,
        "draft_layers": a.draft_layers,
        "batch_size": a.batch_size,
        "kernel_us": a.kernel_us,
        "allreduce": a.allreduce,
        "stack_depth": a.stack_depth,
        "stream": a.stream,
        "wall_s": round(wall, 4),
        "gen_throughput": round(tokens / wall, 2) if wall > 0 else 0.0,
        "pid": os.getpid(),
        "tid": threading.get_native_id(),
        "sim": cuda.sim,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "extra_thread": extra.summary() if extra is not None else None,
        "calls": fakecuda.call_counts(),
    }
    if a.self_check:
        import presetcheck
        summary["self_check"] = presetcheck.report()
    sys.stdout.write(json.dumps(summary, sort_keys=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    if a.sleep_at_exit > 0:
        time.sleep(a.sleep_at_exit)
    if a.self_check and summary["self_check"]["mismatches"]:
        sys.stderr.write("sglang_demo: --self-check: %d calls whose tag differs from the "
                         "preset's phase\n" % summary["self_check"]["mismatches"])
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
