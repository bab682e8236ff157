"""A small speculative-decoding loop in PyTorch for checking specprof on a real GPU.

Draft model: a 2-layer MLP language model; target: an 8-layer one (bf16, random weights,
fixed seed, greedy). Each cycle: draft K tokens (eager launches or one CUDA graph replay),
verify them with the target (eager or a CUDA graph replay), accept (a greedy match read back to
the host: a blocking copy), then a draft catch-up forward ("draft_extend").

The oracle: every phase method records its [start, end] on time.monotonic_ns() (CLOCK_MONOTONIC,
the clock of bpf_ktime_get_ns) per thread, written as JSON at exit (--windows FILE). Nothing in
the loop synchronises for the sake of measurement. Phase names are matched by
bench/gpu/spec_loop.yaml.
"""

import argparse
import json
import threading
import time

import torch

WINDOWS = []
EVENTS = []  # (phase, start event, end event) when --cuda-events: the ground truth run
CUDA_EVENTS = False


def window(name):
    def deco(fn):
        def wrapped(*a, **k):
            t0 = time.monotonic_ns()
            if CUDA_EVENTS:
                ev0 = torch.cuda.Event(enable_timing=True)
                ev0.record()
            try:
                return fn(*a, **k)
            finally:
                if CUDA_EVENTS:
                    ev1 = torch.cuda.Event(enable_timing=True)
                    ev1.record()
                    EVENTS.append((name, ev0, ev1))
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
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--graphs", choices=["on", "off"], default="on")
    ap.add_argument("--windows", default="")
    ap.add_argument("--profile", action="store_true", help="count the loop's kernels with torch.profiler")
    ap.add_argument("--cuda-events", action="store_true",
                    help="ground truth: CUDA events around each phase, mean GPU ms per phase per cycle")
    args = ap.parse_args()
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
        per = {}
        for name, e0, e1 in EVENTS:
            per.setdefault(name, []).append(e0.elapsed_time(e1))
        out["cuda_event_ms"] = {k: sum(v) / len(v) for k, v in per.items()}
    if prof is not None:
        prof.__exit__(None, None, None)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset"))]
        out["profiler_kernels"] = len(kernels)
    print(json.dumps(out))
    if args.windows:
        with open(args.windows, "w") as f:
            json.dump(WINDOWS, f)


if __name__ == "__main__":
    main()
