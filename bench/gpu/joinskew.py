#!/usr/bin/env python3
"""Where CUPTI's API records sit against the launches eBPF saw, per duty window (issue 6).

    python3 bench/gpu/joinskew.py EVENTS.jsonl [SPECPROF_STDERR.log]

EVENTS.jsonl is `specprof run --events` output; the log (from `specprof run -v`) gives the windows
("GPU tracing window" lines with a close). For each window, or the whole run without a log: the
launches and API records in it, how many API records contain a launch of their thread (start - 2 ms
.. end, the joiner's slack), and the offset from each record's start to the nearest launch of its
thread (median, min, max, in µs). A clock that drifts shows as offsets far from 0; records that
exist but contain no launch show as contained << records.
"""

import bisect
import json
import re
import statistics
import sys

SLACK = 2_000_000


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    launches, apis = {}, []
    with open(argv[1]) as f:
        for line in f:
            d = json.loads(line)
            k = d.get("kind")
            if k == "launch":
                launches.setdefault(d["tid"], []).append(d["ktime"])
            elif k == "gpu_api":
                apis.append((d["start"], d["end"], d["tid"], d["corr"]))
    for v in launches.values():
        v.sort()
    # CUPTI gives every call its own correlation id; on the H200 (session 12) a duty window's records
    # and kernels all carried one id from some window on, so the joiner dropped them as duplicates.
    seen, dups, first_dup = set(), 0, None
    for s, e, tid, corr in apis:
        if corr in seen:
            dups += 1
            if first_dup is None:
                first_dup = (s, corr)
        seen.add(corr)
    print("API records %d, with a correlation id seen before: %d%s" % (
        len(apis), dups, "" if first_dup is None else " (first at %.3f s, id %d)" % (first_dup[0] / 1e9, first_dup[1])))
    apis = sorted(a[:3] for a in apis)
    windows = []
    if len(argv) > 2:
        pat = re.compile(r'msg="GPU tracing window" .*open=(\d+) close=(\d+)')
        with open(argv[2], errors="replace") as f:
            for line in f:
                m = pat.search(line)
                if m and m.group(2) != "0":
                    windows.append((int(m.group(1)), int(m.group(2))))
    if not windows:
        lo = min([a[0] for a in apis] + [v[0] for v in launches.values() if v])
        windows = [(lo, 1 << 63)]
    print("| window open (s) | length ms | launches | API records | records containing a launch | "
          "offset to nearest launch µs: median [min..max] |")
    print("|---|---|---|---|---|---|")
    for o, c in windows:
        nl = sum(bisect.bisect_right(v, c) - bisect.bisect_left(v, o) for v in launches.values())
        rs = apis[bisect.bisect_left(apis, (o, 0, 0)):bisect.bisect_right(apis, (c, 1 << 63, 0))]
        contained, offs = 0, []
        for s, e, tid in rs:
            v = launches.get(tid, [])
            i = bisect.bisect_left(v, s - SLACK)
            if i < len(v) and v[i] <= e:
                contained += 1
            j = bisect.bisect_left(v, s)
            near = [v[x] - s for x in (j - 1, j) if 0 <= x < len(v)]
            if near:
                offs.append(min(near, key=abs))
        off = ("%.0f [%.0f..%.0f]" % (statistics.median(offs) / 1e3, min(offs) / 1e3, max(offs) / 1e3)
               if offs else "-")
        print("| %.3f | %.1f | %d | %d | %d | %s |" % (o / 1e9, (min(c, 1 << 62) - o) / 1e6 if c < 1 << 62 else 0,
                                                      nl, len(rs), contained, off))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
