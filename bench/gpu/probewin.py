#!/usr/bin/env python3
"""Splits the generates made during `specprof attach --probe-duty ... -v` (bench/gpu/abattach.py)
by the probe windows: those overlapping a window, and those made between windows (no probe in
place), in each attach's first S seconds (the agent still learning the code objects) and after.

Input: abattach.py's output directory with ab.json and windows.txt (the attaches' "probe window"
debug lines: `grep -h "probe window" on-*/stderr.txt`). Each generate's slowdown is its duration
over the median of the same prompt's generates made without specprof just before and just after
its attach, minus 1: alternating attached and away periods lets a slow drift of the host cancel.

Usage: probewin.py DIR [--skip-s S]  (S: leave out the attach's first S seconds, default 60)
"""

import argparse
import calendar
import json
import os
import re
import statistics
import sys
import time

LINE = re.compile(r'^time=(\S+) level=\w+ msg="probe window (open|closed|closing)" window=(\d+)(?: \w+=(\S+))?')


def parse_time(s):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError("not an RFC 3339 time: %r" % s)
    base = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    tz = m.group(3)
    off = 0 if tz == "Z" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return base + float(m.group(2) or 0.0) - off


def duration_s(v):
    """A Go duration as slog prints it (5.847ms, 101.639ms, 1.2s, 850µs) in seconds."""
    m = re.match(r"^([0-9.]+)(ns|µs|us|ms|s)$", v or "")
    if not m:
        return 0.0
    return float(m.group(1)) * {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def windows(lines, attaches):
    """[(start, end)] of the probe windows, in wall-clock seconds. A window runs from its "probe
    window open" line less the attach time it logs, or, for each attach's first window (opened
    before the agent logs anything), from the attach's "probes attached" time, to its "probe
    window closed" line; a window still open when its attach ended runs to the attach's exit."""
    events = []
    for line in lines:
        m = LINE.match(line.strip())
        if m and m.group(2) in ("open", "closed"):
            t = parse_time(m.group(1))
            events.append((t - duration_s(m.group(4)) if m.group(2) == "open" else t, m.group(2)))
    events.sort()
    out = []
    for att in attaches:
        if att.get("attached") is None:
            continue
        start = att["attached"]
        for t, what in events:
            if not (att["attached"] <= t <= att["exit"]):
                continue
            if what == "open":
                start = t
            elif start is not None:
                out.append((start, t))
                start = None
        if start is not None:
            out.append((start, att["exit"]))
    return out


def split(ab, wins, skip_s):
    """Each generate made while attached, as a slowdown against the same prompt's generates made
    without specprof just before and just after that attach (so a slow drift of the host cancels),
    sorted into groups."""
    atts = ab["windows"]
    reps = ab["repeats"]
    groups = {"overlapping a probe window": [], "between windows": [], "between windows, in the skip": [],
              "between windows, after the skip": []}
    nref = 0
    for i, att in enumerate(atts):
        if att.get("attached") is None or att.get("rc", 0) != 0:
            continue
        lo = atts[i - 1]["exit"] if i > 0 else float("-inf")
        hi = atts[i + 1]["spawn"] if i + 1 < len(atts) else float("inf")
        ref = {}
        for r in reps:
            if (lo < r["t0"] and r["t1"] < att["spawn"]) or (att["exit"] < r["t0"] and r["t1"] < hi):
                ref.setdefault(r["prompt"], []).append(r["t1"] - r["t0"])
        nref += sum(len(v) for v in ref.values())
        for r in reps:
            if not (att["attached"] <= r["t0"] and r["t1"] <= att["until"]) or r["prompt"] not in ref:
                continue
            s = (r["t1"] - r["t0"]) / statistics.median(ref[r["prompt"]]) - 1
            if any(a < r["t1"] and r["t0"] < b for a, b in wins):
                groups["overlapping a probe window"].append(s)
            else:
                groups["between windows"].append(s)
                late = r["t0"] >= att["attached"] + skip_s
                groups["between windows, after the skip" if late else "between windows, in the skip"].append(s)
    return groups, nref


def render(groups, nref, natt, nwin, skip_s):
    lines = ["| generates made while attached | n | slowdown, median | mean |", "|---|---|---|---|"]
    for name, v in groups.items():
        label = name.replace("after the skip", "after the attach's first %g s" % skip_s).replace(
            "in the skip", "in the attach's first %g s" % skip_s)
        if v:
            lines.append("| %s | %d | %+.1f %% | %+.1f %% |" % (label, len(v), 100 * statistics.median(v),
                                                              100 * statistics.mean(v)))
        else:
            lines.append("| %s | 0 | — | — |" % label)
    lines += ["", "%d attaches, %d probe windows; reference: %d generates made without specprof, "
              "each attach's generates against the same prompt's just before and after it." % (natt, nwin, nref)]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--skip-s", type=float, default=60.0)
    a = p.parse_args(argv)
    with open(os.path.join(a.dir, "ab.json")) as f:
        ab = json.load(f)
    atts = [w for w in ab.get("windows", []) if w.get("attached") is not None and w.get("rc", 0) == 0]
    if not atts:
        sys.exit("probewin.py: no attach with its probes attached in ab.json")
    with open(os.path.join(a.dir, "windows.txt")) as f:
        wins = windows(f.read().splitlines(), ab["windows"])
    if not wins:
        sys.exit("probewin.py: no probe window in windows.txt (attach with --probe-duty and -v)")
    groups, nref = split(ab, wins, a.skip_s)
    sys.stdout.write(render(groups, nref, len(atts), len(wins), a.skip_s))


if __name__ == "__main__":
    main()
