"""Checks the GPU records specprof received from the injected CUPTI library (--events JSONL).

  check_cupti.py EVENTS.jsonl WINDOWS.json [PROFILER_KERNELS]

- every kernel has the CUPTI driver-API record of its correlation id, and does not start before
  that call started (the clock rule: both on CLOCK_MONOTONIC);
- every cuGraphLaunch seen by eBPF falls inside exactly one CUPTI API record of the same thread
  (start <= ktime <= end), and the kernels of that correlation id all carry a graph id: one
  replay's kernels share the launch's correlation id;
- the number of kernels launched from inside the measured loop (API start within the loop's phase
  windows) equals torch.profiler's count of the same loop in a separate run (PROFILER_KERNELS).
Exits 1 on any failure.
"""
import bisect
import collections
import json
import sys

evs = [json.loads(l) for l in open(sys.argv[1])]
windows = json.load(open(sys.argv[2]))
want_kernels = int(sys.argv[3]) if len(sys.argv) > 3 else None
kernels = [e for e in evs if e.get("kind") == "kernel"]
apis = [e for e in evs if e.get("kind") == "gpu_api"]
launches = [e for e in evs if e.get("kind") == "launch"]
api_by_corr = {a["corr"]: a for a in apis}
fail = 0

no_api = early = 0
for k in kernels:
    a = api_by_corr.get(k["corr"])
    if a is None:
        no_api += 1
    elif k["start"] < a["start"]:
        early += 1
print("kernels %d, driver-API records %d; kernels without their API record %d; kernels starting before their API call %d"
      % (len(kernels), len(apis), no_api, early))
fail |= early > 0 or len(kernels) == 0

by_tid = collections.defaultdict(list)
for a in apis:
    by_tid[a["tid"]].append((a["start"], a["end"], a["corr"]))
for v in by_tid.values():
    v.sort()
k_by_corr = collections.defaultdict(list)
for k in kernels:
    k_by_corr[k["corr"]].append(k)
joined = unjoined = nongraph = 0
per_replay = collections.Counter()
for l in launches:
    if l["api"] != "cuGraphLaunch":
        continue
    lst = by_tid.get(l["tid"], [])
    i = bisect.bisect_right(lst, (l["ktime"], float("inf"), 0)) - 1
    if i < 0 or not (lst[i][0] <= l["ktime"] <= lst[i][1]):
        unjoined += 1
        continue
    joined += 1
    ks = k_by_corr.get(lst[i][2], [])
    per_replay[len(ks)] += 1
    nongraph += sum(1 for k in ks if not k.get("graph_id"))
print("graph launches joined to their CUPTI API record %d, unjoined %d; kernels per replay %s; replay kernels without a graph id %d"
      % (joined, unjoined, dict(per_replay), nongraph))
fail |= nongraph > 0 or (joined == 0 and any(l["api"] == "cuGraphLaunch" for l in launches))

if windows:
    w0 = min(w[2] for w in windows)
    w1 = max(w[3] for w in windows)
    inloop = sum(1 for k in kernels if k["corr"] in api_by_corr and w0 <= api_by_corr[k["corr"]]["start"] <= w1)
    print("kernels launched inside the measured loop: %d (torch.profiler, separate run: %s)" % (inloop, want_kernels))
    if want_kernels is not None:
        fail |= inloop != want_kernels
sys.exit(1 if fail else 0)
