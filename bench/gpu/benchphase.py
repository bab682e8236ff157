"""Helpers shared by the GPU benchmark workloads (bench/gpu/hf_assisted.py and
bench/gpu/spec_loop.py --worker sglang) and the suite (bench/gpu/suite.py).

- `Phases`: the in-workload ways of timing phases that the benchmark compares with specprof:
    none            nothing (methods a, b, c: plain run, specprof eBPF only, specprof full);
    v3              wall-clock timers with torch.cuda.synchronize() at both ends of a phase
                    (the seeds' "v3" profiler, method e);
    v4              wall-clock timers without synchronisation (the seeds' "v4", method f);
    cuda-events     a CUDA event recorded at both ends of a phase, read after the loop: the
                    GPU-side ground truth (method g, a separate run);
    torch-profiler  torch.profiler.record_function ranges around the phases, the loop inside
                    torch.profiler.profile(CPU + CUDA) (method d); kernel times per phase come
                    from the exported Chrome trace (`aggregate_chrome_trace`).
- `aggregate_chrome_trace`: GPU time per record_function range from a torch.profiler trace.
- `token_hash`, `write_result`: the figures every workload reports.

This file imports torch only when a mode needs it, and no specprof preset matches its path, so
its frames never name a phase. Standard library only otherwise (Python >= 3.8).
"""

import bisect
import hashlib
import json
import os
import time

MODES = ("none", "v3", "v4", "cuda-events", "torch-profiler")

# What each mode reports per phase, as written into the result file ("phase_metric").
MODE_METRIC = {
    "v3": "wall_sync",
    "v4": "wall",
    "cuda-events": "gpu_elapsed",
    "torch-profiler": "profiler",
}


class _Null:
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


NULL_SPAN = _Null()


class _Span:
    __slots__ = ("ph", "name")

    def __init__(self, ph, name):
        self.ph = ph
        self.name = name

    def __enter__(self):
        self.ph.begin(self.name)
        return None

    def __exit__(self, *exc):
        self.ph.end(self.name)
        return False


class Phases:
    """Times named phases with one of MODES. Spans of one name must not nest."""

    def __init__(self, mode, torch_module=None):
        if mode not in MODES:
            raise ValueError("timing mode %r: want one of %s" % (mode, ", ".join(MODES)))
        self.mode = mode
        self.enabled = mode != "none"
        self.torch = torch_module
        if self.torch is None and mode in ("v3", "cuda-events", "torch-profiler"):
            import torch  # noqa: deferred on purpose
            self.torch = torch
        self.reset()

    def reset(self):
        self._open = {}
        self._acc = {}      # name -> [count, total ns]   (v3, v4, torch-profiler: count only)
        self._events = []   # (name, start event, end event)   (cuda-events)

    def span(self, name):
        if not self.enabled:
            return NULL_SPAN
        return _Span(self, name)

    def begin(self, name):
        m = self.mode
        if m == "none":
            return
        if m == "v3":
            self.torch.cuda.synchronize()
            self._open[name] = time.perf_counter_ns()
        elif m == "v4":
            self._open[name] = time.perf_counter_ns()
        elif m == "cuda-events":
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            self._open[name] = ev
        elif m == "torch-profiler":
            rf = self.torch.profiler.record_function(name)
            rf.__enter__()
            self._open[name] = rf

    def end(self, name):
        m = self.mode
        if m == "none":
            return
        start = self._open.pop(name, None)
        if start is None:
            return
        if m == "v3":
            self.torch.cuda.synchronize()
            self._add(name, time.perf_counter_ns() - start)
        elif m == "v4":
            self._add(name, time.perf_counter_ns() - start)
        elif m == "cuda-events":
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events.append((name, start, ev))
        elif m == "torch-profiler":
            start.__exit__(None, None, None)
            self._add(name, 0)

    def _add(self, name, ns):
        acc = self._acc.get(name)
        if acc is None:
            acc = self._acc[name] = [0, 0]
        acc[0] += 1
        acc[1] += ns

    def summary(self):
        """{phase: {"n": occurrences, "mean_ms": mean per occurrence, "total_ms": sum}}; for
        torch-profiler only the counts (the times come from the trace)."""
        out = {}
        if self.mode == "cuda-events":
            if self._events:
                self.torch.cuda.synchronize()
            per = {}
            for name, e0, e1 in self._events:
                per.setdefault(name, []).append(float(e0.elapsed_time(e1)))
            for name, v in per.items():
                out[name] = {"n": len(v), "mean_ms": sum(v) / len(v), "total_ms": sum(v)}
            return out
        for name, (n, ns) in self._acc.items():
            if self.mode == "torch-profiler":
                out[name] = {"n": n}
            else:
                out[name] = {"n": n, "mean_ms": ns / n / 1e6 if n else 0.0, "total_ms": ns / 1e6}
        return out


def _union_ns(intervals):
    total = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def aggregate_chrome_trace(trace, names):
    """GPU work per record_function range in a torch.profiler Chrome trace (kineto format).

    trace: a path, or the already-parsed JSON (dict with "traceEvents", or a list of events).
    names: the range names to report (e.g. {"spec.draft", "spec.verify"}).

    Every GPU record (kernel, memcpy, memset) is joined to the runtime/driver API call with the
    same "correlation" arg, and given to the innermost range instance (cat "user_annotation")
    that contains that call's start. Per range instance: kernel time sum, GPU span (first start
    to last end) and GPU busy time (union of intervals). Per name: the mean over the instances
    that launched GPU work. Times in ms (the trace is in µs).
    """
    if isinstance(trace, (str, bytes, os.PathLike)):
        with open(trace) as f:
            trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    names = set(names)
    ann = []        # (start, end, name)
    launch_ts = {}  # correlation -> call start
    gpu = []        # (start, end, correlation)
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        try:
            ts = float(e.get("ts", 0.0))
            dur = float(e.get("dur", 0.0))
        except (TypeError, ValueError):
            continue
        if cat == "user_annotation":
            if e.get("name") in names:
                ann.append((ts, ts + dur, e.get("name")))
            continue
        args = e.get("args") or {}
        corr = args.get("correlation")
        if cat in LAUNCH_CATS:
            if corr is not None:
                prev = launch_ts.get(corr)
                if prev is None or ts < prev:
                    launch_ts[corr] = ts
        elif cat in GPU_CATS:
            gpu.append((ts, ts + dur, corr))
    ann.sort()
    starts = [a[0] for a in ann]
    per_inst = {}  # ann index -> [kernel_us, first, last, intervals]
    unjoined = outside = 0
    for s, e, corr in gpu:
        t = launch_ts.get(corr) if corr is not None else None
        if t is None:
            unjoined += 1
            continue
        i = bisect.bisect_right(starts, t) - 1
        hit = None
        # Innermost containing range: the latest start <= t whose end >= t (ranges nest).
        j = i
        while j >= 0 and i - j < 8:
            if ann[j][1] >= t:
                hit = j
                break
            j -= 1
        if hit is None:
            outside += 1
            continue
        acc = per_inst.get(hit)
        if acc is None:
            acc = per_inst[hit] = [0.0, s, e, []]
        acc[0] += e - s
        acc[1] = min(acc[1], s)
        acc[2] = max(acc[2], e)
        acc[3].append((s, e))
    out = {}
    for idx, (_, _, name) in enumerate(ann):
        d = out.setdefault(name, {"n": 0, "n_gpu": 0, "gpu_kernel_ms": 0.0, "gpu_span_ms": 0.0,
                                  "gpu_busy_ms": 0.0})
        d["n"] += 1
        acc = per_inst.get(idx)
        if acc is None:
            continue
        d["n_gpu"] += 1
        d["gpu_kernel_ms"] += acc[0] / 1e3
        d["gpu_span_ms"] += (acc[2] - acc[1]) / 1e3
        d["gpu_busy_ms"] += _union_ns(acc[3]) / 1e3
    for d in out.values():
        k = d["n_gpu"] or 1
        for key in ("gpu_kernel_ms", "gpu_span_ms", "gpu_busy_ms"):
            d[key] /= k
    return {"phases": out, "gpu_records": len(gpu), "unjoined": unjoined,
            "outside_ranges": outside}


def token_hash(tokens):
    """A short stable hash of a sequence of token ids (ints)."""
    h = hashlib.sha256(",".join(str(int(t)) for t in tokens).encode())
    return h.hexdigest()[:16]


def write_result(path, obj):
    """Writes the workload's result JSON atomically (and prints it as the last stdout line)."""
    text = json.dumps(obj, sort_keys=True)
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    print(text, flush=True)


def calibrate_scale(measure, want, lo=1e-4, hi=1.0, iters=10, log=None):
    """Finds s with measure(s) close to want, for a measure that falls from ~1 at s -> 0
    (agreement of draft and target as the target's extra layers get stronger). Log-space
    bisection; returns (s, measure(s)) of the closest point tried."""
    p_hi = measure(hi)
    if log:
        log("calibrate: scale %.4g -> agreement %.3f" % (hi, p_hi))
    k = 0
    while p_hi > want and k < 5:
        lo, hi = hi, hi * 4
        p_hi = measure(hi)
        if log:
            log("calibrate: scale %.4g -> agreement %.3f" % (hi, p_hi))
        k += 1
    best = (abs(p_hi - want), hi, p_hi)
    for _ in range(iters):
        mid = (lo * hi) ** 0.5
        p = measure(mid)
        if log:
            log("calibrate: scale %.4g -> agreement %.3f" % (mid, p))
        if abs(p - want) < best[0]:
            best = (abs(p - want), mid, p)
        if p > want:
            lo = mid
        else:
            hi = mid
    return best[1], best[2]
