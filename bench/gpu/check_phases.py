"""Checks specprof's attributed calls (--events JSONL) against spec_loop.py's own phase windows.

Every call whose ktime falls inside a phase window of its thread must carry that phase (the
innermost window when they nest). Prints counts per phase and exits 1 on any mismatch.
"""
import collections
import json
import sys

events = [json.loads(l) for l in open(sys.argv[1])]
windows = json.load(open(sys.argv[2]))
by_tid = collections.defaultdict(list)
for name, tid, t0, t1 in windows:
    by_tid[tid].append((t0, t1, name))
for w in by_tid.values():
    w.sort()
counts = collections.Counter()
bad = 0
checked = 0
for e in events:
    if e["kind"] in ("sync_exit", "kernel", "gpu_api") or "ktime" not in e:
        continue
    inner = None
    for t0, t1, name in by_tid.get(e["tid"], []):
        if t0 <= e["ktime"] <= t1 and (inner is None or t0 >= inner[0]):
            inner = (t0, t1, name)
    if inner is None:
        continue
    checked += 1
    counts[(inner[2], e["api"])] += 1
    if e["phase"] != inner[2]:
        bad += 1
        if bad <= 10:
            print("MISMATCH", e, "window", inner)
print("calls inside phase windows:", checked, "misattributed:", bad)
for k, v in sorted(counts.items()):
    print("  %-18s %-22s %d" % (k[0], k[1], v))
sys.exit(1 if bad or checked == 0 else 0)
