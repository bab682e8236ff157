"""What one eager kernel launch costs the application thread under each way of profiling it.

A CPU-bound loop of tiny launches (torch `x.add_(1)` on a one-element CUDA tensor, the GPU far
ahead of the CPU), timed in rounds from a Python stack of a chosen depth. Run it once per method,
alternated, in separate processes:

    none       python3 launchcost.py
    ebpf       specprof run --cupti off ... -- python3 launchcost.py
    full       specprof run --cupti on  ... -- python3 launchcost.py
    torchprof  python3 launchcost.py --torch-profiler   (the loop inside torch.profiler.profile)

The per-launch difference against `none` times a workload's launches per cycle (specprof reports
them per phase) gives that method's cost on the workload, without the workload's own run-to-run
noise: bench/gpu/launchcost_h200.sh runs the methods and writes the table.

Prints and writes (--result) JSON: us per launch per round, their median and minimum.
"""

import argparse
import json
import statistics
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--per-round", type=int, default=10000, help="launches per timed round")
    p.add_argument("--warmup", type=int, default=5000)
    p.add_argument("--depth", type=int, default=40, help="Python frames below the launching frame")
    p.add_argument("--torch-profiler", action="store_true", help="run the rounds inside torch.profiler.profile")
    p.add_argument("--result", default="")
    p.add_argument("--table", default="", metavar="DIR",
                   help="no run: the markdown table of DIR/METHOD-REP.json (what launchcost_h200.sh wrote)")
    return p.parse_args(argv)


def rounds(torch, a):
    x = torch.zeros(1, device="cuda")
    for _ in range(a.warmup):
        x.add_(1)
    torch.cuda.synchronize()
    out = []
    for _ in range(a.rounds):
        t0 = time.perf_counter_ns()
        for _ in range(a.per_round):
            x.add_(1)
        torch.cuda.synchronize()
        out.append((time.perf_counter_ns() - t0) / a.per_round / 1e3)
    want = float(a.warmup + a.rounds * a.per_round)
    got = float(x.item())
    if got != want:   # every launch ran: the timing is of real work
        raise SystemExit("launchcost: the tensor holds %.0f, want %.0f" % (got, want))
    return out


def at_depth(n, fn):
    """fn() called n frames down, as a launch deep in a model's forward would be."""
    if n <= 0:
        return fn()
    return at_depth(n - 1, fn)


def table(d):
    """Per method: the median us per launch of each run, and the added cost against `none` of the
    same repetition (runs alternate, so a pair shares the host's state)."""
    import glob
    import os
    runs = {}
    for f in sorted(glob.glob(os.path.join(d, "*-*.json"))):
        m, rep = os.path.basename(f)[:-5].rsplit("-", 1)
        with open(f) as fh:
            runs.setdefault(m, {})[rep] = json.load(fh)["median_us"]
    if "none" not in runs:
        raise SystemExit("launchcost: no none-*.json in %s" % d)
    lines = ["| method | us per launch, median [min-max] (runs) | added per launch, median of pairs [min-max] |",
             "|---|---|---|"]
    order = ["none", "ebpf", "full", "torchprof"] + sorted(set(runs) - {"none", "ebpf", "full", "torchprof"})
    for m in order:
        if m not in runs:
            continue
        v = sorted(runs[m].values())
        row = "| %s | %.2f [%.2f-%.2f] (%d) |" % (m, statistics.median(v), v[0], v[-1], len(v))
        if m == "none":
            row += " - |"
        else:
            dd = sorted(runs[m][r] - runs["none"][r] for r in runs[m] if r in runs["none"])
            row += " %+.2f [%+.2f..%+.2f] |" % (statistics.median(dd), dd[0], dd[-1]) if dd else " no pair |"
        lines.append(row)
    return "\n".join(lines)


def main(argv=None):
    a = parse_args(argv)
    if a.table:
        print(table(a.table))
        return
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("launchcost: no CUDA device")
    sys.setrecursionlimit(max(1000, a.depth + 200))
    if a.torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            us = at_depth(a.depth, lambda: rounds(torch, a))
    else:
        us = at_depth(a.depth, lambda: rounds(torch, a))
    res = {"us_per_launch": us, "median_us": statistics.median(us), "min_us": min(us),
           "per_round": a.per_round, "rounds": a.rounds, "depth": a.depth,
           "torch_profiler": a.torch_profiler, "torch": torch.__version__}
    print(json.dumps(res))
    if a.result:
        with open(a.result, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
