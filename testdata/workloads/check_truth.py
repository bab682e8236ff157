#!/usr/bin/env python3
"""Checks a stand-in ground-truth file (SPECPROF_SIM_TRUTH, JSON lines) written while running
sglang_demo.py, and prints the API calls per (thread, tag, api).

    python3 testdata/workloads/check_truth.py /tmp/t.jsonl [--pid PID] [--all-apis] [--json]

Records of kind `api` (libcuda) and `coll` (libnccl; shown as api `nccl<Op>`) are counted.
Fails (exit 1) when
  - a GPU operation (kernel, memcpy, memset record) has an empty tag;
  - a hooked API call (launches, graph launches, synchronizations, copies, capture, NCCL) has an
    empty tag (with --all-apis: any API call);
  - a tag is not one of the sglang preset's phases (or `other`);
  - an API call returned an error;
  - stream capture / graph instantiation is not tagged `other` (capture runs at startup);
  - a graph is launched outside spec.draft / spec.verify / spec.draft_extend.
Per thread, the number of cycles is the number of blocking accept-length copies (one per cycle,
tag spec.accept), and the table also shows calls per cycle for the cycle phases.
"""

import argparse
import collections
import json
import re
import sys

HOOKED = re.compile(
    r"^(cuLaunch|cuGraphLaunch|cuStreamSynchronize|cuEventSynchronize|cuCtxSynchronize|"
    r"cuStreamWaitEvent|cuMemcpy|cuStreamBeginCapture|cuStreamEndCapture|cuGraphInstantiate|nccl)")
CAPTURE = re.compile(r"^(cuStreamBeginCapture|cuStreamEndCapture|cuGraphInstantiate)")
SYNC_COPY = re.compile(r"^(cuMemcpyDtoH(_v2)?(_ptds)?|cuMemcpyDtoHAsync\w*)$")
PHASES = [
    "spec.draft", "spec.verify", "spec.accept", "spec.draft_extend", "spec.cycle_other",
    "spec.prefill", "sched.run_other", "sched.result", "sched.metrics", "sched.batch",
    "sched.recv", "sched.loop", "other",
]
CYCLE_PHASES = set(PHASES) - {"other"}
GRAPH_PHASES = {"spec.draft", "spec.verify", "spec.draft_extend"}


def load(path, pid=None):
    """API records (kind api, plus kind coll as api `nccl<Op>`) and GPU operation records."""
    recs, ops = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise SystemExit("%s:%d: bad JSON: %s" % (path, n, e))
            kind = r.get("kind")
            if pid is not None and r.get("pid") != pid:
                continue
            if kind == "api":
                recs.append(r)
            elif kind == "coll":  # written by the stand-in libnccl, one per NCCL call
                r = dict(r)
                r["api"] = "nccl" + str(r.get("op", "?"))
                recs.append(r)
            elif kind in ("kernel", "memcpy", "memset"):
                ops.append(r)
    return recs, ops


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("truth", help="truth file (JSON lines)")
    p.add_argument("--pid", type=int, help="only records of this process")
    p.add_argument("--all-apis", action="store_true",
                   help="require a tag on every API call, not only the hooked ones")
    p.add_argument("--phases",
                   help="comma-separated phase names the tags may use, for the conformance "
                        "workloads of other servers (default: the sglang preset's)")
    p.add_argument("--json", action="store_true",
                   help="print {tid: {tag: {api: n}}} as JSON instead of the table")
    a = p.parse_args(argv)

    phases = a.phases.split(",") + ["other"] if a.phases else PHASES
    recs, ops = load(a.truth, a.pid)
    errors = []
    for r in ops:
        if not r.get("tag"):
            errors.append("%s %s (corr %s, %s) has no tag"
                          % (r.get("kind"), r.get("name") or r.get("copy_kind"), r.get("corr"),
                             r.get("api")))
    counts = collections.OrderedDict()  # (pid, tid) -> Counter[(tag, api)]
    for r in recs:
        key = (r.get("pid"), r.get("tid"))
        c = counts.get(key)
        if c is None:
            c = counts[key] = collections.Counter()
        api, tg = r.get("api", ""), r.get("tag", "")
        c[(tg, api)] += 1
        where = "corr %s %s (tid %s)" % (r.get("corr"), api, r.get("tid"))
        if r.get("result", 0) != 0:
            errors.append("%s returned %s" % (where, r.get("result")))
        if not tg:
            if a.all_apis or HOOKED.match(api):
                errors.append("%s has no tag" % where)
            continue
        # Conformance tags name the cycle too: phase@N or phase@TID:N
        # (testdata/conformance/README.md).
        ph, _, cyc = tg.partition("@")
        if cyc and not re.match(r"^(\d+:)?\d+$", cyc):
            errors.append("%s has a malformed cycle in tag %r" % (where, tg))
        if ph not in phases:
            errors.append("%s has unknown tag %r" % (where, tg))
        if CAPTURE.match(api) and ph != "other" and not a.phases:
            errors.append("%s: capture call tagged %r, want 'other'" % (where, tg))
        if api.startswith("cuGraphLaunch") and ph not in GRAPH_PHASES and not a.phases:
            errors.append("%s: graph launch tagged %r" % (where, tg))

    if not recs:
        errors.append("no api records in %s" % a.truth)

    if a.json:
        out = {}
        for (pid, tid), c in counts.items():
            per = out.setdefault("%s/%s" % (pid, tid), {})
            for (tg, api), n in sorted(c.items()):
                per.setdefault(tg, {})[api] = n
        print(json.dumps(out, indent=1, sort_keys=True))
    else:
        order = {ph: i for i, ph in enumerate(PHASES)}
        for (pid, tid), c in counts.items():
            cycles = sum(n for (tg, api), n in c.items()
                         if tg == "spec.accept" and SYNC_COPY.match(api))
            print("pid %s tid %s: %d api calls, %d cycles" % (pid, tid, sum(c.values()), cycles))
            print("  %-18s %-30s %8s %10s" % ("tag", "api", "calls", "per cycle"))
            for (tg, api), n in sorted(c.items(),
                                       key=lambda kv: (order.get(kv[0][0], 99), kv[0][0],
                                                       kv[0][1])):
                per = ("%10.2f" % (n / float(cycles))) if cycles and tg in CYCLE_PHASES else ""
                print("  %-18s %-30s %8d %10s" % (tg or "(none)", api, n, per))
    for e in errors[:50]:
        sys.stderr.write("check_truth: FAIL: %s\n" % e)
    if len(errors) > 50:
        sys.stderr.write("check_truth: ... %d more failures\n" % (len(errors) - 50))
    if errors:
        return 1
    sys.stderr.write("check_truth: OK (%d api/coll records, %d GPU operations)\n"
                     % (len(recs), len(ops)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
