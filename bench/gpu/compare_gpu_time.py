"""Per-phase GPU time: specprof (report.json, GPU busy and span per cycle) vs CUDA events around
each phase in a separate run of the same script (the ground truth of the benchmark issue).

  compare_gpu_time.py REPORT.json CUDA_EVENTS.json
"""
import json
import sys

rep = json.load(open(sys.argv[1]))
truth = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["cuda_event_ms"]
phases = {}
cycles = 0
for p in rep["processes"]:
    for t in p["threads"]:
        if t["cycles"]:
            cycles += t["cycles"]
            for ph in t["phases"]:
                acc = phases.setdefault(ph["phase"], [0, 0, 0])
                acc[0] += ph.get("gpu_busy_ns", 0)
                acc[1] += ph.get("gpu_span_ns", 0)
                acc[2] += ph.get("gpu_cycles", 0)
print("%-18s %12s %12s %14s %8s" % ("phase", "busy ms", "span ms", "cuda events ms", "span/ev"))
for name, ev in sorted(truth.items()):
    busy, span, n = phases.get(name, [0, 0, 0])
    n = n or 1
    b, s = busy / n / 1e6, span / n / 1e6
    print("%-18s %12.4f %12.4f %14.4f %8.3f" % (name, b, s, ev, s / ev if ev else float("nan")))
