"""Per-phase GPU time: specprof (report.json, GPU busy and span per cycle) vs CUDA events around
each phase in a separate run of the same script (the ground truth of the correlator issue).

  compare_gpu_time.py REPORT.json CUDA_EVENTS.json [CYCLES.jsonl WINDOWS.json]

With specprof's cycles.jsonl and the loop's phase windows, only the cycles inside the measured loop
count (the report's totals include warm-up cycles: graph capture, first calls).

CUDA events on the phase's stream measure from the phase's first GPU work to its last, gaps
included: specprof's GPU span (first kernel start to last kernel end) is the comparable figure;
busy (the union of kernel intervals) is at most that. Passes when every phase's span per cycle is
within 1 % or 20 us of the events' mean (exit 0), else exit 1. The two runs differ (separate
processes), so a few us of run-to-run noise is expected.
"""
import json
import sys

rep = json.load(open(sys.argv[1]))
truth = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["cuda_event_ms"]
phases = {}
if len(sys.argv) > 4:
    wins = json.load(open(sys.argv[4]))
    t0, t1 = min(w[2] for w in wins), max(w[3] for w in wins)
    n = 0
    for line in open(sys.argv[3]):
        c = json.loads(line)
        if c["start"] < t0 or c["end"] > t1:
            continue
        n += 1
        for ph in c["phases"]:
            st = ph["stats"]
            if st.get("gpu_cycles"):
                acc = phases.setdefault(ph["phase"], [0, 0, 0])
                acc[0] += st.get("gpu_busy_ns", 0)
                acc[1] += st.get("gpu_span_ns", 0)
                acc[2] += 1
    print("cycles inside the measured loop: %d" % n)
else:
    for p in rep["processes"]:
        for t in p["threads"]:
            if t["cycles"]:
                for ph in t["phases"]:
                    acc = phases.setdefault(ph["phase"], [0, 0, 0])
                    acc[0] += ph.get("gpu_busy_ns", 0)
                    acc[1] += ph.get("gpu_span_ns", 0)
                    acc[2] += ph.get("gpu_cycles", 0)
print("%-18s %10s %10s %14s %10s %8s %s" % ("phase", "busy ms", "span ms", "cuda events ms", "diff us", "diff %", "verdict"))
fail = 0
for name, ev in sorted(truth.items()):
    busy, span, n = phases.get(name, [0, 0, 0])
    if not n:
        print("%-18s %10s %10s %14.4f %10s %8s %s" % (name, "-", "-", ev, "-", "-", "MISSING"))
        fail = 1
        continue
    b, s = busy / n / 1e6, span / n / 1e6
    d = s - ev
    ok = abs(d) <= max(0.01 * ev, 0.020)
    fail |= not ok
    print("%-18s %10.4f %10.4f %14.4f %10.1f %8.2f %s" % (name, b, s, ev, d * 1e3, 100 * d / ev if ev else 0,
                                                        "ok" if ok else "OFF"))
sys.exit(1 if fail else 0)
