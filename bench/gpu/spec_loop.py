"""A small speculative-decoding loop in PyTorch for checking specprof on a real GPU.

Draft model: a 2-layer MLP language model; target: an 8-layer one (bf16, random weights,
fixed seed, greedy). Each cycle: draft K tokens (eager launches or one CUDA graph replay),
verify them with the target (eager or a CUDA graph replay), accept (a greedy match read back to
the host: a blocking copy), then a draft catch-up forward ("draft_extend").

The oracle: every phase method records its [start, end] on time.monotonic_ns() (CLOCK_MONOTONIC,
the clock of bpf_ktime_get_ns) per thread, written as JSON at exit (--windows FILE). Nothing in
the loop synchronises for the sake of measurement. Phase names are matched by
bench/gpu/spec_loop.yaml.

--worker sglang: the benchmark suite's EAGLE loop (bench/gpu/suite.py). The worker is
bench/gpu/sglang/srt/speculative/eagle_worker.py, with SGLang's file layout and qualified names
(EAGLEWorker.draft / verify / forward_draft_extend_after_decode, EagleVerifyInput.verify, the
graph runners), so specprof's built-in sglang-eagle preset names its phases; the process retitles
itself sglang::scheduler_TP0 like an SGLang scheduler. The models (bench/gpu/speclm.py) are a
~0.4 B draft and a ~1 B target built from it, calibrated to a realistic acceptance (about 2.8
tokens per cycle with 4 draft steps). --timing picks how the loop times its own phases (the
compared methods: none, v3, v4, cuda-events, torch-profiler; see benchphase.py). It writes one
JSON result (--result): tok/s, accept length, tokens and their hash, cycle time, per-phase times.

--worker sglang --tp-size N: tensor parallelism over N GPUs, one process per GPU as SGLang runs it
(titles sglang::scheduler_TP0 .. TP{N-1}; torch.distributed with NCCL). The command started is a
launcher: it starts the ranks (this script with --tp-rank R, GPU R), waits for them and writes one
result with every rank's (their tokens must be equal). Each rank shards the draft and the target
(speclm.shard_tp: an all-reduce per block). --nccl-perf adds an all_reduce_perf-style measurement
after the loop, with torch.distributed in the same processes: back-to-back all-reduces of the
loop's message sizes (and a sweep up to 256 MiB), timed with CUDA events, with NCCL's algbw/busbw.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), as the shared H200 hosts require.
"""

import argparse
import json
import os
import sys
import threading
import time


def _early_proctitle(argv):
    """--worker sglang: take SGLang's scheduler title before torch (and libcuda) load."""
    worker = None
    title = "sglang::scheduler_TP0"
    tp_size, tp_rank = 1, None
    for i, arg in enumerate(argv):
        if arg.startswith("--tp-size") or arg.startswith("--tp-rank"):
            val = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            if arg.startswith("--tp-size"):
                tp_size = int(val) if val.isdigit() else 1
            else:
                tp_rank = val
        if arg == "--worker" and i + 1 < len(argv):
            worker = argv[i + 1]
        elif arg.startswith("--worker="):
            worker = arg.split("=", 1)[1]
        elif arg == "--proctitle" and i + 1 < len(argv):
            title = argv[i + 1]
        elif arg.startswith("--proctitle="):
            title = arg.split("=", 1)[1]
    if tp_size > 1 and tp_rank is None:
        return  # the tensor-parallel launcher: its ranks take the titles
    if worker == "sglang" and title and "--help" not in argv and "-h" not in argv:
        set_proctitle(title)


def set_proctitle(title):
    """Like setproctitle: comm via prctl(PR_SET_NAME) and the argv area /proc/PID/cmdline shows,
    overwritten in place (as testdata/workloads/sglang_demo.py does). Best effort."""
    import ctypes
    raw = title.encode()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(raw[:15]), 0, 0, 0)  # PR_SET_NAME
    except Exception as e:  # pragma: no cover
        sys.stderr.write("spec_loop: prctl(PR_SET_NAME): %s\n" % e)
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
        sys.stderr.write("spec_loop: rewriting argv: %s\n" % e)


if __name__ == "__main__":
    _early_proctitle(sys.argv[1:])

import torch  # noqa: E402

WINDOWS = []
EVENTS = []  # (phase, start event, end event, parent index) when --cuda-events: the ground truth run
OPEN = []  # indexes into EVENTS of the windows open on this thread, outermost first
CUDA_EVENTS = False


def window(name):
    def deco(fn):
        def wrapped(*a, **k):
            t0 = time.monotonic_ns()
            if CUDA_EVENTS:
                ev0 = torch.cuda.Event(enable_timing=True)
                ev0.record()
                EVENTS.append([name, ev0, None, OPEN[-1] if OPEN else -1])
                OPEN.append(len(EVENTS) - 1)
            try:
                return fn(*a, **k)
            finally:
                if CUDA_EVENTS:
                    ev1 = torch.cuda.Event(enable_timing=True)
                    ev1.record()
                    EVENTS[OPEN.pop()][2] = ev1
                WINDOWS.append((name, threading.get_native_id(), t0, time.monotonic_ns()))
        wrapped.__name__ = fn.__name__
        wrapped.__qualname__ = fn.__qualname__ + ".<timed>"
        return wrapped
    return deco


class MLPLM(torch.nn.Module):
    def __init__(self, vocab, hidden, layers):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(hidden, hidden) for _ in range(layers)])
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids):
        h = self.emb(ids)
        for l in self.layers:
            h = h + torch.nn.functional.gelu(l(h))
        return self.head(h)


class SpecWorker:
    def __init__(self, steps, graphs):
        torch.manual_seed(0)
        dev = "cuda"
        self.steps = steps
        self.draft_model = MLPLM(4096, 256, 2).to(dev, torch.bfloat16).eval()
        self.target_model = MLPLM(4096, 1024, 8).to(dev, torch.bfloat16).eval()
        self.tokens = torch.zeros(1, dtype=torch.long, device=dev)
        self.cand = torch.zeros(steps, dtype=torch.long, device=dev)
        self.graphs = graphs
        if graphs:
            self._capture()

    def _draft_steps(self):
        t = self.tokens
        for i in range(self.steps):
            t = self.draft_model(t).argmax(-1)
            self.cand[i:i + 1].copy_(t)
        return self.cand

    def _target(self):
        return self.target_model(self.cand).argmax(-1)

    def _capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._draft_steps()
                self._target()
        torch.cuda.current_stream().wait_stream(s)
        self.g_draft = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g_draft):
            self._draft_steps()
        self.g_target = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g_target):
            self.target_out = self._target()

    @window("spec.draft")
    def draft(self):
        if self.graphs:
            self.g_draft.replay()
        else:
            self._draft_steps()

    @window("spec.verify")
    def verify(self):
        if self.graphs:
            self.g_target.replay()
            out = self.target_out
        else:
            out = self._target()
        return self.accept(out)

    @window("spec.accept")
    def accept(self, out):
        match = (out[:-1] == self.cand[1:]).int().cumprod(0).sum()
        n = int(match.item()) + 1  # blocking device-to-host copy
        self.tokens.copy_(out[n - 1:n])
        return n

    @window("spec.draft_extend")
    def draft_extend(self, n):
        self.draft_model(self.tokens)

    def forward_batch_generation(self):
        self.draft()
        n = self.verify()
        self.draft_extend(n)
        return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=["spec", "sglang"], default="spec",
                    help="spec: the SpecWorker loop (rules bench/gpu/spec_loop.yaml; bench/gpu/run.sh); "
                         "sglang: the SGLang-shaped EAGLE loop of the benchmark suite (preset sglang-eagle)")
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--graphs", choices=["on", "off"], default="on")
    ap.add_argument("--windows", default="")
    ap.add_argument("--profile", action="store_true",
                    help="count the loop's kernels with torch.profiler (--worker sglang: --timing torch-profiler)")
    ap.add_argument("--cuda-events", action="store_true",
                    help="ground truth: CUDA events around each phase, mean GPU ms per phase per cycle "
                         "(--worker sglang: --timing cuda-events)")
    g = ap.add_argument_group("--worker sglang")
    g.add_argument("--timing", default="none",
                   choices=["none", "v3", "v4", "cuda-events", "torch-profiler"],
                   help="how the loop times its own phases (bench/gpu/benchphase.py)")
    g.add_argument("--result", default="", help="write the result JSON here (also printed)")
    g.add_argument("--noise-scale", type=float, default=None,
                   help="strength of the target's extra blocks (default: calibrate to --target-agree)")
    g.add_argument("--target-agree", type=float, default=0.7,
                   help="per-token draft/target agreement to calibrate to")
    g.add_argument("--calibrate-only", action="store_true", help="calibrate, write the scale, exit")
    g.add_argument("--warmup", type=int, default=10, help="cycles before the measured loop")
    g.add_argument("--time-tolist", action="store_true",
                   help="time each accept's .tolist() (the blocking copy) on CLOCK_MONOTONIC: the "
                        "truth for specprof's sync wait in accept (result: tolist_ns)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--vocab", type=int, default=32000)
    g.add_argument("--hidden", type=int, default=4096)
    g.add_argument("--ffn", type=int, default=11008)
    g.add_argument("--draft-blocks", type=int, default=1)
    g.add_argument("--target-extra-blocks", type=int, default=7)
    g.add_argument("--max-pos", type=int, default=8192)
    g.add_argument("--proctitle", default="sglang::scheduler_TP0",
                   help="process title (set before torch loads; '' keeps the command line)")
    g.add_argument("--trace-dir", default="", help="torch-profiler: where the Chrome trace goes (default: a temp dir)")
    g.add_argument("--keep-trace", action="store_true", help="torch-profiler: keep the Chrome trace")
    g.add_argument("--tp-size", type=int, default=1, help="tensor-parallel ranks (one GPU each)")
    g.add_argument("--tp-rank", type=int, default=None, help=argparse.SUPPRESS)
    g.add_argument("--master-port", type=int, default=29517, help="torch.distributed rendezvous port")
    g.add_argument("--tp-dist", action="store_true",
                   help="run as a tensor-parallel rank even with --tp-size 1 (torch.distributed over one GPU, "
                        "an all-reduce per block): checks the distributed path on a single-GPU host")
    g.add_argument("--hang-dump-s", type=float, default=0,
                   help="with --tp-size: a rank still running after this many seconds prints every thread's "
                        "Python stack and exits (faulthandler), so a hung collective shows where")
    g.add_argument("--nccl-perf", action="store_true",
                   help="with --tp-size: time back-to-back all-reduces after the loop (all_reduce_perf-style)")
    args = ap.parse_args()
    if args.worker == "sglang" and args.tp_size > 1 and args.tp_rank is None:
        return launch_tp(args)
    if args.worker == "sglang":
        return run_sglang(args)
    global CUDA_EVENTS
    with torch.inference_mode():
        w = SpecWorker(args.steps, args.graphs == "on")
        for _ in range(5):
            w.forward_batch_generation()
        torch.cuda.synchronize()
        WINDOWS.clear()
        CUDA_EVENTS = args.cuda_events
        toks = 0
        prof = None
        if args.profile:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        t0 = time.monotonic()
        for _ in range(args.cycles):
            toks += w.forward_batch_generation()
        torch.cuda.synchronize()
        dt = time.monotonic() - t0
    out = {"cycles": args.cycles, "tokens": toks, "tok_s": toks / dt, "graphs": args.graphs}
    if args.cuda_events:
        torch.cuda.synchronize()
        # Exclusive times, like specprof's phases (the innermost rule): a window nested in
        # another (accept inside verify) is subtracted from its parent.
        ms = [e0.elapsed_time(e1) for _, e0, e1, _ in EVENTS]
        excl = list(ms)
        for i, (_, _, _, parent) in enumerate(EVENTS):
            if parent >= 0:
                excl[parent] -= ms[i]
        per = {}
        for i, (name, _, _, _) in enumerate(EVENTS):
            per.setdefault(name, []).append(excl[i])
        out["cuda_event_ms"] = {k: sum(v) / len(v) for k, v in per.items()}
    if prof is not None:
        prof.__exit__(None, None, None)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset"))]
        out["profiler_kernels"] = len(kernels)
        # What the profiler lists besides kernels, by name (copies and sets inside CUDA graphs
        # are named differently from eager ones): CUPTI reports those as copies, not kernels.
        names = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                names[e.name] = names.get(e.name, 0) + 1
        out["profiler_names"] = dict(sorted(names.items(), key=lambda kv: -kv[1])[:40])
    print(json.dumps(out))
    if args.windows:
        with open(args.windows, "w") as f:
            json.dump(WINDOWS, f)


SGLANG_PHASES = ("spec.draft", "spec.verify", "spec.accept", "spec.draft_extend")


def _log(msg):
    sys.stderr.write("[spec_loop] %s\n" % msg)
    sys.stderr.flush()


def run_sglang(args):
    """The benchmark suite's EAGLE loop (see the module docstring)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import benchphase
    import speclm
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    timing = args.timing
    if args.cuda_events:
        timing = "cuda-events"
    if args.profile:
        timing = "torch-profiler"
    notes = []
    if args.windows:
        notes.append("--windows is ignored with --worker sglang")
    workload = "eagle-" + ("graph" if args.graphs == "on" else "eager")
    tp, rank = args.tp_size, args.tp_rank or 0
    dist_on = tp > 1 or args.tp_dist  # torch.distributed and sharded models (a rank of --tp-size)
    if dist_on:
        workload += "-tp%d" % tp
    res = {"workload": workload, "ok": False, "timing": timing, "graphs": args.graphs,
           "steps": args.steps, "pid": os.getpid(), "notes": notes, "tp_size": tp, "tp_rank": rank}
    t_start = time.monotonic()
    torch.manual_seed(args.seed)
    dev = "cuda"
    if dist_on:
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.master_port or 29517))
        if args.hang_dump_s > 0:
            import faulthandler
            faulthandler.dump_traceback_later(args.hang_dump_s, exit=True)
        _log("rank %d of %d: pid %d, GPU %d" % (rank, tp, os.getpid(), rank))
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=tp, device_id=torch.device("cuda", rank))
        dist.all_reduce(torch.zeros(1, device=dev))  # the communicator, before any capture
        torch.cuda.synchronize()
        _log("rank %d: communicator up" % rank)
    # Built outside inference mode (ordinary parameters, set in place under no_grad), run inside.
    draft, target, noise = speclm.build_pair(
        args.vocab, args.hidden, args.ffn, args.draft_blocks, args.target_extra_blocks,
        args.max_pos, args.seed, device=dev)
    with torch.inference_mode():
        n_draft = sum(p.numel() for p in draft.parameters())
        n_target = sum(p.numel() for p in target.parameters())
        _log("draft %.2f B parameters, target %.2f B (bf16), %s" % (n_draft / 1e9, n_target / 1e9, workload))

        def measure(scale):
            speclm.set_scale(noise, scale)
            return speclm.agreement(draft, target, args.vocab, args.max_pos, device=dev)

        if args.noise_scale is None or args.calibrate_only:
            scale, agree = benchphase.calibrate_scale(measure, args.target_agree, log=_log)
        else:
            scale = args.noise_scale
            agree = None
        speclm.set_scale(noise, scale)
        if agree is None:
            agree = speclm.agreement(draft, target, args.vocab, args.max_pos, device=dev)
        res.update(noise_scale=scale, agreement=agree, draft_params=n_draft, target_params=n_target)
        _log("noise scale %.6g, draft/target agreement %.3f" % (scale, agree))
        if dist_on and not args.calibrate_only:
            # Calibrated on the whole models (no collectives, the same on every rank), then sharded.
            speclm.shard_tp(draft, rank, tp, force=True)
            speclm.shard_tp(target, rank, tp, force=True)
            res["agreement_tp"] = speclm.agreement(draft, target, args.vocab, args.max_pos, device=dev)
            res["allreduce_bytes"] = {"draft_step": args.hidden * 2, "verify": (args.steps + 1) * args.hidden * 2,
                                      "draft_extend": (args.steps + 1) * args.hidden * 2}
            _log("rank %d of %d: sharded, agreement %.3f" % (rank, tp, res["agreement_tp"]))
        if args.calibrate_only:
            res["ok"] = True
            res["setup_s"] = time.monotonic() - t_start
            benchphase.write_result(args.result, res)
            return

        ph = benchphase.Phases(timing, torch)
        w = EAGLEWorker(draft, target, args.steps, ph)
        if args.graphs == "on":
            w.init_cuda_graphs()
            if dist_on:
                _log("rank %d: CUDA graphs captured" % rank)
        w.reset()
        for _ in range(args.warmup):
            w.forward_batch_generation()
        torch.cuda.synchronize()
        ph.reset()
        if getattr(args, "time_tolist", False):
            w.tolist_ns = []
        n0 = len(w.output_ids)
        c0 = len(w.accept_lengths)
        prof = None
        if timing == "torch-profiler":
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        res["setup_s"] = time.monotonic() - t_start
        t0 = time.perf_counter()
        loop_mono0 = time.monotonic_ns()  # CLOCK_MONOTONIC, specprof's clock: its cycles in the loop
        for _ in range(args.cycles):
            w.forward_batch_generation()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        res["loop_mono_ns"] = [loop_mono0, time.monotonic_ns()]
        phases = ph.summary()
        if prof is not None:
            t1 = time.monotonic()
            prof.__exit__(None, None, None)
            trace_dir = args.trace_dir or __import__("tempfile").gettempdir()
            path = os.path.join(trace_dir, "spec_loop-trace-%d.json" % os.getpid())
            prof.export_chrome_trace(path)
            try:
                res["profiler"] = benchphase.aggregate_chrome_trace(path, SGLANG_PHASES)
            finally:
                if not args.keep_trace:
                    os.remove(path)
                else:
                    res["profiler_trace"] = path
            res["profiler_post_s"] = time.monotonic() - t1
    toks = w.output_ids[n0:]
    cycles = len(w.accept_lengths) - c0
    if dist_on and args.nccl_perf:
        sizes = sorted(set(res["allreduce_bytes"].values())) + [1 << 16, 1 << 19, 1 << 22, 1 << 25, 1 << 28]
        res["nccl_perf"] = nccl_perf(sizes, tp)
    # No destroy_process_group(): after NCCL work was captured in a CUDA graph it can hang in
    # ncclCommDestroy (pytorch/pytorch#115388); a rank leaves with os._exit once its result is out.
    res.update(
        ok=True, cycles=cycles, tokens=len(toks), token_hash=benchphase.token_hash(toks),
        loop_s=dt, tok_s=len(toks) / dt, cycle_ms=dt / cycles * 1e3 if cycles else None,
        accept_len=len(toks) / cycles if cycles else None,
        phases=phases, phase_metric=benchphase.MODE_METRIC.get(timing),
        tolist_ns=w.tolist_ns,
        versions={"torch": torch.__version__, "cuda": torch.version.cuda,
                  "device": torch.cuda.get_device_name(), "python": sys.version.split()[0]},
    )
    # SGLang's decode log line (specprof run parses accept len and throughput from it).
    print("[%s TP%d] Decode batch, #running-req: 1, #token: %d, token usage: 0.00, accept len: %.2f, "
          "accept rate: %.2f, cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: 0, "
          % (time.strftime("%Y-%m-%d %H:%M:%S"), rank, len(w.output_ids), res["accept_len"] or 0.0,
             ((res["accept_len"] or 1.0) - 1.0) / args.steps, args.graphs == "on", res["tok_s"]),
          flush=True)
    _log("%d cycles, %d tokens, %.1f tok/s, accept length %.3f, cycle %.3f ms"
         % (cycles, len(toks), res["tok_s"], res["accept_len"] or 0.0, res["cycle_ms"] or 0.0))
    benchphase.write_result(args.result, res)
    if dist_on:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def nccl_perf(sizes, world):
    """all_reduce_perf-style: per size, back-to-back in-place bf16 sum all-reduces on the
    default process group, timed with CUDA events on the current stream (after warm-up and a
    barrier); algbw = bytes / time, busbw = algbw x 2(n-1)/n (NCCL's PERFORMANCE.md)."""
    import torch.distributed as dist
    out = []
    for nbytes in sizes:
        iters = 200 if nbytes <= (1 << 22) else 40
        x = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(10):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            dist.all_reduce(x)
        e1.record()
        torch.cuda.synchronize()
        us = e0.elapsed_time(e1) * 1e3 / iters
        alg = nbytes / (us * 1e-6) / 1e9
        row = {"bytes": nbytes, "iters": iters, "time_us": us, "algbw_gbps": alg,
               "busbw_gbps": alg * 2 * (world - 1) / world}
        # The same all-reduces captured in one CUDA graph and replayed: GPU time per operation
        # without the CPU's launch cost between them (all_reduce_perf -G); for small sizes the
        # eager loop above measures mostly the CPU.
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(iters):
                    dist.all_reduce(x)
            g.replay()
            torch.cuda.synchronize()
            dist.barrier()
            e0.record()
            g.replay()
            e1.record()
            torch.cuda.synchronize()
            gus = e0.elapsed_time(e1) * 1e3 / iters
            galg = nbytes / (gus * 1e-6) / 1e9
            row.update({"graph_time_us": gus, "graph_busbw_gbps": galg * 2 * (world - 1) / world})
            del g
        except Exception as e:  # noqa: a process group that cannot be captured: eager figures only
            row["graph_error"] = str(e)[:200]
        out.append(row)
    return out


def launch_tp(args):
    """Starts the --tp-size ranks (this script with --tp-rank R) as SGLang's launcher does, waits,
    and writes one result holding every rank's."""
    import socket
    import subprocess
    import tempfile
    n = args.tp_size
    port = args.master_port
    if port == 0:
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n),
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    tmp = tempfile.mkdtemp(prefix="spec_loop_tp")
    procs, paths = [], []
    for r in range(n):
        path = os.path.join(tmp, "rank%d.json" % r)
        paths.append(path)
        cmd = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + [
            "--tp-rank", str(r), "--proctitle", "sglang::scheduler_TP%d" % r, "--result", path]
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                      stdout=subprocess.DEVNULL if r else None))
    import signal

    def stop(signum, frame):  # the caller gave up: take the ranks along
        for q in procs:
            if q.poll() is None:
                q.kill()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    rcs = [None] * n
    all_written = None
    while any(rc is None for rc in rcs):
        for i, p in enumerate(procs):
            if rcs[i] is None:
                rcs[i] = p.poll()
                if rcs[i] not in (None, 0):  # one rank failed: the others would wait forever
                    for q in procs:
                        if q.poll() is None:
                            q.kill()
        if all_written is None and all(os.path.exists(x) for x in paths):
            all_written = time.monotonic()
        if all_written is not None and time.monotonic() - all_written > 20:
            _log("ranks still running 20 s after writing their results: killed")
            for i, q in enumerate(procs):
                if q.poll() is None:
                    q.kill()
                    q.wait()
                    rcs[i] = 0  # its result is complete
        time.sleep(0.05)
    ranks = []
    for path in paths:
        try:
            with open(path) as f:
                ranks.append(json.load(f))
        except (OSError, ValueError) as e:
            ranks.append({"ok": False, "error": "no result: %s" % e})
    res = dict(ranks[0]) if ranks[0].get("ok") else {"ok": False}
    hashes = {r.get("token_hash") for r in ranks}
    res.update(ok=all(r.get("ok") for r in ranks) and all(rc == 0 for rc in rcs) and len(hashes) == 1,
               rank_rc=rcs, tokens_equal_across_ranks=len(hashes) == 1,
               ranks=[{k: r.get(k) for k in ("tp_rank", "pid", "ok", "tok_s", "cycle_ms", "token_hash",
                                             "agreement_tp", "loop_mono_ns", "nccl_perf", "error")}
                      for r in ranks])
    res.pop("nccl_perf", None)
    import benchphase
    benchphase.write_result(args.result, res)
    if not res["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
