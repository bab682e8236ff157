"""Checks specprof's sync wait and per-phase GPU time on the graph EAGLE loop against the same
run's truths (bench/gpu/synccopy_h200.sh):

  accept sync wait   specprof's sync_wait per cycle in spec.accept, against the time the workload
                     measured inside each accept's .tolist() (spec_loop.py --time-tolist): the
                     blocking copy, whatever driver entry point it waits in (target: within 5 %)
  GPU time           specprof's gpu elapsed per cycle of draft / verify / draft_extend against the
                     CUDA events the workload recorded around the same phases in the same run
                     (--timing cuda-events; target: within 1 % or 20 us)

Only the cycles inside the measured loop count (cycles.jsonl, CLOCK_MONOTONIC like the
workload's loop window). Usage: synccopy_check.py OUTDIR RESULT.json; exits 1 when a target is
missed."""

import json
import os
import sys


def loop_phases(cycles_path, window):
    t0, t1 = window
    tid, n, acc = None, 0, {}
    with open(cycles_path) as f:
        for line in f:
            c = json.loads(line)
            if c.get("start", 0) < t0 or c.get("end", 0) > t1:
                continue
            tid = c.get("tid") if tid is None else tid
            if c.get("tid") != tid:
                continue
            n += 1
            for ph in c.get("phases") or []:
                st = ph.get("stats") or {}
                d = acc.setdefault(ph["phase"], {"n": 0, "gpu_n": 0, "cpu_span": 0, "sync_wait": 0, "syncs": 0,
                                                 "launches": 0, "copies": 0, "gpu_elapsed": 0, "gpu_active": 0,
                                                 "gpu_memcpys": 0, "gpu_kernels": 0})
                d["n"] += 1
                for k, f_ in (("cpu_span", "cpu_span_ns"), ("sync_wait", "sync_wait_ns"), ("syncs", "syncs"),
                              ("launches", "launches"), ("copies", "copies")):
                    d[k] += st.get(f_) or 0
                if st.get("gpu_cycles"):
                    d["gpu_n"] += 1
                    for k, f_ in (("gpu_elapsed", "gpu_elapsed_ns"), ("gpu_active", "gpu_active_ns"),
                                  ("gpu_memcpys", "gpu_memcpys"), ("gpu_kernels", "gpu_kernels")):
                        d[k] += st.get(f_) or 0
    return n, acc


def main():
    outdir, result = sys.argv[1], sys.argv[2]
    res = json.load(open(result))
    n, ph = loop_phases(os.path.join(outdir, "cycles.jsonl"), res["loop_mono_ns"])
    print("loop cycles in cycles.jsonl: %d (workload: %d)" % (n, res["cycles"]))
    ok = True
    acc = ph.get("spec.accept")
    tl = res.get("tolist_ns") or []
    if not acc or not tl:
        print("FAIL: no spec.accept phase or no tolist times")
        ok = False
    else:
        wait = acc["sync_wait"] / acc["n"] / 1e3
        span = acc["cpu_span"] / acc["n"] / 1e3
        truth = sum(tl) / len(tl) / 1e3
        dev = (wait - truth) / truth * 100
        print("accept: sync wait %.1f us/cycle (%.2f syncs, %.2f copies), .tolist() %.1f us (%+.1f %%), "
              "cpu span %.1f us, span - .tolist() %.1f us"
              % (wait, acc["syncs"] / acc["n"], acc["copies"] / acc["n"], truth, dev, span, span - truth))
        if abs(dev) > 5:
            print("FAIL: accept's sync wait is off by more than 5 %")
            ok = False
    evs = res.get("phases") or {}
    for name in ("spec.draft", "spec.verify", "spec.accept", "spec.draft_extend"):
        d, e = ph.get(name), evs.get(name)
        if not d or not d["gpu_n"] or not e:
            print("%s: no GPU figures (specprof %s, events %s)" % (name, bool(d and d["gpu_n"]), bool(e)))
            if name in ("spec.draft", "spec.verify"):
                ok = False
            continue
        el = d["gpu_elapsed"] / d["gpu_n"] / 1e3
        act = d["gpu_active"] / d["gpu_n"] / 1e3
        ev = e["mean_ms"] * 1e3
        diff = el - ev
        print("%-18s gpu elapsed %8.1f us, active %8.1f us, events %8.1f us: %+6.1f us (%+.2f %%); "
              "%.1f kernels, %.1f copies/sets, %d GPU cycles"
              % (name, el, act, ev, diff, diff / ev * 100, d["gpu_kernels"] / d["gpu_n"],
                 d["gpu_memcpys"] / d["gpu_n"], d["gpu_n"]))
        if name in ("spec.draft", "spec.verify") and abs(diff) > max(20, 0.01 * ev):
            print("FAIL: %s's GPU time is off by more than 1 %% and 20 us" % name)
            ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
